//! The Prometheus rendering of the fixture run's records: every line is well-formed text
//! exposition format 0.0.4, every sample belongs to a declared family, and the values are the
//! counts and percentiles of the records.

use msgbench_report::prometheus::{Exporter, FAMILIES, escape_label};
use msgbench_report::{Record, read_records};
use std::collections::BTreeMap;

fn records() -> Vec<Record> {
    let f = std::fs::File::open("tests/fixtures/run.jsonl").unwrap();
    read_records(std::io::BufReader::new(f)).unwrap()
}

/// One parsed sample: metric name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses the exposition text strictly; panics on any malformed line.
fn parse(text: &str) -> (Vec<Sample>, BTreeMap<String, String>) {
    assert!(text.ends_with('\n'), "the text ends with a line feed");
    let mut samples = Vec::new();
    let mut types = BTreeMap::new();
    let mut seen_families: Vec<String> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut it = rest.splitn(3, ' ');
            let (kw, name, tail) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
            assert!(is_name(name), "bad name in {line:?}");
            match kw {
                "HELP" => assert!(!tail.is_empty()),
                "TYPE" => {
                    assert!(
                        ["counter", "gauge", "summary"].contains(&tail),
                        "type {tail}"
                    );
                    assert!(
                        types.insert(name.to_string(), tail.to_string()).is_none(),
                        "family {name} declared twice"
                    );
                }
                _ => panic!("unknown comment {line:?}"),
            }
            continue;
        }
        let (name_labels, value) = line.rsplit_once(' ').expect("name and value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let (name, labels) = match name_labels.split_once('{') {
            Some((n, l)) => (n, l.strip_suffix('}').expect("closing brace")),
            None => (name_labels, ""),
        };
        assert!(is_name(name), "bad metric name in {line:?}");
        let mut map = BTreeMap::new();
        let mut rest = labels;
        while !rest.is_empty() {
            let (k, v) = rest.split_once("=\"").expect("label=\"value\"");
            assert!(is_name(k), "bad label name {k:?}");
            // The value ends at the first unescaped quote.
            let mut end = None;
            let mut esc = false;
            for (i, c) in v.char_indices() {
                match (esc, c) {
                    (true, _) => esc = false,
                    (false, '\\') => esc = true,
                    (false, '"') => {
                        end = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let end = end.expect("closing quote");
            assert!(map.insert(k.to_string(), v[..end].to_string()).is_none());
            rest = v[end + 1..].strip_prefix(',').unwrap_or(&v[end + 1..]);
        }
        let family = ["_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|t| t == "summary"))
            })
            .unwrap_or(name);
        assert!(
            types.contains_key(family),
            "{name} has no TYPE line before it"
        );
        // Families are contiguous.
        if seen_families.last().map(String::as_str) != Some(family) {
            assert!(
                !seen_families.iter().any(|f| f == family),
                "{family} is split"
            );
            seen_families.push(family.to_string());
        }
        samples.push(Sample {
            name: name.to_string(),
            labels: map,
            value,
        });
    }
    (samples, types)
}

fn get<'a>(samples: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Option<&'a Sample> {
    samples.iter().find(|s| {
        s.name == name
            && labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
    })
}

#[test]
fn exposition_is_well_formed_and_matches_the_records() {
    let records = records();
    let mut e = Exporter::new();
    for r in &records {
        e.add(r);
    }
    let text = e.render();
    let (samples, types) = parse(&text);
    for s in &samples {
        assert_eq!(s.labels["run"], "msgbench");
        assert_eq!(s.labels["target"], "mem://fixture");
    }
    for (name, kind) in &types {
        let declared = FAMILIES.iter().find(|f| f.0 == name).unwrap();
        assert_eq!(declared.1, kind);
    }
    let m = [("phase", "measure")];
    // Interval sums of the measure phase: 5001 + 5000 sent, 10002 + 10000 received.
    assert_eq!(
        get(&samples, "msgbench_messages_sent_total", &m)
            .unwrap()
            .value,
        10001.0
    );
    assert_eq!(
        get(&samples, "msgbench_messages_received_total", &m)
            .unwrap()
            .value,
        20002.0
    );
    assert_eq!(
        get(
            &samples,
            "msgbench_messages_sent_total",
            &[("phase", "warmup")]
        )
        .unwrap()
        .value,
        4999.0
    );
    assert_eq!(
        get(
            &samples,
            "msgbench_errors_total",
            &[("phase", "measure"), ("kind", "timeout")]
        )
        .unwrap()
        .value,
        0.0
    );
    // Cumulative e2e summary of the measure phase agrees with the histograms of its intervals.
    let mut h = msgbench_metrics::new_histogram();
    let mut last = None;
    for r in &records {
        if let Record::Interval(i) = r {
            if i.phase == msgbench_metrics::Phase::Measure {
                h.add(&i.histograms.e2e).unwrap();
            }
            last = Some(i.clone());
        }
    }
    let q99 = get(
        &samples,
        "msgbench_e2e_latency_seconds",
        &[("phase", "measure"), ("quantile", "0.99")],
    )
    .unwrap();
    assert_eq!(q99.value, h.value_at_quantile(0.99) as f64 / 1e9);
    let count = get(&samples, "msgbench_e2e_latency_seconds_count", &m).unwrap();
    assert_eq!(count.value, h.len() as f64);
    let sum = get(&samples, "msgbench_e2e_latency_seconds_sum", &m).unwrap();
    assert!((sum.value - h.mean() * h.len() as f64 / 1e9).abs() < 1e-9);
    for q in ["0.5", "0.9", "0.99", "0.999"] {
        assert!(
            get(
                &samples,
                "msgbench_e2e_latency_seconds",
                &[("phase", "measure"), ("quantile", q)]
            )
            .is_some()
        );
    }
    // The last interval is the drain's: no latency there, so no last-interval summary; its
    // rates are the gauges.
    let last = last.unwrap();
    assert_eq!(last.phase, msgbench_metrics::Phase::Drain);
    assert!(get(&samples, "msgbench_e2e_latency_last_interval_seconds", &[]).is_none());
    assert_eq!(
        get(&samples, "msgbench_sent_per_second", &[])
            .unwrap()
            .value,
        0.0
    );
    let cpu = get(&samples, "msgbench_generator_cpu_ratio", &[])
        .unwrap()
        .value;
    assert!((cpu - last.cpu_s / last.duration_s()).abs() < 1e-9);
    assert_eq!(
        get(&samples, "msgbench_phase_info", &[("phase", "drain")])
            .unwrap()
            .value,
        1.0
    );
    // After the end record: finished, the final loss and completeness.
    assert_eq!(
        get(&samples, "msgbench_run_finished", &[]).unwrap().value,
        1.0
    );
    assert_eq!(
        get(&samples, "msgbench_messages_lost", &[]).unwrap().value,
        0.0
    );
    assert_eq!(
        get(&samples, "msgbench_delivery_completeness_ratio", &[])
            .unwrap()
            .value,
        1.0
    );
    // No acks in this run: no in-flight gauge; not a connection workload.
    assert!(get(&samples, "msgbench_in_flight_messages", &[]).is_none());
    assert!(get(&samples, "msgbench_connections_held", &[]).is_none());
}

#[test]
fn last_interval_summary_and_live_loss() {
    let records = records();
    let mut e = Exporter::new();
    // Stop after the first measure interval: the run is live.
    let mut iv = None;
    for r in &records {
        e.add(r);
        if let Record::Interval(i) = r
            && i.phase == msgbench_metrics::Phase::Measure
        {
            iv = Some(i.clone());
            break;
        }
    }
    let mut iv = iv.unwrap();
    // A gap opened in the next interval: a fan-out run shows it as lost so far.
    iv.index += 1;
    iv.counters.gaps_opened = 3;
    iv.counters.gaps_filled = 1;
    iv.counters.acked = iv.counters.sent - 7;
    e.add(&Record::Interval(iv.clone()));
    let (samples, _) = parse(&e.render());
    let l = [("phase", "measure"), ("quantile", "0.5")];
    let p50 = get(&samples, "msgbench_e2e_latency_last_interval_seconds", &l).unwrap();
    assert_eq!(
        p50.value,
        iv.histograms.e2e.value_at_quantile(0.5) as f64 / 1e9
    );
    let n = get(
        &samples,
        "msgbench_e2e_latency_last_interval_seconds_count",
        &[],
    )
    .unwrap();
    assert_eq!(n.value, iv.histograms.e2e.len() as f64);
    assert_eq!(
        get(&samples, "msgbench_messages_lost", &[]).unwrap().value,
        2.0
    );
    assert_eq!(
        get(&samples, "msgbench_run_finished", &[]).unwrap().value,
        0.0
    );
    assert!(get(&samples, "msgbench_delivery_completeness_ratio", &[]).is_none());
    // Acks seen: the in-flight gauge is what was sent and not confirmed.
    // Sent so far: 4999 (warm-up) + 5001 + 5001; acked: 5001 - 7.
    assert_eq!(
        get(&samples, "msgbench_in_flight_messages", &[])
            .unwrap()
            .value,
        10_007.0
    );
    let sent_rate = get(&samples, "msgbench_sent_per_second", &[])
        .unwrap()
        .value;
    assert!((sent_rate - iv.counters.sent as f64 / iv.duration_s()).abs() < 1e-6);
}

#[test]
fn label_values_are_escaped() {
    assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    let mut records = records();
    if let Record::Begin(b) = &mut records[0] {
        b.plan["name"] = serde_json::json!("say \"hi\"\\\n");
    }
    let mut e = Exporter::new();
    for r in &records {
        e.add(r);
    }
    let (samples, _) = parse(&e.render());
    assert_eq!(samples[0].labels["run"], "say \\\"hi\\\"\\\\\\n");
}
