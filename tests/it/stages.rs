//! Multi-stage tracking as an engine feature, on the in-process broker (which carries only the
//! stamp, so these stages key by it): per-stage counts, loss and duplicates exact, the results
//! file valid and the report a pure function of it, and bad stage definitions refused with the
//! stage named. The AMQP 1.0 / ECP tests exercise keys from ids and properties and re-keying.

use crate::util;

use util::*;

fn scenario(dir: &TempDir, name: &str, target: &str, extra: &str) -> String {
    let text = format!(
        r#"name = "{name}"
target = "{target}"
[topics]
pattern = "st.{name}"
[producers]
rate = 20000
max_in_flight = 64
size = "100B"
[phases]
warmup = "0s"
messages = 20000
drain = "3s"
[tracking]
key = "{{producer}}.{{seq}}"
[[stages]]
name = "Sent"
on = "ack"
[[stages]]
name = "Received"
queue = "st.{name}"
window = true
{extra}"#
    );
    let path = dir.path(&format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn stage<'a>(r: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    r["stages"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no stage {name} in {}", r["stages"]))
}

/// Every message reaches every stage once; latencies are recorded per stage; the window is
/// the receive stage; the results file is valid and re-renders the same report.
#[test]
fn stages_count_every_message_once() {
    let d = TempDir::new("stages-exact");
    let sc = scenario(&d, "exact", "mem://stages-exact", "");
    let r = run_json(&d.0, &["run", &sc, "-o", "r.jsonl"]);
    assert_eq!(u(&measure(&r)["counters"]["sent"]), 20_000);
    for name in ["Sent", "Received"] {
        let s = stage(&r, name);
        assert_eq!(u(&s["reached"]), 20_000, "{name}: {s}");
        assert_eq!(u(&s["sent"]), 20_000);
        assert_eq!(u(&s["missing"]), 0, "{name}");
        assert_eq!(u(&s["duplicates"]), 0, "{name}");
        assert_eq!(u(&s["latency"]["count"]), 20_000, "{name}");
        assert!(s["msgs_per_s"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(stage(&r, "Received")["window"], true);
    // Arrival is after sending, for each message; so the medians are ordered.
    assert!(u(&stage(&r, "Received")["latency"]["p50"]) >= u(&stage(&r, "Sent")["latency"]["p50"]));
    assert_valid_and_pure(&d.0, "r.jsonl", &r);
}

/// Messages the broker drops are missing at the stage, exactly; duplicated ones are counted as
/// duplicates and not twice as reached. Lost messages give their window place back after the
/// ack timeout, so loss never stalls the run.
#[test]
fn loss_and_duplicates_are_exact_per_stage() {
    let d = TempDir::new("stages-faults");
    let sc = scenario(
        &d,
        "faults",
        "mem://stages-faults?drop_every=100&dup_every=50",
        "",
    );
    let o = msgbench(
        &d.0,
        &[
            "run",
            &sc,
            "--drain",
            "1s",
            "--ack-timeout",
            "300ms",
            "--format",
            "json",
            "--quiet",
        ],
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let recv = stage(&r, "Received");
    // Every 100th of 20,000 dropped: 200; every 50th duplicated, but the dropped ones (every
    // 100th is also a 50th) are not delivered at all: 200 duplicated deliveries.
    assert_eq!(u(&recv["missing"]), 200, "{recv}");
    assert_eq!(u(&recv["reached"]), 19_800, "{recv}");
    assert_eq!(u(&recv["duplicates"]), 200, "{recv}");
    assert_eq!(u(&stage(&r, "Sent")["missing"]), 0);
    let warnings = r["warnings"].to_string();
    assert!(
        warnings.contains("stage `Received`: 200 messages never reached it"),
        "{warnings}"
    );
}

/// Bad stage definitions fail before anything connects, naming the stage and what is wrong;
/// ids and properties on a driver that cannot carry them are refused too.
#[test]
fn bad_stages_are_refused_clearly() {
    let d = TempDir::new("stages-bad");
    let sc = scenario(
        &d,
        "bad",
        "mem://stages-bad",
        "[[stages]]\nname = \"Odd\"\nqueue = \"x\"\nkey = [\"header\"]\n",
    );
    let o = msgbench(&d.0, &["run", &sc]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("stage 3: key `header`"), "{e}");
    let sc = scenario(
        &d,
        "meta",
        "mem://stages-meta",
        "[message]\ncorrelation_id = \"{key}\"\n",
    );
    let o = msgbench(&d.0, &["run", &sc]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("sends no message ids or properties"), "{e}");
}
