//! The live state of one run and the broadcast of its changes to connected pages.

use crate::frame::FrameBuilder;
use crate::series::Downsampler;
use crate::sysstat::Sampler;
use msgbench_metrics::EventKind;
use msgbench_metrics::aggregate::Integrity;
use msgbench_report::{EventRecord, Record};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// Events kept for pages that connect later (older ones are only counted).
const KEPT_EVENTS: usize = 200;

/// One message to the pages: an SSE event name and its JSON data.
#[derive(Debug)]
pub struct Message {
    /// `hello`, `point`, `event` or `end`.
    pub kind: &'static str,
    /// JSON.
    pub data: String,
}

/// Running totals shown above the charts.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Totals {
    /// Seconds since the start of the run (end of the last interval).
    pub elapsed_s: f64,
    /// Messages sent.
    pub sent: u64,
    /// Deliveries of our messages (duplicates included).
    pub received: u64,
    /// Errors of every kind.
    pub errors: u64,
    /// Sequence gaps still open (losses, for fan-out subscriptions).
    pub open_gaps: u64,
    /// Duplicate deliveries.
    pub duplicated: u64,
    /// Out-of-order deliveries.
    pub reordered: u64,
    /// Interval records seen.
    pub intervals: u64,
}

/// What the `end` record says, for the page.
#[derive(Debug, Clone, Serialize)]
struct EndInfo {
    duration_s: f64,
    interrupted: bool,
    integrity: Integrity,
    warnings: Vec<String>,
}

/// Run metadata from `begin`.
#[derive(Debug, Clone, Serialize)]
struct Meta {
    name: String,
    target: String,
    tool: String,
    hostname: String,
    cpus: u32,
    started_unix_ms: u64,
    plan: serde_json::Value,
}

#[derive(Default)]
struct State {
    meta: Option<Meta>,
    frame: Option<FrameBuilder>,
    series: Option<Downsampler>,
    events: VecDeque<EventRecord>,
    events_seen: u64,
    totals: Totals,
    phase: String,
    end: Option<EndInfo>,
}

/// The live state and its subscribers.
pub struct Hub {
    cap: usize,
    state: Mutex<State>,
    tx: broadcast::Sender<Arc<Message>>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").field("cap", &self.cap).finish()
    }
}

#[derive(Serialize)]
struct Hello<'a> {
    meta: Option<&'a Meta>,
    series: Option<&'a Downsampler>,
    events: &'a VecDeque<EventRecord>,
    events_seen: u64,
    totals: Totals,
    phase: &'a str,
    end: Option<&'a EndInfo>,
}

#[derive(Serialize)]
struct Point<'a> {
    row: &'a [f64],
    totals: Totals,
    phase: &'a str,
}

fn json<T: Serialize>(v: &T) -> String {
    // Only plain data is serialized here; NaN becomes null.
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

impl Hub {
    /// A hub whose series keep at most `cap` points.
    pub fn new(cap: usize) -> Self {
        let (tx, _) = broadcast::channel(super::BACKLOG);
        Hub {
            cap,
            state: Mutex::new(State::default()),
            tx,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: keep serving it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn hello(st: &State) -> String {
        json(&Hello {
            meta: st.meta.as_ref(),
            series: st.series.as_ref(),
            events: &st.events,
            events_seen: st.events_seen,
            totals: st.totals,
            phase: &st.phase,
            end: st.end.as_ref(),
        })
    }

    /// The state so far as a `hello` payload, and a receiver of every message after it (taken
    /// under the same lock, so nothing is missed or seen twice).
    pub fn subscribe(&self) -> (Arc<str>, broadcast::Receiver<Arc<Message>>) {
        let st = self.lock();
        let rx = self.tx.subscribe();
        (Self::hello(&st).into(), rx)
    }

    fn send(&self, kind: &'static str, data: String) {
        // No subscribers is fine: nobody is watching.
        let _ = self.tx.send(Arc::new(Message { kind, data }));
    }

    /// Adds a finished chart row to the history and streams it to every viewer.
    fn point(&self, series: &mut Downsampler, row: Vec<f64>, totals: Totals, phase: &str) {
        let msg = json(&Point {
            row: &row,
            totals,
            phase,
        });
        series.push(row);
        self.send("point", msg);
    }

    /// Applies one record of the run (the ingest task calls this for every record in order).
    pub fn apply(&self, r: &Record, sampler: &mut Sampler) {
        let mut st = self.lock();
        match r {
            Record::Begin(b) => {
                let frame = FrameBuilder::new(b, true);
                *st = State {
                    meta: Some(Meta {
                        name: b
                            .plan
                            .get("name")
                            .and_then(|v| v.as_str())
                            .unwrap_or("")
                            .into(),
                        target: b
                            .plan
                            .get("target")
                            .and_then(|v| v.as_str())
                            .unwrap_or("")
                            .into(),
                        tool: b.tool.clone(),
                        hostname: b.host.hostname.clone(),
                        cpus: b.host.cpus,
                        started_unix_ms: b.started_unix_ms,
                        plan: b.plan.clone(),
                    }),
                    series: Some(Downsampler::new(frame.schema().clone(), self.cap)),
                    frame: Some(frame),
                    phase: "starting".into(),
                    ..State::default()
                };
                let hello = Self::hello(&st);
                self.send("hello", hello);
            }
            Record::Interval(iv) => {
                let sample = sampler.sample();
                let st = &mut *st;
                let (Some(frame), Some(series)) = (st.frame.as_mut(), st.series.as_mut()) else {
                    return;
                };
                let row = frame.row(iv, Some(&sample));
                let c = &iv.counters;
                let t = &mut st.totals;
                t.elapsed_s = t.elapsed_s.max(iv.end_s);
                t.sent += c.sent;
                t.received += c.received;
                t.errors += c.errors.total();
                t.duplicated += c.duplicated;
                t.reordered += c.reordered;
                t.intervals += 1;
                // Gaps are filled only after they opened, so the balance never goes negative.
                t.open_gaps = (t.open_gaps + c.gaps_opened).saturating_sub(c.gaps_filled);
                // A short window is carried into the next point: no point for it yet.
                if let Some(row) = row {
                    self.point(series, row, st.totals, &st.phase);
                }
            }
            Record::Event(e) => {
                if e.kind == EventKind::Phase {
                    // `warmup`, `measure`, `drain`, then `end` once the run stops.
                    st.phase = e.detail.clone();
                }
                st.events_seen += 1;
                if st.events.len() == KEPT_EVENTS {
                    st.events.pop_front();
                }
                st.events.push_back(e.clone());
                self.send("event", json(e));
            }
            Record::SearchStep(_) | Record::Search(_) => {}
            Record::End(e) => {
                let st = &mut *st;
                if let (Some(frame), Some(series)) = (st.frame.as_mut(), st.series.as_mut())
                    && let Some(row) = frame.flush()
                {
                    self.point(series, row, st.totals, &st.phase);
                }
                let info = EndInfo {
                    duration_s: e.duration_s,
                    interrupted: e.interrupted,
                    integrity: e.integrity,
                    warnings: e.warnings.clone(),
                };
                st.phase = "finished".into();
                let msg = json(&info);
                st.end = Some(info);
                self.send("end", msg);
            }
        }
    }

    /// Points held now (tests: the memory bound).
    pub fn points_held(&self) -> usize {
        self.lock().series.as_ref().map_or(0, |s| s.len())
    }
}
