//! `[[groups]]`: several kinds of clients in one run, against real brokers, with a third-party
//! subscriber counting what one group published.

use crate::thirdparty::{paho_counter, peer_python};
use crate::util::*;
use std::io::BufRead;

/// Three groups in one run: MQTT devices on Mosquitto (publish only), an MQTT dashboard on a
/// wildcard (subscribe only), and a NATS backend of its own. The dashboard receives every
/// device message (deliveries cross groups), a paho-mqtt subscriber counts the same messages,
/// and the NATS group's account stands alone.
#[test]
fn groups_mix_protocols_and_cross_between_groups() {
    let mqtt = need!(MQTT);
    let nats = need!(NATS);
    let Some(py) = peer_python("paho.mqtt.client", "python3-paho-mqtt") else {
        return;
    };
    let d = TempDir::new("groups");
    let root = format!("groups{}", std::process::id());
    let (mut sub, mut out) = paho_counter(&py, &mqtt, &format!("{root}/#"), 1600);
    let scenario = d.path("mix.toml");
    std::fs::write(
        &scenario,
        format!(
            r#"name = "groups it"
[phases]
messages = 1600
warmup = "0s"
drain = "10s"
[client]
qos = 1

[[groups]]
name = "devices"
target = "{mqtt}"
topics = {{ count = 4, pattern = "{root}/{{i}}" }}
producers = {{ per_topic = 2, rate = 800 }}
consumers = {{ per_topic = 0 }}

[[groups]]
name = "dashboard"
target = "{mqtt}"
producers = {{ per_topic = 0 }}
consumers = {{ per_topic = 1, subscribe = "{root}/#" }}

[[groups]]
name = "backend"
target = "{nats}"
topics = {{ count = 1, pattern = "{root}.backend" }}
producers = {{ rate = 800 }}
consumers = {{ per_topic = 2 }}
"#
        ),
    )
    .unwrap();
    let r = run_json(&d.0, &["run", scenario.to_str().unwrap(), "-o", "r.jsonl"]);
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let _ = sub.wait();
    assert_eq!(
        line.trim(),
        "1600",
        "paho-mqtt counted the devices' messages"
    );
    let g = r["groups"].as_array().expect("groups in the report");
    let by = |n: &str| g.iter().find(|x| x["name"] == n).unwrap().clone();
    let (dev, dash, back) = (by("devices"), by("dashboard"), by("backend"));
    assert_eq!(u(&dev["result"]["counters"]["sent"]), 1600, "{dev}");
    assert_eq!(u(&dash["result"]["counters"]["received"]), 1600, "{dash}");
    assert_eq!(u(&dash["result"]["e2e"]["count"]), 1600, "{dash}");
    assert!(dev["crosses"] == true && dash["crosses"] == true && back["crosses"] == false);
    // The NATS group: 1600 messages to its own 2 fan-out consumers.
    assert_eq!(u(&back["integrity"]["expected"]), 3200, "{back}");
    assert_eq!(u(&back["integrity"]["lost"]), 0, "{back}");
    // The run: every message of either protocol delivered where expected, nothing foreign.
    let i = &r["integrity"];
    assert_eq!(u(&i["expected"]), 1600 + 3200, "{i}");
    assert_eq!(u(&i["delivered"]), 1600 + 3200, "{i}");
    assert_eq!(u(&i["foreign"]), 0, "{i}");
    assert_eq!(u(&measure(&r)["counters"]["sent"]), 3200);
    // The run's intervals add the groups up tick by tick.
    let rows = r["intervals"].as_array().unwrap();
    let received: u64 = rows.iter().map(|x| u(&x["counters"]["received"])).sum();
    assert_eq!(received, 1600 + 3200);
    assert_valid_and_pure(&d.0, "r.jsonl", &r);
}

/// A group's mistakes are the user's: file, line and column, or the group named.
#[test]
fn group_errors_are_clear() {
    let d = TempDir::new("groups-errors");
    let f = d.path("bad.toml");
    std::fs::write(
        &f,
        "[[groups]]\nname = \"a\"\ntarget = \"mem://\"\n\n[[groups]]\nname = \"b\"\nproducerz = 1\n",
    )
    .unwrap();
    refused(
        &d.0,
        &["run", f.to_str().unwrap()],
        "bad.toml:7:1: unknown field `producerz`",
    );
    std::fs::write(
        &f,
        "[[groups]]\nname = \"a\"\ntarget = \"mem://\"\n[groups.phases]\nduration = \"1s\"\n",
    )
    .unwrap();
    refused(&d.0, &["run", f.to_str().unwrap()], "every group shares");
    std::fs::write(
        &f,
        "[[groups]]\nname = \"a\"\ntarget = \"nope://x\"\n[[groups]]\nname = \"b\"\ntarget = \"mem://\"\n",
    )
    .unwrap();
    refused(&d.0, &["run", f.to_str().unwrap()], "group `a`");
}
