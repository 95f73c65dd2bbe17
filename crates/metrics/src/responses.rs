//! What a request/response protocol answered, beyond acked and nacked: the responses by status
//! code (HTTP), the requests that got no response at all, and the connections it took. A run
//! of 800 nacks says the server refused; `429 ×600, 503 ×200` says why.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Responses by status of one run (all its producers and sessions).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseSummary {
    /// Each status seen, ascending, with its count.
    pub statuses: Vec<StatusCount>,
    /// Responses with a status outside 100..=599.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub other_statuses: u64,
    /// Requests that got no complete response (the connection failed or closed under them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub no_response: u64,
    /// Connections opened (the first of each client included).
    pub connections: u64,
    /// Of them, those the server ended in good order (keep-alive limits, GOAWAY).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub server_closes: u64,
    /// Sendings of requests again on a new connection because the server closed their
    /// kept-alive one as they went out, before any response (idempotent methods only, RFC
    /// 9112 §9.3.1.1), or over HTTP/2 refused them unprocessed; a request is counted among
    /// the statuses once, by its final answer.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resent: u64,
    /// Of `no_response`, the requests that race caught and that were not sent again (their
    /// method is not idempotent).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub closed_unanswered: u64,
}

/// Responses with one status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusCount {
    /// The status code.
    pub code: u16,
    /// How many responses carried it.
    pub count: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ResponseSummary {
    /// Adds another part of the run (merging results files).
    pub fn add(&mut self, o: &ResponseSummary) {
        for s in &o.statuses {
            match self.statuses.binary_search_by_key(&s.code, |c| c.code) {
                Ok(i) => self.statuses[i].count += s.count,
                Err(i) => self.statuses.insert(i, *s),
            }
        }
        self.other_statuses += o.other_statuses;
        self.no_response += o.no_response;
        self.connections += o.connections;
        self.server_closes += o.server_closes;
        self.resent += o.resent;
        self.closed_unanswered += o.closed_unanswered;
    }

    /// One line for humans: `200 ×9000, 503 ×12; 3 without response; 50 connections`.
    pub fn line(&self) -> String {
        let mut s = String::new();
        for c in &self.statuses {
            let _ = write!(s, "{}{} ×{}", sep(&s), c.code, c.count);
        }
        if self.other_statuses > 0 {
            let _ = write!(s, "{}other statuses ×{}", sep(&s), self.other_statuses);
        }
        if s.is_empty() {
            s.push_str("no responses");
        }
        if self.no_response > 0 {
            let _ = write!(s, "; {} without response", self.no_response);
            if self.closed_unanswered > 0 {
                let _ = write!(
                    s,
                    " ({} as the server closed a kept-alive connection: not idempotent, not \
                     sent again)",
                    self.closed_unanswered
                );
            }
        }
        if self.resent > 0 {
            let _ = write!(
                s,
                "; {} sent again after the server closed a kept-alive connection under them or \
                 refused them unprocessed",
                self.resent
            );
        }
        let plural = if self.connections == 1 { "" } else { "s" };
        let _ = write!(s, "; {} connection{plural}", self.connections);
        if self.server_closes > 0 {
            let _ = write!(s, " ({} closed by the server)", self.server_closes);
        }
        s
    }
}

fn sep(s: &str) -> &'static str {
    if s.is_empty() { "" } else { ", " }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(codes: &[(u16, u64)], none: u64, conns: u64) -> ResponseSummary {
        ResponseSummary {
            statuses: codes
                .iter()
                .map(|&(code, count)| StatusCount { code, count })
                .collect(),
            no_response: none,
            connections: conns,
            ..Default::default()
        }
    }

    #[test]
    fn parts_add_up_by_code() {
        let mut a = of(&[(200, 10), (503, 2)], 1, 4);
        a.add(&of(&[(200, 5), (429, 3)], 0, 2));
        assert_eq!(a, of(&[(200, 15), (429, 3), (503, 2)], 1, 6));
        assert_eq!(
            a.line(),
            "200 ×15, 429 ×3, 503 ×2; 1 without response; 6 connections"
        );
        assert_eq!(of(&[], 0, 1).line(), "no responses; 1 connection");
    }

    #[test]
    fn the_keep_alive_race_is_told_apart() {
        let mut a = of(&[(200, 7)], 2, 3);
        (a.server_closes, a.resent, a.closed_unanswered) = (2, 1, 1);
        let mut b = a.clone();
        b.add(&a);
        assert_eq!((b.resent, b.closed_unanswered), (2, 2));
        assert_eq!(
            a.line(),
            "200 ×7; 2 without response (1 as the server closed a kept-alive connection: not \
             idempotent, not sent again); 1 sent again after the server closed a kept-alive \
             connection under them or refused them unprocessed; 3 connections (2 closed by \
             the server)"
        );
        // Files written before these counts existed still read.
        let old = r#"{"statuses":[],"connections":1}"#;
        let read: ResponseSummary = serde_json::from_str(old).unwrap();
        assert_eq!((read.resent, read.closed_unanswered), (0, 0));
    }
}
