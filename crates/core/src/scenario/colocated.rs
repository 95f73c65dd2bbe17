//! The generator's share of a machine it shares with the system under test.
//!
//! When the broker runs on the same machine (a loopback target), every thread msgbench adds
//! competes with the broker for the same cores: a work-stealing pool of one thread per CPU then
//! wakes threads on the broker's cores and moves tasks between them, which costs the generator
//! CPU and the broker throughput. Measured on a 2-CPU machine against Mosquitto, one thread
//! instead of the pool of two cost 20–35% less CPU per message with subscribers and carried
//! more messages; NATS 1 → 1 ran as fast either way, RabbitMQ 1 → 1 with confirms about 10%
//! slower. So without an explicit `workers` setting, a run against a broker on this machine keeps
//! to half the CPUs (thread per core); anything else keeps the
//! work-stealing pool.

use std::net::IpAddr;

/// Worker threads for a run whose `workers` setting was left out: half of `cpus` (at least one)
/// when every broker the run talks to is on this machine, else 0 (the work-stealing pool).
/// In-process targets (`mem://`) have no broker to leave room for, and neither has ZeroMQ, where
/// msgbench is usually both ends (halving its threads halved PUB/SUB throughput).
pub fn default_workers(targets: &[&str], cpus: usize) -> usize {
    let local = targets
        .iter()
        .all(|t| !t.starts_with("mem://") && !t.starts_with("zmq://") && all_hosts_loopback(t));
    if local { (cpus / 2).max(1) } else { 0 }
}

/// Whether a URL (`scheme://[user[:pass]@]host[:port][,[scheme://]host[:port]...][/...]`) names
/// at least one host and only loopback ones.
fn all_hosts_loopback(url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    // Server lists may repeat the scheme (`nats://a:4222,nats://b:4222`).
    let rest = rest.replace(&format!(",{scheme}://"), ",");
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hosts = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    hosts.split(',').all(|hp| {
        let host = match hp.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => hp.split(':').next().unwrap_or(""),
        };
        host.eq_ignore_ascii_case("localhost")
            || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_on_this_machine_gets_half_the_cpus() {
        for url in [
            "nats://127.0.0.1:4222",
            "mqtt://u:p@localhost,127.0.0.2:1884/x",
            "amqp://guest:guest@[::1]:5672/%2f",
            "ws://127.0.0.1:8080/echo?x=1",
            "nats://127.0.0.1:4222,nats://127.0.0.1:4223",
        ] {
            assert_eq!(default_workers(&[url], 2), 1, "{url}");
            assert_eq!(default_workers(&[url], 8), 4, "{url}");
            assert_eq!(default_workers(&[url], 1), 1, "{url}");
        }
    }

    #[test]
    fn anything_else_keeps_the_work_stealing_pool() {
        for targets in [
            &["mem://"][..],
            &["zmq://127.0.0.1:5555"],
            &["nats://10.0.0.5:4222"],
            &["mqtt://127.0.0.1,broker.example:1883"],
            &["nats://127.0.0.1:4222,nats://10.0.0.2:4222"],
            &["amqp://127.0.0.1", "mqtt://10.1.1.1"],
            &["mqtt://"],
        ] {
            assert_eq!(default_workers(targets, 8), 0, "{targets:?}");
        }
        assert_eq!(
            default_workers(&["amqp://127.0.0.1", "mqtt://[::1]:1"], 4),
            2
        );
    }
}
