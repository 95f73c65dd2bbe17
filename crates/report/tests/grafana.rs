//! The example Grafana dashboard (`deploy/grafana/msgbench-dashboard.json`) is valid dashboard
//! JSON whose every query reads metrics msgbench exports, and it shows every metric family.

use msgbench_report::prometheus::FAMILIES;
use std::collections::BTreeSet;

const DASHBOARD: &str = include_str!("../../../deploy/grafana/msgbench-dashboard.json");

/// The `msgbench_*` identifiers in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|t| t.starts_with("msgbench_"))
        .map(str::to_string)
        .collect()
}

/// The family a sample name belongs to (`_sum` and `_count` of summaries).
fn family(name: &str) -> Option<&'static str> {
    FAMILIES
        .iter()
        .map(|f| f.0)
        .find(|f| *f == name)
        .or_else(|| {
            ["_sum", "_count"].iter().find_map(|suffix| {
                let base = name.strip_suffix(suffix)?;
                FAMILIES
                    .iter()
                    .find(|f| f.0 == base && f.1 == "summary")
                    .map(|f| f.0)
            })
        })
}

#[test]
fn dashboard_is_valid_and_queries_only_exported_metrics() {
    let d: serde_json::Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    assert_eq!(d["uid"], "msgbench-live");
    assert!(d["title"].is_string());
    assert!(d["schemaVersion"].as_u64().unwrap() >= 30);
    let panels = d["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut used = BTreeSet::new();
    let mut exprs = 0;
    for p in panels {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "duplicate panel id");
        let g = &p["gridPos"];
        assert!(g["w"].as_u64().unwrap() <= 24 && g["h"].as_u64().unwrap() > 0);
        if p["type"] == "row" {
            continue;
        }
        assert!(
            ["timeseries", "stat"].contains(&p["type"].as_str().unwrap()),
            "{}",
            p["type"]
        );
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {} has no query", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            assert_eq!(t["datasource"]["uid"], "${datasource}");
            let names = metric_names(expr);
            assert!(!names.is_empty(), "{expr} reads no msgbench metric");
            for n in names {
                let f = family(&n).unwrap_or_else(|| panic!("{expr}: {n} is not exported"));
                used.insert(f);
            }
            assert!(
                expr.contains("run=~\"$run\"") && expr.contains("target=~\"$target\""),
                "{expr} ignores the run/target variables"
            );
            exprs += 1;
        }
    }
    assert!(exprs >= 20, "{exprs}");
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            let q = v["query"]["query"].as_str().unwrap();
            for n in metric_names(q) {
                let f = family(&n).unwrap_or_else(|| panic!("{q}: {n} is not exported"));
                used.insert(f);
            }
        }
    }
    let unused: Vec<&str> = FAMILIES
        .iter()
        .map(|f| f.0)
        .filter(|f| !used.contains(f))
        .collect();
    assert!(unused.is_empty(), "the dashboard does not show {unused:?}");
}

#[test]
fn expressions_are_parsed_into_metric_names() {
    assert_eq!(
        metric_names("rate(msgbench_e2e_latency_seconds_sum{run=~\"$run\"}[1m])"),
        ["msgbench_e2e_latency_seconds_sum"]
    );
    assert_eq!(
        family("msgbench_e2e_latency_seconds_sum"),
        Some("msgbench_e2e_latency_seconds")
    );
    assert_eq!(family("msgbench_messages_sent_total_sum"), None);
    assert_eq!(family("msgbench_nonexistent"), None);
}
