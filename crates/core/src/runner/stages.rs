//! The stage listener: one task per queue that stages are observed on. recv → pick the stage
//! (by body, on queues several stages share) → find the message by the keys the event carries →
//! record the stage's latency from the intended send time, or a duplicate, a failure, an event
//! of no message of ours. It owns its recorder, so recording takes no lock; only the tracker
//! lookup does (see [`super::tracker`]).

use super::produce::Ticker;
use super::state::RunState;
use super::tracker::{Seen, Tracker};
use crate::clock::{now_ns, to_instant};
use crate::driver::{Consumer, Delivery};
use crate::scenario::{KeySource, StagePlan, Template, TemplateVars};
use crate::stamp::Stamp;
use msgbench_metrics::{Phase, Recorder, Role, Snapshot};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch;

/// Events on a queue that matched none of its stages, for the end-of-run warning.
#[derive(Debug, Default)]
pub(crate) struct Unmatched {
    /// The queue.
    pub queue: String,
    /// How many.
    pub count: u64,
    /// The first few distinct bodies, shortened.
    pub samples: Vec<String>,
}

/// Everything a stage listener needs besides its driver handle.
pub(crate) struct StageListener {
    /// Task index (after the consumers').
    pub id: u32,
    pub queue: String,
    /// Every stage of the plan (indices are stage numbers).
    pub stages: Arc<Vec<StagePlan>>,
    /// The stages observed on this queue, in plan order.
    pub mine: Vec<u16>,
    /// The tracking key template (for stamp keys).
    pub key: Template,
    pub tracker: Arc<Tracker>,
    pub run_id: u32,
    pub t0_ns: u64,
    pub tick_ns: u64,
    pub state: Arc<RunState>,
    pub snapshots: UnboundedSender<Snapshot>,
    pub stop: watch::Receiver<bool>,
}

/// The key `src` names in `d`, if it carries one (stamp keys are read separately).
fn key_of<'d>(src: &KeySource, d: &'d Delivery) -> Option<Cow<'d, str>> {
    let meta = d.meta.as_deref();
    match src {
        KeySource::Stamp => None,
        KeySource::CorrelationId => meta?.correlation_id.as_deref().map(Cow::Borrowed),
        KeySource::MessageId => meta?.message_id.as_deref().map(Cow::Borrowed),
        KeySource::Property(name) => match meta?.property(name)? {
            crate::meta::Value::Str(s) => Some(Cow::Borrowed(s.as_str())),
            other => Some(Cow::Owned(other.to_string())),
        },
    }
}

impl StageListener {
    /// The stage an event belongs to: the first of this queue's stages whose body filter it
    /// passes.
    fn stage_for(&self, body: &[u8]) -> Option<u16> {
        self.mine.iter().copied().find(|&i| {
            self.stages[i as usize]
                .body
                .as_ref()
                .is_none_or(|b| b.as_bytes() == body)
        })
    }

    fn on_event(
        &self,
        rec: &mut Recorder,
        d: &Delivery,
        stamp_key: &mut String,
        un: &mut Unmatched,
    ) {
        let now = now_ns();
        let Some(i) = self.stage_for(&d.payload) else {
            un.count += 1;
            if un.samples.len() < 3 {
                let s: String =
                    String::from_utf8_lossy(&d.payload[..d.payload.len().min(40)]).into();
                if !un.samples.contains(&s) {
                    un.samples.push(s);
                }
            }
            return;
        };
        let st = &self.stages[i as usize];
        // The keys this event carries, in the order the stage tries them.
        let mut keys: Vec<Cow<'_, str>> = Vec::with_capacity(st.keys.len());
        for src in &st.keys {
            if *src == KeySource::Stamp {
                if let Ok(s) = Stamp::find(&d.payload)
                    && s.run_id == self.run_id
                {
                    self.key.render(
                        &TemplateVars {
                            key: "",
                            n: 0,
                            seq: s.seq,
                            producer: s.producer,
                            run: s.run_id,
                        },
                        stamp_key,
                    );
                    keys.push(Cow::Owned(stamp_key.clone()));
                }
            } else if let Some(k) = key_of(src, d) {
                keys.push(k);
            }
        }
        let failed = st.failure
            || st
                .error_property
                .as_deref()
                .is_some_and(|p| d.meta.as_deref().is_some_and(|m| m.property(p).is_some()));
        let r = rec.stage(i);
        let seen = if failed {
            self.tracker.fail(keys.iter().map(|k| k.as_ref()), now)
        } else {
            let rekey = st
                .rekey
                .as_ref()
                .and_then(|src| key_of(src, d).map(Cow::into_owned));
            self.tracker
                .observe(keys.iter().map(|k| k.as_ref()), i, now, rekey.as_deref())
        };
        match (seen, failed) {
            (Some(Seen::Reached(lat)), false) => r.reached(lat, d.payload.len()),
            (Some(Seen::Reached(_)), true) => r.failed(),
            (Some(Seen::Duplicate), _) => r.duplicate(),
            (None, _) => r.unknown(),
        }
    }

    fn flush(&self, rec: &mut Recorder, phase: Phase, interval: u64) {
        let s = rec.take(Role::Consumer, self.id, phase, interval);
        if !s.is_empty() {
            let _ = self.snapshots.send(s);
        }
    }

    pub async fn run<C: Consumer>(self, mut c: C) -> Unmatched {
        let mut rec = Recorder::new(u64::MAX);
        let mut ticker = Ticker::new(self.t0_ns, self.tick_ns);
        let mut phase = self.state.phase_at(self.t0_ns);
        let mut stop = self.stop.clone();
        let mut stamp_key = String::new();
        let mut un = Unmatched {
            queue: self.queue.clone(),
            ..Unmatched::default()
        };
        loop {
            if self.state.consumers_stopped() {
                break;
            }
            let next_tick = to_instant(ticker.next_ns);
            tokio::select! {
                biased;
                r = c.recv() => match r {
                    Ok(Some(d)) => {
                        let now = now_ns();
                        let cur = self.state.phase_at(now);
                        if cur != phase {
                            self.flush(&mut rec, phase, ticker.recording());
                            phase = cur;
                        }
                        if let Some(k) = ticker.due(now) {
                            self.flush(&mut rec, phase, k);
                        }
                        self.on_event(&mut rec, &d, &mut stamp_key, &mut un);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        rec.record_error(e.kind());
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
                _ = tokio::time::sleep_until(next_tick) => {
                    let now = now_ns();
                    let cur = self.state.phase_at(now);
                    if cur != phase {
                        self.flush(&mut rec, phase, ticker.recording());
                        phase = cur;
                    }
                    if let Some(k) = ticker.due(now) {
                        self.flush(&mut rec, phase, k);
                    }
                }
                _ = stop.changed() => break,
            }
        }
        let _ = c.close().await;
        self.flush(&mut rec, phase, ticker.recording());
        un
    }
}

/// Consumes and discards what `c` holds until it has been quiet for `quiet` (or `limit` passed):
/// events of earlier runs would otherwise count as unknown, or worse, fill the window.
/// Returns how many messages it discarded.
pub(crate) async fn clean<C: Consumer>(c: &mut C, quiet: Duration, limit: Duration) -> u64 {
    let end = tokio::time::Instant::now() + limit;
    let mut n = 0;
    loop {
        let wait = quiet.min(end.saturating_duration_since(tokio::time::Instant::now()));
        if wait.is_zero() {
            return n;
        }
        match tokio::time::timeout(wait, c.recv()).await {
            Ok(Ok(Some(_))) => n += 1,
            Ok(Ok(None)) | Err(_) => return n,
            Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}
