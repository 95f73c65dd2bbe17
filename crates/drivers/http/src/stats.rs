//! What the runner's counters cannot say about HTTP: responses by status code, requests that
//! got no response at all, connections opened and closed by the server.
//!
//! [`HttpStats`] is one shared table of atomics per driver, readable at any time (exact once
//! the run is over). Producers do not touch it per confirming response: each keeps a private
//! `Tally` (a plain array, no atomics, no allocation) and adds it to the shared table every
//! [`FLUSH_EVERY`] responses, before reporting, and when it closes or is dropped, so two cores
//! never fight over the cache line of "200". Error statuses and requests without response are
//! added at once, so that the summary events count every producer's.
//!
//! Error statuses also become events, rate-limited: the first error response of a run is
//! reported at once, later ones at most once per [`REPORT_EVERY_NS`] across all producers, as a
//! summary of the counts so far (an `error` event if 5xx responses were added since the last
//! report, else a `warning`).

use msgbench_core::clock::now_ns;
use msgbench_core::driver::{DriverEventKind, EventSink};
use msgbench_metrics::{ResponseSummary, StatusCount};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// Status codes counted one by one: 100..=599. Others (600..=999, which hyper accepts) share
/// one counter.
const FIRST: u16 = 100;
const CODES: usize = 500;

/// A producer adds its tally to the shared table after this many responses.
pub const FLUSH_EVERY: u32 = 1024;

/// At most one error-status summary event per this many nanoseconds (all producers together).
pub const REPORT_EVERY_NS: u64 = 1_000_000_000;

/// Whether a status counts as a confirmation: 2xx and 3xx (redirects are not followed, a
/// redirect is a valid answer). 1xx as a final status, 4xx and 5xx are refusals.
pub fn status_ok(code: u16) -> bool {
    (200..400).contains(&code)
}

/// Responses by status and connection counts of one driver, shared by its producers and
/// sessions. Get it with [`crate::HttpDriver::stats`]; read it during the run (approximate: up
/// to [`FLUSH_EVERY`] responses per producer not yet added) or after it (exact).
#[derive(Debug)]
pub struct HttpStats {
    codes: Box<[AtomicU64]>,
    other_codes: AtomicU64,
    no_response: AtomicU64,
    connections: AtomicU64,
    server_closes: AtomicU64,
    resent: AtomicU64,
    closed_unanswered: AtomicU64,
    stream_limit_said: AtomicBool,
    single_use_said: AtomicBool,
    next_report_ns: AtomicU64,
    reported_5xx: AtomicU64,
}

impl Default for HttpStats {
    fn default() -> Self {
        HttpStats {
            codes: (0..CODES).map(|_| AtomicU64::new(0)).collect(),
            other_codes: AtomicU64::new(0),
            no_response: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            server_closes: AtomicU64::new(0),
            resent: AtomicU64::new(0),
            closed_unanswered: AtomicU64::new(0),
            stream_limit_said: AtomicBool::new(false),
            single_use_said: AtomicBool::new(false),
            next_report_ns: AtomicU64::new(0),
            reported_5xx: AtomicU64::new(0),
        }
    }
}

impl HttpStats {
    /// Responses with status `code`.
    pub fn count(&self, code: u16) -> u64 {
        match code.checked_sub(FIRST) {
            Some(i) if (i as usize) < CODES => self.codes[i as usize].load(Relaxed),
            _ => 0,
        }
    }

    /// Every status seen, ascending, with its count.
    pub fn codes(&self) -> Vec<(u16, u64)> {
        self.codes
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let n = c.load(Relaxed);
                (n > 0).then_some((FIRST + i as u16, n))
            })
            .collect()
    }

    /// Responses with a status outside 100..=599.
    pub fn other_codes(&self) -> u64 {
        self.other_codes.load(Relaxed)
    }

    /// All responses (any status).
    pub fn responses(&self) -> u64 {
        self.codes.iter().map(|c| c.load(Relaxed)).sum::<u64>() + self.other_codes()
    }

    /// Responses that confirmed their request ([`status_ok`]).
    pub fn ok(&self) -> u64 {
        self.codes()
            .into_iter()
            .filter(|(c, _)| status_ok(*c))
            .map(|(_, n)| n)
            .sum()
    }

    /// Requests that got no (complete) response: the connection failed or closed under them,
    /// or the response body broke off.
    pub fn no_response(&self) -> u64 {
        self.no_response.load(Relaxed)
    }

    /// Connections opened by producers and sessions (the first of each included).
    pub fn connections(&self) -> u64 {
        self.connections.load(Relaxed)
    }

    /// Connections the server ended in good order (keep-alive limits, `Connection: close`,
    /// HTTP/2 GOAWAY): reopened silently on the next request, not counted as errors.
    pub fn server_closes(&self) -> u64 {
        self.server_closes.load(Relaxed)
    }

    /// Requests sent again on a new connection because the server closed their kept-alive
    /// one as they went out, before any response (idempotent requests; RFC 9112 §9.3.1.1),
    /// or, over HTTP/2, refused them unprocessed (RFC 9113 §8.7; each sending counts). Counted
    /// as each goes out again: one whose new connection never opened was not sent again (it
    /// is without response). Each request is counted once among the responses, by its final
    /// answer.
    pub fn resent(&self) -> u64 {
        self.resent.load(Relaxed)
    }

    /// Of [`HttpStats::no_response`], the requests the same race caught that were not sent
    /// again: their method is not idempotent.
    pub fn closed_unanswered(&self) -> u64 {
        self.closed_unanswered.load(Relaxed)
    }

    /// One response with status `code`, counted at once.
    fn add(&self, code: u16) {
        match code.checked_sub(FIRST) {
            Some(i) if (i as usize) < CODES => self.codes[i as usize].fetch_add(1, Relaxed),
            _ => self.other_codes.fetch_add(1, Relaxed),
        };
    }

    pub(crate) fn connection_opened(&self) {
        self.connections.fetch_add(1, Relaxed);
    }

    pub(crate) fn server_closed(&self) {
        self.server_closes.fetch_add(1, Relaxed);
    }

    pub(crate) fn add_resent(&self) {
        self.resent.fetch_add(1, Relaxed);
    }

    pub(crate) fn add_closed_unanswered(&self) {
        self.closed_unanswered.fetch_add(1, Relaxed);
    }

    /// True the first time it is called: the HTTP/2 stream limit is said once per run.
    pub(crate) fn first_stream_limit(&self) -> bool {
        !self.stream_limit_said.swap(true, Relaxed)
    }

    /// True the first time it is called: a server closing each connection after one response
    /// is said once per run, not once per producer.
    pub(crate) fn first_single_use(&self) -> bool {
        !self.single_use_said.swap(true, Relaxed)
    }

    /// The counts as the run's results file carries them (exact once the run is over).
    pub fn summary(&self) -> ResponseSummary {
        ResponseSummary {
            statuses: self
                .codes()
                .into_iter()
                .map(|(code, count)| StatusCount { code, count })
                .collect(),
            other_statuses: self.other_codes(),
            no_response: self.no_response(),
            connections: self.connections(),
            server_closes: self.server_closes(),
            resent: self.resent(),
            closed_unanswered: self.closed_unanswered(),
        }
    }

    /// Reports the error statuses so far, unless another report went out less than
    /// [`REPORT_EVERY_NS`] ago. The caller has just flushed its own tally.
    fn report(&self, events: &EventSink) {
        let now = now_ns();
        let due = self.next_report_ns.load(Relaxed);
        if now < due
            || self
                .next_report_ns
                .compare_exchange(due, now + REPORT_EVERY_NS, Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        let mut detail = String::from("HTTP requests refused or failed so far: ");
        let mut first = true;
        let mut fives = 0;
        for (code, n) in self.codes() {
            if status_ok(code) {
                continue;
            }
            if code >= 500 {
                fives += n;
            }
            let _ = write!(detail, "{}{code} ×{n}", if first { "" } else { ", " });
            first = false;
        }
        let other = self.other_codes();
        if other > 0 {
            let _ = write!(
                detail,
                "{}other statuses ×{other}",
                if first { "" } else { ", " }
            );
            first = false;
        }
        let none = self.no_response();
        if none > 0 {
            let _ = write!(
                detail,
                "{}{none} without response",
                if first { "" } else { ", " }
            );
        }
        // Other producers add their confirming responses in batches: a lower bound.
        let _ = match self.responses() {
            0 => write!(detail, " (no response yet; reported at most once a second)"),
            n => write!(
                detail,
                " (of at least {n} responses; reported at most once a second)"
            ),
        };
        let kind = if fives > self.reported_5xx.swap(fives, Relaxed) {
            DriverEventKind::Error
        } else {
            DriverEventKind::Warning
        };
        events.emit(kind, detail);
    }
}

/// A producer's private counts, added to the shared [`HttpStats`] in batches.
pub(crate) struct Tally {
    codes: Box<[u64; CODES]>,
    pending: u32,
}

impl Tally {
    pub fn new() -> Tally {
        Tally {
            codes: Box::new([0; CODES]),
            pending: 0,
        }
    }

    /// Counts one response; error statuses may produce a (rate-limited) event.
    ///
    /// Only confirming statuses are batched: an error status (and a request without response,
    /// [`Tally::no_response`]) goes to the shared table at once, so the summary event, which
    /// any producer may write, counts every producer's errors, not only its own. Errors cost
    /// an atomic add each, which a run answering errors at HTTP's rates does not notice.
    #[inline]
    pub fn response(&mut self, code: u16, shared: &HttpStats, events: &EventSink) {
        if !status_ok(code) {
            shared.add(code);
            if now_ns() >= shared.next_report_ns.load(Relaxed) {
                self.flush(shared);
                shared.report(events);
            }
            return;
        }
        self.codes[(code - FIRST) as usize] += 1;
        self.pending += 1;
        if self.pending >= FLUSH_EVERY {
            self.flush(shared);
        }
    }

    /// Counts one request that got no response (also reported, rate-limited).
    pub fn no_response(&mut self, shared: &HttpStats, events: &EventSink) {
        shared.no_response.fetch_add(1, Relaxed);
        if now_ns() >= shared.next_report_ns.load(Relaxed) {
            self.flush(shared);
            shared.report(events);
        }
    }

    /// Adds everything counted since the last flush to `shared`.
    pub fn flush(&mut self, shared: &HttpStats) {
        if self.pending == 0 {
            return;
        }
        for (local, global) in self.codes.iter_mut().zip(shared.codes.iter()) {
            if *local > 0 {
                global.fetch_add(std::mem::take(local), Relaxed);
            }
        }
        self.pending = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The summary event, written by whichever producer's error is due to report, counts
    /// the errors of every producer, not only its own (with four producers it once said a
    /// quarter of the 503s the server had sent).
    #[test]
    fn error_summaries_count_every_producers_errors() {
        let shared = HttpStats::default();
        let (events, mut rx) = EventSink::channel();
        let mut tallies: Vec<Tally> = (0..4).map(|_| Tally::new()).collect();
        for _ in 0..50 {
            for t in &mut tallies {
                t.response(200, &shared, &events);
                t.response(503, &shared, &events);
            }
        }
        tallies[1].no_response(&shared, &events);
        assert_eq!((shared.count(503), shared.no_response()), (200, 1));
        shared.next_report_ns.store(0, Relaxed);
        tallies[2].response(429, &shared, &events);
        let mut last = None;
        while let Ok(e) = rx.try_recv() {
            last = Some(e.detail);
        }
        let last = last.unwrap();
        assert!(
            last.contains("429 ×1, 503 ×200, 1 without response"),
            "{last}"
        );
    }

    #[test]
    fn tallies_add_up_in_batches() {
        let shared = HttpStats::default();
        let (events, _rx) = EventSink::channel();
        let mut t = Tally::new();
        for _ in 0..FLUSH_EVERY - 1 {
            t.response(200, &shared, &events);
        }
        assert_eq!(shared.count(200), 0, "not flushed yet");
        t.response(204, &shared, &events);
        assert_eq!((shared.count(200), shared.count(204)), (1023, 1));
        t.response(700, &shared, &events);
        t.no_response(&shared, &events);
        t.flush(&shared);
        assert_eq!(shared.other_codes(), 1);
        assert_eq!(shared.no_response(), 1);
        assert_eq!(shared.responses(), 1025);
        assert_eq!(shared.ok(), 1024);
        assert_eq!(shared.codes(), vec![(200, 1023), (204, 1)]);
        shared.connection_opened();
        assert_eq!(
            shared.summary().line(),
            "200 ×1023, 204 ×1, other statuses ×1; 1 without response; 1 connection"
        );
    }

    #[test]
    fn error_statuses_are_reported_at_most_once_a_second() {
        let shared = HttpStats::default();
        let (events, mut rx) = EventSink::channel();
        let mut t = Tally::new();
        t.response(404, &shared, &events);
        let first = rx.try_recv().unwrap();
        assert_eq!(first.kind, DriverEventKind::Warning);
        assert!(first.detail.contains("404 ×1"), "{}", first.detail);
        for _ in 0..100 {
            t.response(503, &shared, &events);
        }
        assert!(rx.try_recv().is_err(), "rate-limited");
        // Next window: the summary carries everything so far and is an error (new 5xx).
        shared.next_report_ns.store(0, Relaxed);
        t.response(503, &shared, &events);
        let next = rx.try_recv().unwrap();
        assert_eq!(next.kind, DriverEventKind::Error);
        assert!(next.detail.contains("404 ×1, 503 ×101"), "{}", next.detail);
        assert_eq!(shared.count(503), 101, "flushed before reporting");
        shared.next_report_ns.store(0, Relaxed);
        t.no_response(&shared, &events);
        let last = rx.try_recv().unwrap();
        assert_eq!(last.kind, DriverEventKind::Warning, "no new 5xx");
        assert!(
            last.detail.ends_with(
                "1 without response (of at least 102 responses; reported at most once a second)"
            ),
            "{}",
            last.detail
        );
    }

    #[test]
    fn ok_means_2xx_and_3xx() {
        assert!(status_ok(200) && status_ok(304) && status_ok(399));
        assert!(!status_ok(101) && !status_ok(404) && !status_ok(500));
    }
}
