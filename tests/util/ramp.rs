//! The consumer ramp, checked the same way for every driver whose consumers take
//! `--source-addrs`: consumers connect through a [`FaultProxy`] that refuses two of their
//! attempts, at `--connect-rate`, from the addresses given.

use super::faultproxy::FaultProxy;
use super::{TempDir, run_json, u};

/// `url` with its `host:port` replaced by `addr` (user info, path and query kept).
pub fn via(url: &str, addr: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let (auth, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let user = auth
        .rsplit_once('@')
        .map_or(String::new(), |(u, _)| format!("{u}@"));
    format!("{scheme}://{user}{addr}{path}")
}

/// The upstream `host:port` of `url`.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").expect("a URL with a scheme").1;
    let auth = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    auth.rsplit_once('@').map_or(auth, |(_, h)| h).to_string()
}

/// Runs six consumers of `url` through a proxy that holds the first attempt 400 ms and refuses
/// the second and third, ramping at 20/s from 127.0.0.2 and 127.0.0.3, producers publishing
/// straight to `url`; `extra` carries the driver's own flags. Asserts that every message reached every consumer,
/// that the two refusals were counted and retried, that every consumer connection came from
/// the addresses given (both used), and that the ramp took its time.
pub fn consumers_ramp_through_a_refusing_proxy(url: &str, topic: &str, extra: &[&str]) {
    let proxy = FaultProxy::start(&host_port(url));
    proxy.refuse(1..3);
    // The first consumer is still in its handshake when the next two are refused (a broker
    // slow under load): their failures wait for its outcome instead of ending the run.
    proxy.hold_first(std::time::Duration::from_millis(400));
    let d = TempDir::new("ramp");
    let consume_from = via(url, &proxy.addr());
    let mut args = vec![
        "run",
        url,
        "--consume-from",
        &consume_from,
        "--topic",
        topic,
        "-c",
        "6",
        "--connect-rate",
        "20",
        "--source-addrs",
        "127.0.0.2-127.0.0.3",
        "-n",
        "300",
        "--rate",
        "1000",
        "--warmup",
        "0s",
        "--no-output",
    ];
    args.extend_from_slice(extra);
    let r = run_json(&d.0, &args);
    let i = &r["integrity"];
    assert_eq!(u(&i["expected"]), 300 * 6, "{i}");
    assert_eq!(u(&i["delivered"]), 300 * 6, "{i}");
    assert_eq!(u(&i["lost"]), 0, "{i}");
    // Two refused attempts, counted by cause; nothing else failed.
    let failures: u64 = r["phases"].as_array().unwrap()[0]["counters"]["connect_failures"]
        .as_object()
        .map_or(0, |f| f.values().map(u).sum());
    assert_eq!(failures, 2, "{}", r["phases"]);
    let peers: Vec<String> = proxy.peers().iter().map(|p| p.ip().to_string()).collect();
    assert_eq!(
        peers.len(),
        8,
        "6 consumers and 2 refused attempts: {peers:?}"
    );
    assert!(
        peers.iter().all(|p| p == "127.0.0.2" || p == "127.0.0.3"),
        "{peers:?}"
    );
    assert!(peers.iter().any(|p| p == "127.0.0.2") && peers.iter().any(|p| p == "127.0.0.3"));
    // And why they were refused, not only how many were.
    let retried: u64 = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["detail"].as_str())
        .filter_map(|d| d.split_once(" consumer connection attempt(s) failed and were retried: "))
        .map(|(n, _)| n.parse::<u64>().unwrap())
        .sum();
    assert_eq!(retried, 2, "{}", r["events"]);
    // Six consumers at 20 a second: the last starts 250 ms after the first.
    let connected = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "connected")
        .expect("a connected event");
    let took: f64 = connected["detail"]
        .as_str()
        .unwrap()
        .rsplit(" in ")
        .next()
        .unwrap()
        .trim_end_matches('s')
        .parse()
        .unwrap();
    assert!(took >= 0.25, "{connected}");
}
