//! The HTTP driver under the real runner, against servers in this process: the built-in server
//! (HTTP/1.1 and h2c), and hand-written ones that misbehave on purpose.

mod common;

use common::{Served, measure, opts, plan, run};
use msgbench_core::driver::{ConnectFailure, DriverError};
use msgbench_core::runner::{EventKind, RunError};
use msgbench_core::scenario::{ConnectionsSection, Scenario, resolve};
use msgbench_core::scenario::{ConsumersSection, OutputSection, PhasesSection};
use msgbench_serve::http::HttpServer;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_every_request_is_answered_and_acked() {
    let srv = Served::start(HttpServer::new()).await;
    let (out, obs, stats) = run(&plan(&srv.url, 4, 2000, 1), opts("post", false)).await;
    let out = out.expect("run");
    let m = measure(&out);
    assert_eq!(m.counters.sent, 2000);
    assert_eq!(m.counters.acked, 2000);
    assert_eq!(m.counters.nacked, 0);
    assert_eq!(m.counters.errors.total(), 0, "{:?}", m.counters.errors);
    assert_eq!(m.histograms.publish.len(), 2000, "one latency per response");
    assert!(m.histograms.publish.min() > 0);
    assert_eq!(stats.count(200), 2000);
    assert_eq!(stats.codes(), vec![(200, 2000)]);
    assert_eq!(
        stats.connections(),
        4,
        "one keep-alive connection per producer"
    );
    assert_eq!(stats.no_response(), 0);
    assert_eq!(srv.counts.requests.load(Relaxed), 2000);
    assert_eq!(srv.counts.http2_requests.load(Relaxed), 0);
    assert_eq!(
        srv.counts.body_bytes.load(Relaxed),
        2000 * 128,
        "the payload is the body"
    );
    assert!(obs.driver_events().is_empty(), "{:?}", obs.events);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_latency_is_request_to_complete_response() {
    // 100 requests over 4 connections, each answered after 10 ms: at least 25 rounds.
    let srv = Served::start(HttpServer::new().with_delay(Duration::from_millis(10))).await;
    let (out, _, stats) = run(&plan(&srv.url, 4, 100, 1), opts("PUT", false)).await;
    let out = out.expect("run");
    let m = measure(&out);
    assert_eq!(m.counters.acked, 100);
    assert!(
        m.histograms.publish.min() >= 10_000_000,
        "{}",
        m.histograms.publish.min()
    );
    assert!(out.duration_s >= 0.25, "{}", out.duration_s);
    assert_eq!(stats.count(200), 100);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_http1_request_times_out_and_its_connection_is_replaced() {
    // Answers come after 2 s, acks are given up on after 200 ms: each send after the first
    // finds its connection still waiting, closes it and opens another.
    let srv = Served::start(HttpServer::new().with_delay(Duration::from_secs(2))).await;
    let mut p = plan(&srv.url, 1, 3, 1);
    p.ack_timeout = Duration::from_millis(200);
    let started = std::time::Instant::now();
    let (out, obs, stats) = run(&p, opts("POST", false)).await;
    let out = out.expect("the run completes");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    let m = measure(&out);
    assert_eq!(
        (m.counters.sent, m.counters.acked, m.counters.nacked),
        (3, 0, 0)
    );
    assert_eq!(m.counters.errors.timeout, 3, "{:?}", m.counters.errors);
    assert_eq!(stats.connections(), 3);
    assert_eq!(
        stats.no_response(),
        3,
        "the two given up on, and the last, still unanswered when the producer closed"
    );
    // Closing a connection to send the next request is msgbench's own doing, counted once
    // (as the request's timeout): no disconnection, no reconnection.
    assert!(
        obs.mentioning("connection lost").is_empty(),
        "{:?}",
        obs.events
    );
    assert!(
        obs.mentioning(": reconnected").is_empty(),
        "{:?}",
        obs.events
    );
    drop(srv);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_run_concurrently_on_each_connection() {
    // 1000 requests answered after 20 ms each, on 2 connections of 50 streams: ~10 rounds of
    // 20 ms. One request at a time per connection would take 10 s.
    let srv = Served::start(HttpServer::new().with_delay(Duration::from_millis(20))).await;
    let (out, obs, stats) = run(&plan(&srv.url, 2, 1000, 50), opts("POST", true)).await;
    let out = out.expect("run");
    let m = measure(&out);
    assert_eq!(m.counters.acked, 1000);
    assert_eq!(m.counters.errors.total(), 0, "{:?}", m.counters.errors);
    assert_eq!(m.histograms.publish.len(), 1000);
    assert!(m.histograms.publish.min() >= 20_000_000);
    assert!(
        out.duration_s < 4.0,
        "streams were not concurrent: {}s",
        out.duration_s
    );
    assert_eq!(stats.connections(), 2);
    assert_eq!(stats.count(200), 1000);
    assert_eq!(
        srv.counts.http2_requests.load(Relaxed),
        1000,
        "spoken over HTTP/2"
    );
    assert_eq!(srv.counts.body_bytes.load(Relaxed), 1000 * 128);
    assert!(obs.driver_events().is_empty(), "{:?}", obs.events);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_requests_beyond_the_servers_stream_limit_wait_unsent() {
    // 8 streams per connection, 50 ms per answer, a window of 64: a request goes out only
    // when a stream is free, so none waits for more than one answer before it is sent. Queued
    // in the client instead (hyper's way), the last of each 64 would wait 7 rounds (350 ms).
    let srv = Served::start(
        HttpServer::new()
            .with_delay(Duration::from_millis(50))
            .with_max_streams(8),
    )
    .await;
    let (out, obs, stats) = run(&plan(&srv.url, 1, 160, 64), opts("GET", true)).await;
    let m = measure(out.as_ref().expect("run"));
    assert_eq!((m.counters.sent, m.counters.acked), (160, 160));
    assert_eq!(stats.count(200), 160);
    let max = m.histograms.publish.max();
    assert!(max < 200_000_000, "a request waited {max} ns");
    let said = obs.mentioning("the server allows 8 concurrent streams per connection");
    assert_eq!(said.len(), 1, "said once: {:?}", obs.events);
    assert!(said[0].detail.contains("the window is 64"), "{:?}", said[0]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_unpaced_window_of_one_hundred() {
    let srv = Served::start(HttpServer::new()).await;
    let (out, _, stats) = run(&plan(&srv.url, 3, 6000, 100), opts("POST", true)).await;
    let m = measure(out.as_ref().expect("run"));
    assert_eq!((m.counters.acked, m.counters.nacked), (6000, 0));
    assert_eq!(m.histograms.publish.len(), 6000);
    assert_eq!(stats.count(200), 6000);
    assert_eq!(srv.counts.http2_requests.load(Relaxed), 6000);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_sends_no_body() {
    let srv = Served::start(HttpServer::new()).await;
    let (out, _, stats) = run(&plan(&srv.url, 2, 300, 1), opts("GET", false)).await;
    let m = measure(out.as_ref().expect("run"));
    assert_eq!(m.counters.acked, 300);
    assert_eq!(stats.count(200), 300);
    assert_eq!(srv.counts.requests.load(Relaxed), 300);
    assert_eq!(srv.counts.body_bytes.load(Relaxed), 0);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_is_a_clear_connect_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/");
    let (out, _, stats) = run(&plan(&url, 1, 10, 1), opts("POST", false)).await;
    match out {
        Err(RunError::Connect {
            role: "producer",
            error:
                DriverError::Connect {
                    target,
                    reason,
                    cause,
                },
            ..
        }) => {
            assert_eq!(cause, ConnectFailure::Refused, "{reason}");
            assert!(target.contains(&port.to_string()), "{target}");
        }
        other => panic!("expected a refused connection, got {:?}", other.map(|_| ())),
    }
    assert_eq!(stats.connections(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_to_a_plain_server_fails_the_tls_handshake() {
    let srv = Served::start(HttpServer::new()).await;
    let mut p = plan(&srv.url.replace("http://", "https://"), 1, 10, 1);
    p.tls.insecure = true;
    let (out, _, _) = run(&p, opts("POST", false)).await;
    match out {
        Err(RunError::Connect {
            error: DriverError::Connect { cause, reason, .. },
            ..
        }) => {
            assert_eq!(cause, ConnectFailure::Tls, "{reason}");
            assert!(reason.contains("TLS"), "{reason}");
        }
        other => panic!("expected a TLS failure, got {:?}", other.map(|_| ())),
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_statuses_are_nacks_counted_and_reported() {
    for (code, http2) in [(500u16, false), (503, true)] {
        let srv = Served::start(HttpServer::new().with_status(code).unwrap()).await;
        let (out, obs, stats) = run(
            &plan(&srv.url, 2, 300, if http2 { 4 } else { 1 }),
            opts("POST", http2),
        )
        .await;
        let out = out.expect("the run completes");
        let m = measure(&out);
        assert_eq!(
            (m.counters.acked, m.counters.nacked),
            (0, 300),
            "HTTP {code}"
        );
        assert_eq!(m.histograms.publish.len(), 0, "refusals carry no latency");
        assert_eq!(stats.count(code), 300);
        assert_eq!((stats.responses(), stats.ok()), (300, 0));
        let reports = obs.mentioning("HTTP requests refused or failed so far");
        assert!(!reports.is_empty(), "{:?}", obs.events);
        assert!(
            reports.len() <= 2,
            "rate-limited: {} reports",
            reports.len()
        );
        let first = reports[0];
        assert!(
            first.detail.contains(&format!("{code} ×")),
            "{}",
            first.detail
        );
        // 5xx are errors ("event" when the runner read it only in its closing sweep).
        assert!(
            matches!(first.kind, EventKind::Error | EventKind::Event),
            "{first:?}"
        );
        assert!(
            out.warnings.iter().any(|w| w.contains("errors")),
            "{:?}",
            out.warnings
        );
        srv.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_refuses_a_window_above_one() {
    let srv = Served::start(HttpServer::new()).await;
    let (out, _, _) = run(&plan(&srv.url, 1, 10, 10), opts("POST", false)).await;
    match out {
        Err(RunError::Connect {
            error: DriverError::Config(msg),
            ..
        }) => assert!(msg.contains("max_in_flight"), "{msg}"),
        other => panic!(
            "expected a configuration error, got {:?}",
            other.map(|_| ())
        ),
    }
    assert_eq!(srv.counts.requests.load(Relaxed), 0);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_are_refused() {
    let srv = Served::start(HttpServer::new()).await;
    let mut p = plan(&srv.url, 1, 10, 1);
    p.consumers_per_topic = 1;
    let (out, _, _) = run(&p, opts("POST", false)).await;
    match out {
        Err(RunError::Connect {
            role: "consumer",
            error: DriverError::Config(msg),
            ..
        }) => assert!(msg.contains("-c 0"), "{msg}"),
        other => panic!(
            "expected a configuration error, got {:?}",
            other.map(|_| ())
        ),
    }
    srv.stop().await;
}

/// How [`raw_server`] misbehaves.
#[derive(Clone, Copy)]
enum Raw {
    /// Answer this many requests per connection, then read one more and close without an
    /// answer (a server dying mid-exchange).
    CutAfter(u32),
    /// Answer each request with `Connection: close` and close (orderly).
    CloseEach,
    /// Keep-alive, but every nth response of a connection carries `Connection: close`.
    CloseEvery(u32),
    /// Chunked responses (extension, trailer), each written in pieces, after a 100 Continue.
    Chunked,
    /// HTTP/1.0 responses without a length: the body ends when the server closes.
    Http10UntilClose,
    /// One connection only: the listener closes once it is taken (later connections are
    /// refused), then as `CutAfter`.
    OnlyOne(u32),
}

/// Reads one HTTP/1.1 request (head and Content-Length body); false at end of stream.
async fn read_request(sock: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= end + 4 + len {
                buf.drain(..end + 4 + len);
                return true;
            }
        }
        let mut chunk = [0u8; 4096];
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A hand-written HTTP/1.1 server; returns its URL and the connections it accepted.
async fn raw_server(mode: Raw) -> (String, Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    let accepted = Arc::new(AtomicU64::new(0));
    let count = accepted.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = l.accept().await else {
                return;
            };
            count.fetch_add(1, Relaxed);
            // Responses written in pieces must not wait for the client's delayed ACK.
            sock.set_nodelay(true).unwrap();
            let mode = match mode {
                Raw::OnlyOne(n) => {
                    drop(l);
                    serve_raw(sock, Raw::CutAfter(n)).await;
                    return;
                }
                mode => mode,
            };
            tokio::spawn(serve_raw(sock, mode));
        }
    });
    (url, accepted, task)
}

/// One connection of [`raw_server`].
async fn serve_raw(mut sock: TcpStream, mode: Raw) {
    let mut buf = Vec::new();
    let mut answered = 0;
    while read_request(&mut sock, &mut buf).await {
        match mode {
            Raw::CutAfter(n) if answered == n => return,
            Raw::CutAfter(_) => {
                let r = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                if sock.write_all(r).await.is_err() {
                    return;
                }
            }
            Raw::CloseEach => {
                let r = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
                let _ = sock.write_all(r).await;
                return;
            }
            Raw::CloseEvery(n) if (answered + 1) % n == 0 => {
                let r = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
                let _ = sock.write_all(r).await;
                return;
            }
            Raw::CloseEvery(_) => {
                let r = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                if sock.write_all(r).await.is_err() {
                    return;
                }
            }
            Raw::Chunked => {
                for piece in [
                    &b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"[..],
                    b"Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhel",
                    b"lo\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r",
                    b"\n0\r\nX-Trailer: 1\r\n",
                    b"\r\n",
                ] {
                    if sock.write_all(piece).await.is_err() {
                        return;
                    }
                }
            }
            Raw::Http10UntilClose => {
                let r = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nthe body ends with the connection";
                let _ = sock.write_all(r).await;
                return;
            }
            Raw::OnlyOne(_) => unreachable!("served as CutAfter"),
        }
        answered += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_dying_mid_exchange_fails_that_request_and_the_producer_reconnects() {
    let (url, accepted, task) = raw_server(Raw::CutAfter(3)).await;
    let (out, obs, stats) = run(&plan(&url, 1, 40, 1), opts("POST", false)).await;
    let out = out.expect("the run completes");
    let m = measure(&out);
    // Per connection: 3 answered, the 4th cut off: not refused, in doubt (the server may have
    // acted on it).
    assert_eq!(
        (m.counters.sent, m.counters.acked, m.counters.nacked),
        (40, 30, 0)
    );
    assert_eq!(m.counters.errors.timeout, 10);
    assert_eq!(m.histograms.publish.len(), 30);
    assert_eq!(stats.no_response(), 10);
    // The client cannot tell this server from the keep-alive race (a close as the request
    // goes out, before any answer); a POST is not sent again.
    assert_eq!(stats.closed_unanswered(), 10);
    assert_eq!(stats.resent(), 0);
    assert_eq!(stats.count(200), 30);
    assert_eq!(stats.connections(), 10);
    assert_eq!(accepted.load(Relaxed), 10);
    let lost = obs.mentioning(
        "connection lost: the server closed the kept-alive connection as the request went out, \
         before any response (not sent again: POST is not idempotent",
    );
    assert_eq!(lost.len(), 10, "{:?}", obs.events);
    assert_eq!(obs.mentioning(": reconnected").len(), 9, "{:?}", obs.events);
    task.abort();

    // The first request of a connection cut the same way is not that race: a plain loss.
    let (url, _, task) = raw_server(Raw::CutAfter(0)).await;
    let (out, obs, stats) = run(&plan(&url, 1, 3, 1), opts("GET", false)).await;
    let m = measure(out.as_ref().expect("the run completes"));
    assert_eq!((m.counters.acked, m.counters.nacked), (0, 0));
    assert_eq!(m.counters.errors.timeout, 3, "in doubt");
    assert_eq!((stats.no_response(), stats.resent()), (3, 0));
    let lost =
        obs.mentioning("connection lost: connection closed before the response was complete");
    assert_eq!(lost.len(), 3, "{:?}", obs.events);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_request_caught_by_a_keep_alive_close_is_sent_again() {
    // Each connection answers 3 requests, then reads the 4th and closes without a byte of
    // answer, as Apache does to kept-alive connections when its workers are busy: a GET is
    // sent again on a new connection (RFC 9112 §9.3.1.1) and nothing is lost.
    let (url, accepted, task) = raw_server(Raw::CutAfter(3)).await;
    let (out, obs, stats) = run(&plan(&url, 1, 40, 1), opts("GET", false)).await;
    let m = measure(out.as_ref().expect("the run completes"));
    assert_eq!(
        (m.counters.sent, m.counters.acked, m.counters.nacked),
        (40, 40, 0)
    );
    assert_eq!(m.counters.errors.total(), 0, "{:?}", m.counters.errors);
    assert_eq!(m.histograms.publish.len(), 40, "one latency per request");
    assert_eq!(stats.count(200), 40);
    // 14 connections answer 3 + ... + 3 + 1; the first 13 each cut one request off.
    assert_eq!((stats.resent(), stats.no_response()), (13, 0));
    assert_eq!((stats.connections(), stats.server_closes()), (14, 13));
    assert_eq!(accepted.load(Relaxed), 14);
    assert!(obs.driver_events().is_empty(), "{:?}", obs.events);
    let line = stats.summary().line();
    assert!(
        line.contains("13 sent again after the server closed a kept-alive connection"),
        "{line}"
    );
    task.abort();
}

/// The keep-alive race with nowhere to send the request again: the server closes as the
/// third GET goes out and then refuses connections. That GET is without response and in
/// doubt, and it is not counted as sent again (it was, as soon as the reopening began).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_new_connection_never_opens_was_not_sent_again() {
    let (url, accepted, task) = raw_server(Raw::OnlyOne(2)).await;
    let (out, obs, stats) = run(&plan(&url, 1, 3, 1), opts("GET", false)).await;
    let m = measure(out.as_ref().expect("the run completes"));
    assert_eq!((m.counters.sent, m.counters.acked), (3, 2));
    assert_eq!(
        m.counters.errors.timeout, 1,
        "in doubt: {:?}",
        m.counters.errors
    );
    assert_eq!((stats.no_response(), stats.resent()), (1, 0));
    assert_eq!(accepted.load(Relaxed), 1);
    let lost = obs.mentioning("no new connection opened to send it again: cannot connect");
    assert_eq!(lost.len(), 1, "{:?}", obs.events);
    task.abort();
}

/// HTTP/2: a server that refuses every stream unprocessed (a GOAWAY with last stream id 0)
/// and then refuses connections. The requests are sent again on no connection: they fail
/// (nacks without response), none counted as sent again, and the event says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_refused_requests_with_no_new_connection_fail_unsent() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut sock, _) = l.accept().await.unwrap();
        drop(l);
        // By hand: the preface, empty SETTINGS and their ack, then once a request's HEADERS
        // came, GOAWAY with last stream id 0 (NO_ERROR), read on until the client leaves.
        let mut buf = vec![0u8; 24];
        sock.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf[..], b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        sock.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0])
            .await
            .unwrap();
        loop {
            let mut head = [0u8; 9];
            sock.read_exact(&mut head).await.unwrap();
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let mut body = vec![0u8; len];
            sock.read_exact(&mut body).await.unwrap();
            if head[3] == 1 {
                break;
            }
        }
        let goaway = [0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        sock.write_all(&goaway).await.unwrap();
        let mut rest = [0u8; 4096];
        while let Ok(n) = sock.read(&mut rest).await {
            if n == 0 {
                break;
            }
        }
    });
    let (out, obs, stats) = run(&plan(&url, 1, 4, 4), opts("GET", true)).await;
    let m = measure(out.as_ref().expect("the run completes"));
    assert_eq!(m.counters.acked, 0);
    assert_eq!(
        m.counters.nacked,
        m.counters.sent,
        "{:?} {:?} {:?}",
        m.counters,
        obs.events,
        stats.summary().line()
    );
    assert_eq!(stats.no_response(), m.counters.sent);
    assert_eq!(stats.resent(), 0);
    let lost = obs.mentioning(
        "no new one opened to send the requests it refused unprocessed again: cannot connect",
    );
    assert_eq!(lost.len(), 1, "{:?}", obs.events);
    server.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_closing_in_good_order_is_not_an_error() {
    let (url, accepted, task) = raw_server(Raw::CloseEach).await;
    let (out, obs, stats) = run(&plan(&url, 1, 20, 1), opts("POST", false)).await;
    let out = out.expect("run");
    let m = measure(&out);
    assert_eq!((m.counters.acked, m.counters.nacked), (20, 0));
    assert_eq!(m.counters.errors.total(), 0, "{:?}", m.counters.errors);
    assert_eq!(stats.connections(), 20, "a new connection per request");
    assert_eq!(accepted.load(Relaxed), 20);
    assert!(stats.server_closes() >= 19, "{}", stats.server_closes());
    assert!(obs.driver_events().is_empty(), "{:?}", obs.events);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_responses_split_across_writes_are_read_to_their_end() {
    let (url, accepted, task) = raw_server(Raw::Chunked).await;
    let (out, obs, stats) = run(&plan(&url, 2, 600, 1), opts("POST", false)).await;
    let m = measure(out.as_ref().expect("run"));
    assert_eq!(
        (m.counters.sent, m.counters.acked, m.counters.nacked),
        (600, 600, 0)
    );
    assert_eq!(m.counters.errors.total(), 0, "{:?}", m.counters.errors);
    assert_eq!(m.histograms.publish.len(), 600);
    assert_eq!(stats.codes(), vec![(200, 600)], "the 100s are not counted");
    assert_eq!((stats.no_response(), stats.server_closes()), (0, 0));
    assert_eq!(stats.connections(), 2, "keep-alive through chunked bodies");
    assert_eq!(accepted.load(Relaxed), 2);
    assert!(obs.driver_events().is_empty(), "{:?}", obs.events);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_that_end_their_connection_are_acked_and_counted() {
    // Every third response says `Connection: close`; HTTP/1.0 bodies end with the connection.
    for (mode, connections) in [(Raw::CloseEvery(3), 10), (Raw::Http10UntilClose, 30)] {
        let (url, accepted, task) = raw_server(mode).await;
        let (out, obs, stats) = run(&plan(&url, 1, 30, 1), opts("POST", false)).await;
        let m = measure(out.as_ref().expect("run"));
        assert_eq!(
            (m.counters.sent, m.counters.acked, m.counters.nacked),
            (30, 30, 0)
        );
        assert_eq!(m.counters.errors.total(), 0, "{:?}", m.counters.errors);
        assert_eq!(m.histograms.publish.len(), 30);
        assert_eq!(stats.count(200), 30);
        assert_eq!(stats.no_response(), 0);
        assert_eq!(stats.connections(), connections);
        assert_eq!(accepted.load(Relaxed), connections);
        assert_eq!(
            stats.server_closes(),
            connections,
            "each ended by the server after a response"
        );
        assert!(obs.driver_events().is_empty(), "{:?}", obs.events);
        task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_storms_open_publish_and_close() {
    for http2 in [false, true] {
        let srv = Served::start(HttpServer::new()).await;
        let s = Scenario {
            target: Some(srv.url.clone()),
            consumers: ConsumersSection {
                per_topic: Some(0),
                ..Default::default()
            },
            connections: ConnectionsSection {
                mode: Some(msgbench_core::scenario::ConnectionMode::Storm),
                count: Some(12),
                messages: Some(2),
                concurrency: Some(4),
                ..Default::default()
            },
            phases: PhasesSection {
                warmup: Some("0s".into()),
                ..Default::default()
            },
            output: OutputSection {
                tick: Some("100ms".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let p = resolve(&s, 7).unwrap();
        let (out, _, stats) = run(&p, opts("POST", http2)).await;
        let out = out.expect("run");
        assert!(out.connections.is_some());
        let connects: u64 = out.phases.iter().map(|p| p.counters.connects).sum();
        let sent: u64 = out.phases.iter().map(|p| p.counters.sent).sum();
        let errors: u64 = out.phases.iter().map(|p| p.counters.errors.total()).sum();
        assert_eq!((connects, sent, errors), (12, 24, 0), "http2: {http2}");
        assert_eq!(stats.connections(), 12);
        assert_eq!(stats.count(200), 24);
        assert_eq!(srv.counts.requests.load(Relaxed), 24);
        srv.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_stops_with_keep_alive_connections_open() {
    let srv = Served::start(HttpServer::new()).await;
    let addr = srv
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/bench")
        .to_string();
    let mut sock = TcpStream::connect(&addr).await.unwrap();
    sock.write_all(b"POST /x HTTP/1.1\r\nhost: t\r\ncontent-length: 3\r\n\r\nabc")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = sock.read(&mut buf).await.unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.ends_with("ok\n"), "{head}");
    assert_eq!(srv.counts.body_bytes.load(Relaxed), 3);
    // The connection stays open (keep-alive); stopping closes it and returns promptly.
    let t = std::time::Instant::now();
    srv.stop().await;
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    let n = tokio::time::timeout(Duration::from_secs(3), sock.read(&mut buf))
        .await
        .expect("closed by the server")
        .unwrap_or(0);
    assert_eq!(n, 0, "end of stream");
}
