//! Test helpers: synthetic results records and a minimal HTTP/1.1 client over a TCP stream
//! (GET with `Connection: close`, and reading a server-sent event stream).

#![allow(dead_code)]

use msgbench_metrics::{Counters, Histograms, IntervalStats, Phase};
use msgbench_report::Record;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A `begin` record of a fan-out run named `name`.
pub fn begin(name: &str) -> Record {
    serde_json::from_value(serde_json::json!({
        "type": "begin",
        "version": 1,
        "tool": "msgbench test",
        "started_unix_ms": 1_700_000_000_000u64,
        "host": {"hostname": "testhost", "cpus": 4, "os": "linux"},
        "clock": {"source": "CLOCK_MONOTONIC", "scope": "host"},
        "plan": {"name": name, "target": "mem://", "run_id": 42, "subscription": {"mode": "fanout"}}
    }))
    .expect("a valid begin record")
}

/// Interval `i` (one second each) with `sent` messages sent and received and a latency of
/// `latency_us` for each (0: no latencies recorded, which is much cheaper to summarise in an
/// unoptimised test build).
pub fn interval(i: u64, sent: u64, latency_us: u64) -> Record {
    let mut h = Histograms::new();
    for _ in 0..sent.min(100) * u64::from(latency_us > 0) {
        h.e2e.record(latency_us * 1000).unwrap();
        h.publish.record(latency_us * 500).unwrap();
    }
    Record::Interval(IntervalStats {
        index: i,
        phase: Phase::Measure,
        start_s: i as f64,
        end_s: (i + 1) as f64,
        counters: Counters {
            sent,
            received: sent,
            ..Counters::default()
        },
        histograms: h,
        cpu_s: 0.5,
        gauges: None,
        stages: Vec::new(),
        host: None,
        loop_lag_ns: 0,
        groups: Vec::new(),
    })
}

/// An `end` record.
pub fn end(duration_s: f64, delivered: u64) -> Record {
    serde_json::from_value(serde_json::json!({
        "type": "end",
        "duration_s": duration_s,
        "interrupted": false,
        "drain_complete": true,
        "phases": [],
        "integrity": {"expected": delivered, "delivered": delivered, "lost": 0, "duplicated": 0,
                      "reordered": 0, "foreign": 0, "completeness": 1.0},
        "warnings": []
    }))
    .expect("a valid end record")
}

/// Host and port of a dashboard URL (`http://127.0.0.1:1234/...`).
pub fn host_port(url: &str) -> String {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string()
}

/// GET `path` with extra header lines; returns the status and the body.
pub fn get(addr: &str, path: &str, headers: &[&str]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the dashboard");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// A server-sent event stream being read.
pub struct EventStream {
    reader: BufReader<TcpStream>,
    chunked: bool,
}

/// One server-sent event.
#[derive(Debug)]
pub struct Sse {
    pub event: String,
    pub data: String,
}

impl EventStream {
    /// Opens `path` (status must be 200).
    pub fn open(addr: &str, path: &str) -> EventStream {
        let mut s = TcpStream::connect(addr).expect("connect to the dashboard");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
        )
        .unwrap();
        let mut reader = BufReader::new(s);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.contains(" 200 "), "event stream: {status}");
        let mut chunked = false;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line
                .to_ascii_lowercase()
                .starts_with("transfer-encoding: chunked")
            {
                chunked = true;
            }
            if line == "\r\n" || line.is_empty() {
                break;
            }
        }
        EventStream { reader, chunked }
    }

    fn line(&mut self) -> Option<String> {
        let mut l = String::new();
        match self.reader.read_line(&mut l) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(l.trim_end_matches(['\r', '\n']).to_string()),
        }
    }

    /// The next event (comments and keep-alives skipped); `None` when the stream ends.
    pub fn next(&mut self) -> Option<Sse> {
        let (mut event, mut data) = (String::new(), String::new());
        loop {
            let l = self.line()?;
            // Chunk-size lines of a chunked body are hex digits alone on a line.
            if self.chunked
                && !l.is_empty()
                && l.bytes().all(|b| b.is_ascii_hexdigit())
                && !l.contains(':')
            {
                continue;
            }
            if l.is_empty() {
                if !data.is_empty() || !event.is_empty() {
                    return Some(Sse { event, data });
                }
                continue;
            }
            if let Some(v) = l.strip_prefix("event:") {
                event = v.trim().to_string();
            } else if let Some(v) = l.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
        }
    }

    /// The next event named `name` (others skipped).
    pub fn next_named(&mut self, name: &str) -> Option<Sse> {
        loop {
            let e = self.next()?;
            if e.event == name {
                return Some(e);
            }
        }
    }
}
