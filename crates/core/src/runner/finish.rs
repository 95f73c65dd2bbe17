//! How a message run ends: every task stopped and joined (by force if it will not end), the
//! last snapshots merged, the delivery account closed, the last intervals emitted and the
//! outcome written, with a warning for everything that makes its figures less trustworthy.

use super::EventKind;
use super::connect::interval_before;
use super::messages::{MessageRun, no_task_snapshot, run_event};
use super::stages::Unmatched;
use super::{Observer, RunEvent, RunOutcome, secs, stall};
use crate::clock::now_ns;
use crate::driver::DriverEvent;
use crate::scenario::StageSource;
use crate::shutdown::Shutdown;
use msgbench_metrics::{Counters, Phase, PhaseTotals, Role, Snapshot, StageEnd, StageStats};
use std::time::Duration;
use tokio::sync::mpsc;

impl MessageRun<'_> {
    /// Ends the run and writes its outcome.
    pub async fn finish(
        mut self,
        events: &mut mpsc::UnboundedReceiver<DriverEvent>,
        observer: &mut dyn Observer,
        shutdown: &Shutdown,
    ) -> RunOutcome {
        let end = now_ns();
        self.stop_tasks(end, observer, shutdown).await;
        let unmatched = self.join_listeners().await;
        self.collect_last(events, observer).await;
        self.account_forced_stops(end);
        self.close_intervals(end, observer);
        self.outcome(end, &unmatched)
    }

    /// Stops everything and joins producers and consumers. They flush and close, each bounded
    /// by the driver, normally within a connect timeout or two; a producer blocked in a send
    /// the system under test never takes, or a client that never closes, is stopped by force
    /// rather than hang the run (at the grace's end, or at a second interrupt).
    async fn stop_tasks(&mut self, end: u64, observer: &mut dyn Observer, shutdown: &Shutdown) {
        self.state.stop_producers();
        self.state.set_drain_deadline_ns(end);
        self.state.stop_consumers();
        let _ = self.stop.send(true);
        let grace = self.plan.connect_timeout * 2 + Duration::from_secs(2);
        // A producer that has been inside one send since before the drain began is held by
        // the system under test (no credit, an alarm), not closing: it gets a short grace.
        let (in_send, longest) = self.stalls.in_send(now_ns());
        let blocked = in_send > 0 && longest >= self.plan.drain;
        let producers_grace = if blocked {
            grace.min(Duration::from_secs(2))
        } else {
            grace
        };
        for (what, set, grace) in [
            ("producers", &mut self.tasks.producers, producers_grace),
            ("consumers", &mut self.tasks.consumers, grace),
        ] {
            let (_, stuck) = stall::join_or_abort(set, grace, shutdown.reached(2)).await;
            if stuck > 0 {
                let (in_send, longest) = match what {
                    "producers" => self.stalls.in_send(now_ns()),
                    _ => (0, Duration::ZERO),
                };
                let how = if in_send > 0 {
                    format!(
                        "{in_send} of them blocked in a send for {} s, which the system under \
                         test never took (flow control, e.g. no AMQP 1.0 link credit, a \
                         RabbitMQ memory or disk alarm, a full Artemis address, an HTTP/2 \
                         server that keeps its flow-control window shut)",
                        longest.as_secs()
                    )
                } else {
                    "blocked in the client".to_string()
                };
                let why = format!(
                    "{what}: {stuck} still running {grace:?} after the end (or at a second \
                     interrupt), {how}: stopped by force; what they recorded since their last \
                     interval is missing"
                );
                observer.event(&run_event(
                    self.t0,
                    EventKind::Warning,
                    why.clone(),
                    now_ns(),
                ));
                self.warnings.push(why);
            }
        }
    }

    /// Joins the stage listeners: what each saw that matched no stage.
    async fn join_listeners(&mut self) -> Vec<Unmatched> {
        let mut unmatched = Vec::new();
        while let Some(r) = self.tasks.listeners.join_next().await {
            if let Ok(u) = r
                && u.count > 0
            {
                unmatched.push(u);
            }
        }
        unmatched
    }

    /// Stops the worker threads (what is left on them ends) and takes everything still queued:
    /// snapshots, producers' failures, drivers' last events.
    async fn collect_last(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<DriverEvent>,
        observer: &mut dyn Observer,
    ) {
        drop(self.workers.take());
        while let Some(s) = self.snapshots.recv().await {
            self.agg.add(&s);
        }
        while let Ok(news) = self.news.try_recv() {
            self.producer_news(news, observer);
        }
        while let Ok(e) = events.try_recv() {
            // Refusals reported as the clients closed are still the run's, and so are the
            // warnings drivers give as they close (what a client saw over the whole run); the
            // disconnections of the closing itself are not.
            let kind = match e.kind {
                crate::driver::DriverEventKind::Refused(n) => {
                    self.extra.errors.add(msgbench_metrics::ErrorKind::Nack, n);
                    EventKind::Event
                }
                crate::driver::DriverEventKind::Warning => EventKind::Warning,
                _ => EventKind::Event,
            };
            observer.event(&RunEvent {
                at_s: secs(self.t0, now_ns()),
                kind,
                detail: e.detail,
            });
        }
    }

    /// A producer stopped by force (blocked in a send at a second interrupt or past the grace)
    /// never gave its last snapshot: what it sent since is taken from its live counter, so the
    /// delivery account stays exact (those sends have no bytes or latencies on record). Counts
    /// of no task's own not yet merged join the last interval.
    fn account_forced_stops(&mut self, end: u64) {
        let last = interval_before(end, self.t0, self.tick_ns, self.emitted);
        let phase = self.phases.phase();
        for (counter, &task) in self.sent.iter().zip(&self.producer_ids) {
            let missing = counter.get().saturating_sub(self.agg.producer_sent(task));
            if missing > 0 {
                self.agg.add(&Snapshot {
                    role: Role::Producer,
                    task,
                    phase,
                    interval: last,
                    counters: Counters {
                        sent: missing,
                        ..Default::default()
                    },
                    warmup_outcomes: Counters::default(),
                    hist: Default::default(),
                    stages: Vec::new(),
                });
            }
        }
        if self.extra != Counters::default() {
            let counters = std::mem::take(&mut self.extra);
            self.agg.add(&no_task_snapshot(phase, last, counters));
        }
    }

    /// The last CPU sample, the last phase closed at `end`, every remaining interval emitted.
    fn close_intervals(&mut self, end: u64, observer: &mut dyn Observer) {
        let phase = self.phases.phase();
        let last = interval_before(end, self.t0, self.tick_ns, self.emitted);
        // A run that ends within a tick's grace after a boundary ends before the tick that
        // would close the interval before (its CPU and loop lag, and with them its record): an
        // idle drain's last second went missing from the results file. Close it here.
        if last > 0 && self.emitted.is_none_or(|e| last - 1 > e) {
            let prev = last - 1;
            let ended_in = self
                .phases
                .phase_before(self.t0 + (prev + 1) * self.tick_ns);
            self.sample_cpu(prev, ended_in);
        }
        self.sample_cpu(last, phase);
        self.agg.end_phase(phase, secs(self.t0, end));
        for iv in self.agg.take_all_intervals() {
            observer.interval(&iv);
        }
        observer.event(&run_event(
            self.t0,
            EventKind::Phase,
            "end".into(),
            now_ns(),
        ));
    }

    /// The outcome: every phase's totals, the delivery account, the stages, and the warnings.
    fn outcome(mut self, end: u64, unmatched: &[Unmatched]) -> RunOutcome {
        let phases: Vec<PhaseTotals> = Phase::ALL
            .iter()
            .filter(|p| self.agg.phase_started(**p))
            .map(|p| self.agg.totals(*p).clone())
            .collect();
        let integrity = self.agg.integrity();
        let all = self.agg.all_counters();
        let measured_late = phases
            .iter()
            .find(|p| p.phase == Phase::Measure)
            .map_or(0, |p| p.counters.late_sends);
        self.warn_of_counts(&all, measured_late);
        self.warn_of_shortfall(&phases);
        let stages = self.stage_ends(&phases, &all);
        self.warn_of_stages(&phases, &stages, unmatched);
        self.warn_of_foreign(&all);
        RunOutcome {
            started_unix_ms: self.started_unix_ms,
            duration_s: secs(self.t0, end),
            phases,
            integrity,
            interrupted: self.interrupted,
            drain_complete: !self.drain_short,
            warnings: self.warnings,
            producers_failed: self.producers_failed,
            connections: None,
            stages,
            tcp: None,
            backlog: self.backlog.and_then(|b| b.summary(self.t0)),
            responses: None,
        }
    }

    /// Late sends, errors and unroutable returns. (Generator health is judged per interval by
    /// the report, against the generator's own threads: `msgbench_report::model::GeneratorHealth`.)
    /// (`measured_late`: the measure phase's late sends, which its latencies carry.)
    fn warn_of_counts(&mut self, all: &Counters, measured_late: u64) {
        if all.late_sends > 0 {
            self.warnings.push(format!(
                "{} sends during the run (warm-up included, {} in the measure phase) left later than {:?} after their intended time: the generator or backpressure could not keep the schedule",
                all.late_sends, measured_late, self.plan.late_threshold
            ));
        }
        if all.errors.total() > 0 {
            self.warnings
                .push(format!("{} errors during the run", all.errors.total()));
        }
        if all.returned > 0 {
            self.warnings.push(format!(
                "{} mandatory publishes came back (returned: unroutable, no queue bound for them, or refused by a queue; the events say which)",
                all.returned
            ));
        }
    }

    /// A paced run whose measure phase sent clearly fewer messages than its rate scheduled: the
    /// rate in the report is then not the offered load, and without this only the error
    /// counts hint why (a target down for most of the run had ended with exit 0 and its sent
    /// count the only sign). Said for constant and Poisson rates, from 100 scheduled
    /// messages, below 90%; not in one segment of a segmented run (the rate is the whole
    /// run's, and a segment may run no producer at all).
    fn warn_of_shortfall(&mut self, phases: &[PhaseTotals]) {
        if self.plan.segment.is_some() || self.plan.producers() == 0 {
            return;
        }
        let rate = match self.plan.rate {
            crate::pacer::RateShape::Constant { rate }
            | crate::pacer::RateShape::Poisson { rate } => rate,
            _ => return,
        };
        let Some(m) = phases.iter().find(|p| p.phase == Phase::Measure) else {
            return;
        };
        let span = m.end_s - m.start_s;
        let scheduled = rate * span;
        let sent = m.counters.sent;
        if scheduled < 100.0 || sent as f64 >= 0.9 * scheduled {
            return;
        }
        self.warnings.push(format!(
            "the measure phase sent {sent} of the {scheduled:.0} messages its rate scheduled \
             ({rate}/s for {span:.2} s, {:.0}%): the rest were held back (failed sends, an \
             unreachable target, a full window or a saturated generator: see the errors and \
             events)",
            100.0 * sent as f64 / scheduled
        ));
    }

    /// Each stage of a multi-stage run and the messages that never reached it (the
    /// acknowledgement stage: those sent and neither acknowledged nor refused).
    fn stage_ends(&self, phases: &[PhaseTotals], all: &Counters) -> Vec<StageEnd> {
        let (Some(t), Some(tr)) = (&self.plan.tracking, &self.tracker) else {
            return Vec::new();
        };
        let missing = tr.missing(t.stages.len());
        let totals = stage_totals(phases);
        t.stages
            .iter()
            .enumerate()
            .map(|(i, s)| StageEnd {
                name: s.name.clone(),
                missing: if s.source == StageSource::Ack {
                    let c = totals.get(i).map(|s| s.counts).unwrap_or_default();
                    all.sent.saturating_sub(c.reached + c.failed)
                } else {
                    missing[i]
                },
                optional: s.optional,
                failure: s.failure,
                window: s.window,
            })
            .collect()
    }

    /// What went wrong with the stages: messages that never reached a required stage, failed,
    /// duplicate or unknown events, window places given back, events that matched no stage.
    fn warn_of_stages(
        &mut self,
        phases: &[PhaseTotals],
        ends: &[StageEnd],
        unmatched: &[Unmatched],
    ) {
        if self.plan.tracking.is_none() || self.tracker.is_none() {
            return;
        }
        let totals = stage_totals(phases);
        for (i, e) in ends.iter().enumerate() {
            let c = totals.get(i).map(|s| s.counts).unwrap_or_default();
            if e.missing > 0 && !e.optional && !e.failure {
                self.warnings.push(format!(
                    "stage `{}`: {} messages never reached it",
                    e.name, e.missing
                ));
            }
            let failed = if e.failure {
                c.reached + c.failed
            } else {
                c.failed
            };
            if failed > 0 {
                self.warnings
                    .push(format!("stage `{}`: {failed} messages failed", e.name));
            }
            if c.duplicates > 0 {
                self.warnings.push(format!(
                    "stage `{}`: {} duplicate events",
                    e.name, c.duplicates
                ));
            }
            if c.unknown > 0 {
                self.warnings.push(format!(
                    "stage `{}`: {} events matched no message of this run",
                    e.name, c.unknown
                ));
            }
        }
        if self.expired_places > 0 {
            self.warnings.push(format!(
                "{} messages gave their window place back after the ack timeout ({:?}) without reaching the window stage",
                self.expired_places, self.plan.ack_timeout
            ));
        }
        for u in unmatched {
            self.warnings.push(format!(
                "queue {}: {} events matched no stage (bodies such as {})",
                u.queue,
                u.count,
                u.samples
                    .iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }

    /// Deliveries that were not this run's messages, with what to try: a system in the middle
    /// that rewrites or rejects what it relays loses the stamp.
    fn warn_of_foreign(&mut self, all: &Counters) {
        if all.foreign == 0 {
            return;
        }
        if all.sent == 0 {
            // Nothing of this run's was sent: the messages come from a source of their own.
            self.warnings.push(format!(
                "{} messages arrived from another source (this run sent none): msgbench times \
                 and checks only the messages its producers stamped, so these are counted as \
                 foreign (see the foreign line), not as received",
                all.foreign
            ));
            return;
        }
        let hint = if self.plan.payload.stamp == crate::payload::StampFormat::Binary {
            "if a system in the middle needs text or JSON, or re-encodes messages, try --stamp text or a --payload template with {{stamp}}"
        } else {
            "the system in the middle may drop or rewrite the text stamp (check the template keeps {{stamp}} inside a string), or they are replies from the server (subscription answers) or other publishers' messages"
        };
        // Messages of an earlier run (a durable stream or queue, a retained message, a
        // persistent session's backlog) carry a valid stamp of another run: the likelier cause
        // when the stamp format is right, so it is named first.
        self.warnings.push(format!(
            "{} deliveries were not this run's messages (another run's, foreign or truncated): \
             messages left from an earlier run (a durable stream or queue, a retained message, \
             a persistent session) are counted here, so use a fresh topic or purge it; else {hint}",
            all.foreign
        ));
    }
}

/// Each stage's counts over all phases.
fn stage_totals(phases: &[PhaseTotals]) -> Vec<StageStats> {
    let mut totals: Vec<StageStats> = Vec::new();
    for p in phases {
        for (i, s) in p.stages.iter().enumerate() {
            if totals.len() <= i {
                totals.resize_with(i + 1, Default::default);
            }
            totals[i].counts.merge(&s.counts);
        }
    }
    totals
}
