//! Segmented runs, proved locally: four msgbench processes run the four segments of one plan
//! against a real nats-server, `msgbench merge` joins them, and the merged account must equal a
//! single process running the whole plan — and a loss injected into one segment's path must
//! show up, exactly, in the merged totals.

use crate::util;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use util::*;

/// Two topics, one producer and two fan-out consumers each. Segment I of 4 runs producer I (if
/// any) and consumer I: producer 0 (segment 0) feeds consumers 0 and 1 (segments 0 and 1), so
/// deliveries cross segments.
const PLAN: &[&str] = &[
    "--topics", "2", "-p", "1", "-c", "2", "-n", "30000", "--rate", "10000", "--warmup", "0",
    "--drain", "10s",
];

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Runs segments 0..4 as separate processes released together; `target_of(i)` is segment i's
/// broker URL. Returns the four JSON reports.
fn run_segments(
    d: &TempDir,
    topic: &str,
    target_of: impl Fn(u32) -> String,
    start_at: u64,
) -> Vec<serde_json::Value> {
    let start = start_at.to_string();
    let runs: Vec<_> = (0..4u32)
        .map(|i| {
            let seg = format!("{i}/4");
            let out = format!("seg-{i}.jsonl");
            let target = target_of(i);
            let mut args: Vec<&str> = vec!["run", &target];
            args.extend_from_slice(PLAN);
            args.extend(["--topic", topic]);
            args.extend(["--segment", &seg, "--start-at", &start, "-o", &out]);
            spawn_run(&d.0, &args)
        })
        .collect();
    runs.into_iter().map(finish_json).collect()
}

fn merge(d: &TempDir) -> serde_json::Value {
    let files: Vec<String> = (0..4).map(|i| format!("seg-{i}.jsonl")).collect();
    let mut args = vec!["merge"];
    args.extend(files.iter().map(String::as_str));
    args.extend(["-o", "run.jsonl", "--format", "json"]);
    let o = msgbench(&d.0, &args);
    assert!(o.status.success(), "merge failed: {}", stderr(&o));
    assert!(stderr(&o).contains("4 of 4 segments"), "{}", stderr(&o));
    let merged: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_valid_and_pure(&d.0, "run.jsonl", &merged);
    merged
}

#[test]
fn four_segments_merge_to_the_single_process_run() {
    let url = need!(NATS);
    let d = TempDir::new("segments");
    let segs = run_segments(&d, "seg.{i}", |_| url.clone(), unix_ms() + 4000);
    for (i, s) in segs.iter().enumerate() {
        assert!(
            s["warnings"].to_string().contains("merge all segments"),
            "segment {i} must say its delivery figures are partial: {}",
            s["warnings"]
        );
    }
    let merged = merge(&d);

    let mut args = vec!["run", url.as_str()];
    args.extend_from_slice(PLAN);
    args.extend(["--topic", "seg.{i}", "-o", "single.jsonl"]);
    let single = run_json(&d.0, &args);

    let (m, s) = (measure(&merged), measure(&single));
    assert_eq!(u(&m["counters"]["sent"]), 30_000);
    assert_eq!(u(&m["counters"]["sent"]), u(&s["counters"]["sent"]));
    assert_eq!(u(&m["counters"]["received"]), u(&s["counters"]["received"]));
    // Exact histograms: every delivery is in the merged end-to-end histogram once.
    assert_eq!(u(&m["e2e"]["count"]), 60_000);
    let (mi, si) = (&merged["integrity"], &single["integrity"]);
    for k in ["expected", "delivered", "lost", "duplicated"] {
        assert_eq!(mi[k], si[k], "integrity.{k}: merged {mi} vs single {si}");
    }
    assert_eq!(u(&mi["expected"]), 60_000);
    assert_eq!(u(&mi["lost"]), 0);
    // One host: the segments shared one clock.
    assert_eq!(merged["begin"]["clock"]["uncertainty_us"], 0);
    assert_eq!(merged["begin"]["segments"].as_array().unwrap().len(), 4);
    // Every segment released its load at the same instant: none reports a late start.
    assert!(
        !merged["warnings"].to_string().contains("late start"),
        "{}",
        merged["warnings"]
    );
}

/// A TCP proxy in front of the broker that can cut every connection through it.
struct CuttingProxy {
    port: u16,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl CuttingProxy {
    fn start(upstream: String) -> CuttingProxy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let conns = Arc::new(Mutex::new(Vec::<TcpStream>::new()));
        let c = conns.clone();
        std::thread::spawn(move || {
            for client in l.incoming().flatten() {
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                c.lock().unwrap().push(client.try_clone().unwrap());
                c.lock().unwrap().push(server.try_clone().unwrap());
                let pump = |mut from: TcpStream, mut to: TcpStream| {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 65536];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                    });
                };
                pump(client.try_clone().unwrap(), server.try_clone().unwrap());
                pump(server, client);
            }
        });
        CuttingProxy { port, conns }
    }

    fn cut(&self) {
        for s in self.conns.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

#[test]
fn loss_in_one_segments_path_shows_in_the_merged_totals() {
    let url = need!(NATS);
    let upstream = url.trim_start_matches("nats://").to_string();
    let proxy = CuttingProxy::start(upstream);
    let via_proxy = format!("nats://127.0.0.1:{}", proxy.port);
    let d = TempDir::new("segments-loss");
    let start = unix_ms() + 4000;
    // Segment 2 (consumer 2 only, fed by producer 1 in segment 1) reaches the broker through
    // the proxy, which cuts its connection 1.5 s into the 3 s run: NATS core delivers at most
    // once, so what is published until it has reconnected never reaches it.
    let cutter = {
        let conns = proxy.conns.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(
                (start + 1500).saturating_sub(unix_ms()),
            ));
            let p = CuttingProxy { port: 0, conns };
            p.cut();
        })
    };
    let segs = run_segments(
        &d,
        "segloss.{i}",
        |i| {
            if i == 2 {
                via_proxy.clone()
            } else {
                url.clone()
            }
        },
        start,
    );
    cutter.join().unwrap();
    let delivered = |i: usize| u(&segs[i]["integrity"]["delivered"]);
    // Each consumer should get its topic's 15,000 messages.
    for i in [0, 1, 3] {
        assert_eq!(
            delivered(i),
            15_000,
            "segment {i}: {}",
            segs[i]["integrity"]
        );
    }
    let shortfall = 15_000 - delivered(2);
    assert!(
        shortfall > 0,
        "the cut lost nothing in segment 2: {} {}",
        segs[2]["integrity"],
        segs[2]["events"]
    );
    assert!(count_events(&segs[2], "reconnected") >= 1);

    let merged = merge(&d);
    let i = &merged["integrity"];
    assert_eq!(u(&i["expected"]), 60_000);
    assert_eq!(u(&i["lost"]), shortfall, "merged {i}");
    assert_eq!(u(&i["delivered"]), 60_000 - shortfall);
    assert_eq!(u(&i["duplicated"]), 0);
    // The merged events name the segment whose consumer reconnected.
    assert!(
        merged["events"].to_string().contains("[segment 2]"),
        "{}",
        merged["events"]
    );
}

#[test]
fn a_time_reference_corrects_and_records_the_clock() {
    let d = TempDir::new("segments-time");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut server = std::process::Command::new(bin())
        .args(["serve", "time", "--listen", &listen])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let report = run_json(
        &d.0,
        &[
            "run",
            "mem://",
            "-n",
            "2000",
            "--rate",
            "4000",
            "--warmup",
            "0",
            "--segment",
            "0/1",
            "--time-reference",
            &listen,
            "-o",
            "r.jsonl",
        ],
    );
    let _ = server.kill();
    let _ = server.wait();
    let clock = &report["begin"]["clock"];
    assert_eq!(clock["scope"], "wall", "{clock}");
    assert_eq!(clock["reference"], listen.as_str());
    assert!(
        clock["reference_rtt_ns"].as_u64().unwrap() < 50_000_000,
        "{clock}"
    );
    // Same host: the measured offset is within the round trip.
    let off = clock["reference_offset_ns"]
        .as_i64()
        .unwrap()
        .unsigned_abs();
    assert!(off < 50_000_000, "{clock}");
    // Latencies in the anchored clock are still sane.
    let m = measure(&report);
    assert_eq!(u(&m["e2e"]["count"]), 2000);
    assert!(u(&m["e2e"]["p50"]) < 1_000_000_000, "{}", m["e2e"]);
    assert_valid_and_pure(&d.0, "r.jsonl", &report);

    // No reference answering: a clear error, before anything runs.
    let o = msgbench(
        &d.0,
        &[
            "run",
            "mem://",
            "-n",
            "10",
            "--segment",
            "0/1",
            "--time-reference",
            &listen,
        ],
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no answer from the time reference"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_start_time_already_past_is_reported_as_late() {
    let d = TempDir::new("segments-late");
    let past = (unix_ms() - 5000).to_string();
    let report = run_json(
        &d.0,
        &[
            "run",
            "mem://",
            "-n",
            "100",
            "--warmup",
            "0",
            "--segment",
            "0/2",
            "--start-at",
            &past,
        ],
    );
    assert!(
        report["warnings"].to_string().contains("late start"),
        "{}",
        report["warnings"]
    );
}

#[test]
fn bad_segment_flags_are_clear_errors() {
    let d = TempDir::new("segments-bad");
    for (args, expect) in [
        (vec!["--segment", "4/4"], "count from 0"),
        (vec!["--segment", "auto/4"], "JOB_COMPLETION_INDEX"),
        (vec!["--segment", "two"], "expected I/N"),
        (vec!["--segment", "consumers", "-c", "0"], "no consumers"),
        (vec!["--start-at", "tomorrow"], "RFC 3339"),
        (vec!["--start-at", "1795000000"], "milliseconds"),
    ] {
        let mut all = vec!["run", "mem://", "-n", "10"];
        all.extend(args.iter());
        let o = msgbench(&d.0, &all);
        assert!(!o.status.success(), "{args:?} was accepted");
        assert!(stderr(&o).contains(expect), "{args:?}: {}", stderr(&o));
    }
    let o = msgbench(&d.0, &["merge", "nothing.jsonl", "-o", "out.jsonl"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("nothing.jsonl"), "{}", stderr(&o));
}
