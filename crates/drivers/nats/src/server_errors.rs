//! A server's `-ERR` lines, reported without flooding and counted where they refuse work.
//!
//! NATS answers a publish to a subject the user may not publish to with
//! `-ERR 'Permissions Violation for Publish to "x"'` and keeps the connection: one line per
//! message, thousands a second. Each distinct error is reported when first seen; repeats of it
//! are counted and reported as one line with their count at most once a second, and when the
//! connection goes. Publish refusals are reported as [`DriverEventKind::Refused`], which the
//! runner counts as refused operations (core NATS publishes have no acknowledgement to nack),
//! so the report's errors say what the server did rather than leaving only lost messages.

use msgbench_core::clock::now_ns;
use msgbench_core::driver::{DriverEventKind, EventSink};

/// Repeats of one error are reported at most this often.
const REPORT_EVERY_NS: u64 = 1_000_000_000;

/// The last error seen on a connection and its repeats not yet reported.
#[derive(Debug, Default)]
pub struct ServerErrors {
    last: String,
    pending: u64,
    next_report_ns: u64,
    /// Publish refusals are resolved by the client's own acks ([`ServerErrors::claim`]):
    /// reported, but not counted again as refused operations.
    claimed: bool,
    /// Publish refusals not yet taken by [`ServerErrors::take_refusals`].
    refusals: u64,
}

/// Whether an `-ERR` refuses a publish (the message went nowhere).
pub fn refuses_publish(e: &str) -> bool {
    e.contains("Permissions Violation for Publish")
}

impl ServerErrors {
    /// One `-ERR` from the server on connection `name`.
    pub fn seen(&mut self, e: &str, name: &str, events: &EventSink) {
        let now = now_ns();
        if self.claimed && refuses_publish(e) {
            self.refusals += 1;
        }
        if e == self.last {
            self.pending += 1;
            if now >= self.next_report_ns {
                self.report(name, events, now);
            }
            return;
        }
        self.flush(name, events);
        self.last = e.to_string();
        self.pending = 1;
        self.report(name, events, now);
    }

    /// From now on the client resolves each publish refusal as one of its messages refused
    /// (JetStream, whose publishes wait for an acknowledgement that a refused one never
    /// gets), taking them with [`ServerErrors::take_refusals`].
    pub fn claim(&mut self) {
        self.claimed = true;
    }

    /// Publish refusals seen since the last call (only counted once [claimed](Self::claim)).
    pub fn take_refusals(&mut self) -> u64 {
        std::mem::take(&mut self.refusals)
    }

    /// Reports the repeats not yet reported (the connection is going).
    pub fn flush(&mut self, name: &str, events: &EventSink) {
        if self.pending > 0 {
            self.report(name, events, now_ns());
        }
    }

    fn report(&mut self, name: &str, events: &EventSink, now: u64) {
        let n = std::mem::take(&mut self.pending);
        self.next_report_ns = now + REPORT_EVERY_NS;
        let times = if n > 1 {
            format!(" (×{n} since the last report)")
        } else {
            String::new()
        };
        let detail = format!("{name}: server error: {}{times}", self.last);
        let kind = if refuses_publish(&self.last) && !self.claimed {
            DriverEventKind::Refused(n)
        } else {
            DriverEventKind::Error
        };
        events.emit(kind, detail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_counted_not_repeated() {
        let (sink, mut rx) = EventSink::channel();
        let mut s = ServerErrors::default();
        let deny = "Permissions Violation for Publish to \"bench\"";
        for _ in 0..1000 {
            s.seen(deny, "p0", &sink);
        }
        s.seen("Slow Consumer", "p0", &sink);
        s.flush("p0", &sink);
        let got: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        let refused: u64 = got
            .iter()
            .map(|e| match e.kind {
                DriverEventKind::Refused(n) => n,
                _ => 0,
            })
            .sum();
        assert_eq!(refused, 1000, "{got:?}");
        assert_eq!(
            got.len(),
            3,
            "first, the repeats in one line, the other error: {got:?}"
        );
        assert!(
            got[1].detail.ends_with("(×999 since the last report)"),
            "{got:?}"
        );
        assert_eq!(got[2].kind, DriverEventKind::Error);
    }
}
