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
    /// The subjects of the publish refusals not yet taken by [`ServerErrors::take_refusals`],
    /// oldest first (empty when the `-ERR` did not name one).
    refusals: Vec<String>,
    /// A refused JetStream API request (`$JS.API.…`), not yet taken by the request waiting for
    /// its answer (which would otherwise wait out its time-out: the refusal has no reply).
    api_denial: Option<String>,
}

/// Whether an `-ERR` refuses a publish (the message went nowhere).
pub fn refuses_publish(e: &str) -> bool {
    e.contains("Permissions Violation for Publish")
}

/// The subject a publish refusal names: nats-server writes
/// `Permissions Violation for Publish to "SUBJECT"` (Go's `%q`; subjects need no escapes).
/// Empty if it names none.
pub fn refused_subject(e: &str) -> &str {
    e.split_once("Publish to \"")
        .and_then(|(_, rest)| rest.rsplit_once('"'))
        .map_or("", |(subject, _)| subject)
}

impl ServerErrors {
    /// One `-ERR` from the server on connection `name`.
    pub fn seen(&mut self, e: &str, name: &str, events: &EventSink) {
        let now = now_ns();
        if refuses_publish(e) && refused_subject(e).starts_with("$JS.API.") {
            self.api_denial = Some(e.to_string());
        } else if self.claimed && refuses_publish(e) {
            self.refusals.push(refused_subject(e).to_string());
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

    /// The subjects of the publish refusals seen since the last call, oldest first (only kept
    /// once [claimed](Self::claim)).
    pub fn take_refusals(&mut self) -> Vec<String> {
        std::mem::take(&mut self.refusals)
    }

    /// The refusal of a JetStream API request, if one came since the last look.
    pub fn take_api_denial(&mut self) -> Option<String> {
        self.api_denial.take()
    }

    /// Whether publish refusals are waiting to be taken.
    pub fn has_refusals(&self) -> bool {
        !self.refusals.is_empty()
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

    #[test]
    fn a_claimed_refusal_names_its_subject() {
        let (sink, _rx) = EventSink::channel();
        let mut s = ServerErrors::default();
        s.claim();
        s.seen("Permissions Violation for Publish to \"a.b\"", "p0", &sink);
        s.seen("Permissions Violation for Publish to \"c\"", "p0", &sink);
        s.seen("Slow Consumer", "p0", &sink);
        assert!(s.has_refusals());
        assert_eq!(s.take_refusals(), ["a.b", "c"]);
        assert!(!s.has_refusals());
        assert_eq!(refused_subject("Permissions Violation for Publish"), "");
    }
}
