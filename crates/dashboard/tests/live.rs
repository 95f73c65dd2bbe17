//! The live dashboard over real HTTP: history first, then live points, the end; its token;
//! and the memory bound of a day-long run.

mod common;

use common::*;
use msgbench_dashboard::LiveDashboard;
use msgbench_dashboard::live::Hub;
use msgbench_dashboard::series::DEFAULT_CAP;
use msgbench_dashboard::sysstat::Sampler;
use serde_json::Value;
use std::time::{Duration, Instant};

/// Waits until the server has applied `n` intervals (the feed is asynchronous).
fn wait_for_intervals(addr: &str, n: u64, q: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = get(addr, &format!("/api/live/state{q}"), &[]);
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        if v["totals"]["intervals"].as_u64() == Some(n) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "the server never saw {n} intervals: {v}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_late_page_gets_the_history_then_live_points_then_the_end() {
    let d = LiveDashboard::start("127.0.0.1:0", None).unwrap();
    assert!(d.url().ends_with('/'), "{}", d.url());
    let addr = host_port(d.url());
    let feed = d.feed();
    feed.send(&begin("late joiner"));
    for i in 0..5 {
        feed.send(&interval(i, 1000, 200));
    }
    wait_for_intervals(&addr, 5, "");

    let mut s = EventStream::open(&addr, "/api/live/events");
    let hello = s.next().expect("a hello event");
    assert_eq!(hello.event, "hello");
    let h: Value = serde_json::from_str(&hello.data).unwrap();
    assert_eq!(h["meta"]["name"], "late joiner");
    let columns: Vec<&str> = h["series"]["schema"]["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    for k in [
        "t",
        "dt",
        "sent_per_s",
        "received_per_s",
        "e2e.p99",
        "publish.max",
        "lost",
        "gen_cpu",
        "host_cpu",
        "host_mem",
        "gen_rss",
    ] {
        assert!(columns.contains(&k), "no column {k} in {columns:?}");
    }
    assert_eq!(h["series"]["points"].as_array().unwrap().len(), 5);
    assert_eq!(h["totals"]["sent"], 5000);
    let sent_col = columns.iter().position(|c| *c == "sent_per_s").unwrap();
    let p99_col = columns.iter().position(|c| *c == "e2e.p99").unwrap();
    assert_eq!(h["series"]["points"][4][sent_col], 1000.0);
    // 200 µs, in ms, to the histogram's 3 significant digits.
    let p99 = h["series"]["points"][4][p99_col].as_f64().unwrap();
    assert!((p99 - 0.2).abs() < 0.001, "{p99}");

    feed.send(&interval(5, 3000, 900));
    let p = s.next_named("point").expect("a live point");
    let p: Value = serde_json::from_str(&p.data).unwrap();
    assert_eq!(p["row"].as_array().unwrap().len(), columns.len());
    assert_eq!(p["row"][0], 6.0);
    assert_eq!(p["row"][sent_col], 3000.0);
    assert_eq!(p["totals"]["sent"], 8000);

    feed.send(&end(6.0, 8000));
    let e = s.next_named("end").expect("the end");
    let e: Value = serde_json::from_str(&e.data).unwrap();
    assert_eq!(e["integrity"]["delivered"], 8000);
    assert_eq!(feed.dropped(), 0);

    // The page and its assets are served.
    let (status, page) = get(&addr, "/", &[]);
    assert_eq!(status, 200);
    assert!(page.contains("/assets/live.js\""), "{page}");
    let (status, js) = get(&addr, "/assets/vendor/uplot/uPlot.iife.min.js", &[]);
    assert_eq!(status, 200);
    assert!(js.contains("uPlot"));
    assert_eq!(get(&addr, "/assets/nope.js", &[]).0, 404);
    // Without a token, only loopback host names are answered (no DNS rebinding).
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(
        &mut s,
        b"GET / HTTP/1.1\r\nHost: rebound.example:80\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut s, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    d.stop();
}

#[test]
fn with_a_token_every_request_must_carry_it() {
    let token = "t0ken-for-tests";
    let d = LiveDashboard::start("127.0.0.1:0", Some(token)).unwrap();
    // The URL to print never holds the token.
    assert!(!d.url().contains(token), "{}", d.url());
    let addr = host_port(d.url());
    for path in [
        "/",
        "/api/live/events",
        "/api/live/state",
        "/assets/charts.js",
        "/nothing",
    ] {
        assert_eq!(get(&addr, path, &[]).0, 401, "{path} without a token");
        assert_eq!(
            get(&addr, &format!("{path}?token=wrong-token"), &[]).0,
            401,
            "{path}"
        );
        assert_eq!(
            get(&addr, path, &["Authorization: Bearer wrong-token"]).0,
            401,
            "{path}"
        );
    }
    let (status, page) = get(&addr, &format!("/?token={token}"), &[]);
    assert_eq!(status, 200);
    // The page's assets carry the token too.
    assert!(
        page.contains(&format!("/assets/charts.js?token={token}")),
        "{page}"
    );
    assert_eq!(
        get(&addr, &format!("/assets/charts.js?token={token}"), &[]).0,
        200
    );
    let bearer = format!("Authorization: Bearer {token}");
    assert_eq!(get(&addr, "/api/live/state", &[&bearer]).0, 200);
    d.feed().send(&begin("secured"));
    let mut s = EventStream::open(&addr, &format!("/api/live/events?token={token}"));
    assert_eq!(s.next().unwrap().event, "hello");
    d.stop();
}

#[test]
fn a_day_long_run_keeps_a_bounded_number_of_points() {
    let hub = Hub::new(DEFAULT_CAP);
    let mut sampler = Sampler::with_root("/nonexistent-proc-for-tests");
    hub.apply(&begin("24 hours"), &mut sampler);
    let mut most = 0;
    for i in 0..86_400 {
        hub.apply(&interval(i, 10, 0), &mut sampler);
        most = most.max(hub.points_held());
    }
    assert!(most <= DEFAULT_CAP, "held up to {most} points");
    assert!(hub.points_held() >= DEFAULT_CAP / 2);
    let (hello, _rx) = hub.subscribe();
    let v: Value = serde_json::from_str(&hello).unwrap();
    assert_eq!(v["totals"]["intervals"], 86_400);
    assert_eq!(v["series"]["raw_points"], 86_400);
    // What a page joining now downloads stays small too.
    assert!(hello.len() < 4_000_000, "hello is {} bytes", hello.len());
}

#[test]
fn bad_addresses_are_clear_errors() {
    let e = LiveDashboard::start("nonsense", None)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("nonsense") && e.contains("HOST:PORT"), "{e}");
    let e = LiveDashboard::start("127.0.0.1:0", Some("short"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("token"), "{e}");
    // Beyond loopback without a token: refused before anything listens.
    let e = LiveDashboard::start("0.0.0.0:0", None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("beyond loopback") && e.contains("--token"),
        "{e}"
    );
}
