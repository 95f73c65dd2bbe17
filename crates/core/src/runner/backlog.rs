//! Backlog runs (`--backlog`): the consumers are subscribed but held back, reading nothing,
//! until the producers have sent the backlog; then they are released and the coordinator
//! watches them clear it. Consumers wait on a gate once, before their first read, so holding
//! them costs nothing per message.

use crate::scenario::BacklogPlan;
use msgbench_metrics::BacklogSummary;
use tokio::sync::watch;

/// The coordinator's side of a backlog run: when to release, and when the backlog is gone.
pub(crate) struct BacklogWatch {
    plan: BacklogPlan,
    /// Mean bytes per message (for the backlog's size in bytes).
    mean_size: u64,
    gate: watch::Sender<bool>,
    /// Release instant and the messages sent by then.
    released: Option<(u64, u64)>,
    /// Instant the consumers had taken the backlog's deliveries, and how many they had.
    drained: Option<(u64, u64)>,
}

/// What changed at a check, for the run's events.
pub(crate) enum BacklogEvent {
    /// The consumers were released.
    Released(String),
    /// The consumers caught up with the backlog.
    Drained(String),
}

impl BacklogWatch {
    /// A watch for `plan`, and the gate the consumers wait on before their first read.
    pub(crate) fn new(plan: BacklogPlan, mean_size: u64) -> (Self, watch::Receiver<bool>) {
        let (gate, rx) = watch::channel(false);
        (
            Self {
                plan,
                mean_size,
                gate,
                released: None,
                drained: None,
            },
            rx,
        )
    }

    /// Whether there is still something to watch for (the coordinator checks often until not).
    pub(crate) fn pending(&self) -> bool {
        self.drained.is_none()
    }

    /// Releases the consumers once `sent` reaches the backlog (or no more will be sent:
    /// producers done, a stop asked for), then notes when `delivered` covers the backlog's
    /// deliveries (`receivers` per message). `t0`: the load's start; `now`: monotonic ns.
    pub(crate) fn check(
        &mut self,
        now: u64,
        t0: u64,
        sent: u64,
        delivered: u64,
        receivers: u64,
        no_more_sends: bool,
    ) -> Option<BacklogEvent> {
        match (self.released, self.drained) {
            (None, _) if sent >= self.plan.messages || no_more_sends => {
                self.released = Some((now, sent));
                let _ = self.gate.send(true);
                let short = if sent < self.plan.messages {
                    format!(
                        " (short of the {} asked for: the load ended first)",
                        self.plan.messages
                    )
                } else {
                    String::new()
                };
                Some(BacklogEvent::Released(format!(
                    "backlog of {sent} messages ({:.1} MB) built in {:.2} s{short}: consumers released",
                    (sent * self.mean_size) as f64 / 1e6,
                    secs(now.saturating_sub(t0))
                )))
            }
            (Some((at, backlog)), None) if delivered >= backlog * receivers => {
                self.drained = Some((now, delivered));
                let s = secs(now.saturating_sub(at));
                Some(BacklogEvent::Drained(format!(
                    "backlog drained in {s:.2} s ({:.0} deliveries/s)",
                    delivered as f64 / s.max(1e-9)
                )))
            }
            _ => None,
        }
    }

    /// The account for the `end` record (`None` if the consumers were never released).
    pub(crate) fn summary(&self, t0: u64) -> Option<BacklogSummary> {
        let (at, messages) = self.released?;
        let drain = self.drained.map(|(end, got)| {
            let s = secs(end.saturating_sub(at));
            (s, got as f64 / s.max(1e-9))
        });
        Some(BacklogSummary {
            messages,
            bytes: messages * self.mean_size,
            build_s: secs(at.saturating_sub(t0)),
            drain_s: drain.map(|d| d.0),
            drain_rate: drain.map(|d| d.1),
        })
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Released when the backlog is sent, drained when its deliveries are in, with the build
    /// and drain times measured from the load's start and from the release.
    #[test]
    fn releases_then_sees_the_drain() {
        let plan = BacklogPlan {
            bytes: 1000 * 100,
            messages: 1000,
        };
        let (mut w, gate) = BacklogWatch::new(plan, 100);
        let s = 1_000_000_000;
        assert!(w.check(s, 0, 999, 0, 2, false).is_none());
        assert!(!*gate.borrow());
        assert!(matches!(
            w.check(2 * s, 0, 1000, 0, 2, false),
            Some(BacklogEvent::Released(_))
        ));
        assert!(*gate.borrow());
        assert!(w.check(3 * s, 0, 1500, 1999, 2, false).is_none());
        assert!(matches!(
            w.check(4 * s, 0, 1600, 2400, 2, false),
            Some(BacklogEvent::Drained(_))
        ));
        assert!(!w.pending());
        let sum = w.summary(0).unwrap();
        assert_eq!((sum.messages, sum.bytes), (1000, 100_000));
        assert_eq!(sum.build_s, 2.0);
        assert_eq!(sum.drain_s, Some(2.0));
        assert_eq!(sum.drain_rate, Some(1200.0));
    }

    /// A load that ends before the backlog is built still releases the consumers.
    #[test]
    fn a_short_load_releases_what_it_built() {
        let plan = BacklogPlan {
            bytes: 1000,
            messages: 10,
        };
        let (mut w, gate) = BacklogWatch::new(plan, 100);
        assert!(matches!(
            w.check(5, 0, 4, 0, 1, true),
            Some(BacklogEvent::Released(m)) if m.contains("short of the 10")
        ));
        assert!(*gate.borrow());
        assert_eq!(w.summary(0).unwrap().messages, 4);
    }
}
