//! ActiveMQ Artemis restarted mid-run (`scripts/brokers.sh restart-artemis`: the broker stops,
//! every connection is cut, and it comes back on the same data seconds later). Its own test
//! binary, because the restart would cut the connections of any test running beside it; cargo
//! runs test binaries one at a time.

use crate::util;

use std::process::Command;
use std::time::Duration;
use util::*;

/// Producers and consumers reconnect and go on. Durable messages in a durable queue survive
/// the restart, and every message lost is one msgbench reported in doubt (its outcome never
/// came) or refused: the loss is exact.
#[test]
fn artemis_restart_mid_run() {
    let _turn = crate::turn("artemis");
    let url = need!(ARTEMIS);
    let d = TempDir::new("amqp10-restart");
    std::fs::write(d.path("s.toml"), "[amqp10]\ndurable = true\n").unwrap();
    let scenario = d.path("s.toml").to_string_lossy().into_owned();
    let run = spawn_run(
        &d.0,
        &[
            "run",
            &scenario,
            "--target",
            &url,
            "-p",
            "2",
            "--topic",
            "it10.restart",
            "--rate",
            "1000",
            "--duration",
            "20s",
            "--warmup",
            "0s",
            "--drain",
            "5s",
            "--ack-timeout",
            "3s",
            "-o",
            "r.jsonl",
        ],
    );
    std::thread::sleep(Duration::from_secs(2));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/brokers.sh");
    let restart = Command::new(script)
        .args(["restart-artemis", "1"])
        .output()
        .unwrap();
    assert!(restart.status.success(), "{}", stderr(&restart));
    let r = finish_json(run);
    let c = &measure(&r)["counters"];
    let e = &c["errors"];
    let count = |kind: &str| count_events(&r, kind);
    // Two producers and a consumer, each with its own connection.
    assert!(
        count("disconnected") >= 3,
        "every connection was cut: {}",
        r["events"]
    );
    assert!(
        count("reconnected") >= 3,
        "every connection came back: {}",
        r["events"]
    );
    let i = &r["integrity"];
    assert_eq!(u(&i["expected"]), u(&i["delivered"]) + u(&i["lost"]), "{i}");
    assert!(u(&i["delivered"]) > u(&c["sent"]) / 2, "{i} {c}");
    let in_doubt = u(&e["timeout"]) + u(&e["send"]) + u(&c["nacked"]);
    assert!(
        u(&i["lost"]) <= in_doubt,
        "every lost message was reported in doubt or refused: {i} {e}"
    );
    let file = std::fs::read_to_string(d.path("r.jsonl")).unwrap();
    assert!(file.lines().last().unwrap().contains("\"type\":\"end\""));
}
