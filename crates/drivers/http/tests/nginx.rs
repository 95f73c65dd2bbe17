//! The HTTP driver against a real server: the nginx that `scripts/brokers.sh up` starts on
//! loopback (HTTP/1.1, h2c and HTTPS listeners), plus an ignored measurement of the closed-loop
//! ceiling next to wrk's.
//!
//! ```sh
//! scripts/brokers.sh up && eval "$(scripts/brokers.sh env)"
//! cargo test -p msgbench-driver-http --test nginx
//! cargo test --release -p msgbench-driver-http --test nginx -- --ignored --nocapture
//! ```

mod common;

/// The msgbench binary's allocator: the measurement below should cost what a real run costs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use common::{measure, opts, plan, run};
use msgbench_core::driver::{ConnectFailure, DriverError, EventSink};
use msgbench_core::runner::RunError;
use msgbench_core::scenario::{
    ConsumersSection, OutputSection, PhasesSection, ProducersSection, Scenario, TlsPlan, resolve,
};
use msgbench_driver_http::{HttpDriver, HttpOptions};
use std::time::Duration;

/// A `scripts/brokers.sh env` variable, or `None` when it is unset: the test is then skipped
/// with a message (it fails instead under `MSGBENCH_IT_REQUIRE=1`, as `scripts/test.sh` runs).
fn env(name: &str) -> Option<String> {
    if let Ok(v) = std::env::var(name) {
        return Some(v);
    }
    let hint = "start the test servers with `scripts/brokers.sh up` and load their addresses with `eval \"$(scripts/brokers.sh env)\"`";
    if std::env::var_os("MSGBENCH_IT_REQUIRE").is_some() {
        panic!("{name} is not set (and MSGBENCH_IT_REQUIRE is): {hint}");
    }
    eprintln!("\nskipped: {name} is not set: {hint}");
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_http1_post_and_get() {
    let Some(url) = env("MSGBENCH_IT_HTTP_URL") else {
        return;
    };
    for method in ["POST", "GET"] {
        let (out, obs, stats) = run(&plan(&url, 8, 4000, 1), opts(method, false)).await;
        let out = out.expect("run");
        let m = measure(&out);
        assert_eq!((m.counters.acked, m.counters.nacked), (4000, 0), "{method}");
        assert_eq!(m.counters.errors.total(), 0, "{:?}", m.counters.errors);
        assert_eq!(m.histograms.publish.len(), 4000);
        assert_eq!(stats.codes(), vec![(200, 4000)]);
        assert_eq!(
            stats.connections(),
            8,
            "keep-alive: one connection per producer"
        );
        assert!(obs.driver_events().is_empty(), "{:?}", obs.events);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_h2c_many_streams_per_connection() {
    let Some(url) = env("MSGBENCH_IT_HTTP_H2C_URL") else {
        return;
    };
    let (out, _, stats) = run(&plan(&url, 4, 8000, 64), opts("POST", true)).await;
    let m = measure(out.as_ref().expect("run"));
    assert_eq!((m.counters.acked, m.counters.nacked), (8000, 0));
    assert_eq!(m.counters.errors.total(), 0, "{:?}", m.counters.errors);
    assert_eq!(m.histograms.publish.len(), 8000);
    assert_eq!(stats.codes(), vec![(200, 8000)]);
    assert_eq!(stats.connections(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_https_verifies_the_server() {
    let Some(url) = env("MSGBENCH_IT_HTTPS_URL") else {
        return;
    };
    let mut p = plan(&url, 4, 2000, 1);
    p.tls.ca_file = env("MSGBENCH_IT_HTTPS_CA").map(Into::into);
    let (out, _, stats) = run(&p, opts("POST", false)).await;
    let m = measure(out.as_ref().expect("run"));
    assert_eq!((m.counters.acked, m.counters.nacked), (2000, 0));
    assert_eq!(stats.count(200), 2000);

    // Without the test CA the certificate cannot be trusted: refused at the driver (no system
    // roots on this machine) or at the handshake (not signed by a system root).
    let (sink, _rx) = EventSink::channel();
    match HttpDriver::new(
        &url,
        HttpOptions::default(),
        &TlsPlan::default(),
        sink,
        Duration::from_secs(3),
    ) {
        Err(DriverError::Config(msg)) => assert!(msg.contains("CA"), "{msg}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => {
            let (out, _, _) = run(&plan(&url, 1, 10, 1), opts("POST", false)).await;
            match out {
                Err(RunError::Connect {
                    error: DriverError::Connect { cause, .. },
                    ..
                }) => assert_eq!(cause, ConnectFailure::Tls),
                other => panic!("expected a TLS failure, got {:?}", other.map(|_| ())),
            }
        }
    }
}

/// HTTP/2 over TLS, agreed by ALPN: a window of 200 requests per connection against this
/// listener's 128 streams (nginx's default, which scripts/brokers.sh keeps here), every one
/// answered (an HTTP/2 client would fail against a server speaking HTTP/1.1), the limit read
/// from nginx's SETTINGS and kept to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_http2_over_tls_by_alpn() {
    let Some(url) = env("MSGBENCH_IT_HTTPS_URL") else {
        return;
    };
    let mut p = plan(&url, 2, 4000, 200);
    p.tls.ca_file = env("MSGBENCH_IT_HTTPS_CA").map(Into::into);
    let (out, obs, stats) = run(&p, opts("POST", true)).await;
    let m = measure(out.as_ref().expect("run"));
    assert_eq!((m.counters.acked, m.counters.nacked), (4000, 0));
    assert_eq!(stats.codes(), vec![(200, 4000)]);
    assert_eq!(stats.connections(), 2);
    let said = obs.mentioning("the server allows 128 concurrent streams per connection");
    assert_eq!(said.len(), 1, "{:?}", obs.events);
}

/// CPU seconds (user + system) of this process, or of its waited-for children.
fn cpu_s(who: libc::c_int) -> f64 {
    // SAFETY: getrusage fills the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU seconds used so far by nginx's worker processes (children of the master whose PID
/// brokers.sh recorded), if they can be found.
fn nginx_cpu_s() -> Option<f64> {
    let dir = std::env::var("MSGBENCH_BROKERS_DIR").unwrap_or_else(|_| {
        format!(
            "{}/.cache/msgbench-brokers",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    let master: u32 = std::fs::read_to_string(format!("{dir}/nginx.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let mut ticks = 0u64;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        // After "pid (comm) ": state, ppid (field 4), ..., utime (14), stime (15).
        if f.len() > 12 && f[1].parse::<u32>().ok() == Some(master) {
            ticks += f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
        }
    }
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ticks as f64 / hz)
}

/// One closed-loop run of 1 s warm-up + 5 s; prints requests/s, latency and CPU.
async fn measure_msgbench(label: &str, url: &str, producers: u32, window: usize, http2: bool) {
    let s = Scenario {
        target: Some(url.into()),
        producers: ProducersSection {
            per_topic: Some(producers),
            max_in_flight: Some(window),
            size: Some("128".into()),
            ..Default::default()
        },
        consumers: ConsumersSection {
            per_topic: Some(0),
            ..Default::default()
        },
        phases: PhasesSection {
            warmup: Some("1s".into()),
            duration: Some("5s".into()),
            drain: Some("2s".into()),
            ..Default::default()
        },
        output: OutputSection {
            workers: Some(2),
            ..Default::default()
        },
        ..Default::default()
    };
    let p = resolve(&s, 1).unwrap();
    let (cpu0, nginx0, t0) = (
        cpu_s(libc::RUSAGE_SELF),
        nginx_cpu_s(),
        std::time::Instant::now(),
    );
    let (out, _, stats) = run(&p, opts("GET", http2)).await;
    let (cpu1, nginx1, wall) = (cpu_s(libc::RUSAGE_SELF), nginx_cpu_s(), t0.elapsed());
    let out = out.expect("run");
    let m = measure(&out);
    let n = m.counters.acked as f64;
    let secs = m.duration_s();
    let h = &m.histograms.publish;
    let nginx = match (nginx0, nginx1) {
        (Some(a), Some(b)) => format!(
            "; nginx {:.2} CPU s, msgbench {:.2} CPU s in {:.1} s",
            b - a,
            cpu1 - cpu0,
            wall.as_secs_f64()
        ),
        _ => String::new(),
    };
    println!(
        "msgbench {label}: {:.0} requests/s over {secs:.1} s; latency p50 {:.0} µs, p99 {:.0} µs; \
         CPU {:.2} s/M requests (measure phase: {:.2} s for {n} requests){nginx}; \
         errors {}; statuses {}",
        n / secs,
        h.value_at_quantile(0.5) as f64 / 1e3,
        h.value_at_quantile(0.99) as f64 / 1e3,
        m.cpu_s / n * 1e6,
        m.cpu_s,
        m.counters.errors.total(),
        stats.summary().line(),
    );
    assert_eq!(m.counters.nacked + m.counters.errors.total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement: run in release with --ignored --nocapture"]
async fn measure_closed_loop_ceiling_against_nginx() {
    let Some(url) = env("MSGBENCH_IT_HTTP_URL") else {
        return;
    };
    measure_msgbench("HTTP/1.1 GET, 50 connections", &url, 50, 1, false).await;
    let Some(h2c) = env("MSGBENCH_IT_HTTP_H2C_URL") else {
        return;
    };
    measure_msgbench("h2c GET, 10 connections x 32 streams", &h2c, 10, 32, true).await;

    let Ok(wrk) = which("wrk") else {
        println!("wrk: not installed (apt-get install wrk) — no comparison");
        return;
    };
    let c0 = cpu_s(libc::RUSAGE_CHILDREN);
    let n0 = nginx_cpu_s();
    let out = std::process::Command::new(wrk)
        .args(["-c50", "-t2", "-d6s", "--latency", &url])
        .output()
        .expect("wrk runs");
    let c1 = cpu_s(libc::RUSAGE_CHILDREN);
    let n1 = nginx_cpu_s();
    let text = String::from_utf8_lossy(&out.stdout);
    let rate: f64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Requests/sec in wrk's output:\n{text}"));
    let p50 = text
        .lines()
        .find(|l| l.trim_start().starts_with("50%"))
        .unwrap_or("")
        .trim()
        .to_string();
    let p99 = text
        .lines()
        .find(|l| l.trim_start().starts_with("99%"))
        .unwrap_or("")
        .trim()
        .to_string();
    let requests = rate * 6.0;
    let nginx = match (n0, n1) {
        (Some(a), Some(b)) => format!(", nginx {:.2} CPU s", b - a),
        _ => String::new(),
    };
    println!(
        "wrk -c50 -t2 -d6s: {rate:.0} requests/s; latency {p50}, {p99}; CPU {:.2} s/M requests ({:.2} s){nginx}",
        (c1 - c0) / requests * 1e6,
        c1 - c0
    );
}

fn which(bin: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
        .ok_or(())
}
