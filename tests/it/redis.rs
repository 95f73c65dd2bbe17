//! The Redis driver against a real redis-server (Debian's, started by `scripts/brokers.sh`):
//! pub/sub fan-out with every PUBLISH answered, Streams with `XREAD` fan-out and consumer
//! groups, refused commands counted as refused messages, a server killed and restarted mid-run
//! (its own redis-server, so the shared one stays up), and bad input.

use crate::util;

use std::process::{Child, Command, Stdio};
use util::*;

fn code(o: &std::process::Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

#[test]
fn pub_sub_fans_out_and_every_publish_is_answered() {
    let d = TempDir::new("redis-pubsub");
    let r = run_json(
        &d.0,
        &[
            "run",
            &need!(REDIS),
            "--topic",
            "it.redis.pubsub.{i}",
            "--topics",
            "2",
            "-p",
            "2",
            "-c",
            "3",
            "--rate",
            "20k",
            "--messages",
            "40000",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let i = &r["integrity"];
    // 2 topics x 2 producers x 10,000 messages, each to 3 subscribers.
    assert_eq!(u(&i["expected"]), 120_000, "{i}");
    assert_eq!(u(&i["delivered"]), 120_000, "{i}");
    assert_eq!((u(&i["lost"]), u(&i["duplicated"])), (0, 0), "{i}");
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["acked"]), u(&m["counters"]["sent"]), "{m}");
    assert!(
        u(&m["publish"]["count"]) > 0,
        "publish latency recorded: {m}"
    );
    assert!(u(&m["e2e"]["count"]) > 0);
}

#[test]
fn streams_fan_out_and_consumer_groups() {
    let d = TempDir::new("redis-streams");
    let url = format!("{}?mode=streams&maxlen=100000&count=100", need!(REDIS));
    // Fan-out: every reader gets every entry.
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--topic",
            "it.redis.streams.fanout",
            "-p",
            "2",
            "-c",
            "2",
            "--messages",
            "30000",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["expected"]), u(&i["delivered"]), u(&i["lost"])),
        (60_000, 60_000, 0),
        "{i}"
    );
    assert_eq!(u(&measure(&r)["counters"]["nacked"]), 0);
    // A consumer group: each entry to exactly one of 3 members.
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--topic",
            "it.redis.streams.group",
            "-c",
            "3",
            "--queue-group",
            "it-workers",
            "--messages",
            "30000",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let i = &r["integrity"];
    assert_eq!(
        (u(&i["expected"]), u(&i["delivered"]), u(&i["duplicated"])),
        (30_000, 30_000, 0),
        "{i}"
    );
}

#[test]
fn refused_commands_are_counted_as_refused_messages() {
    // A key holding a string cannot take XADD: every message is refused (-WRONGTYPE), each one
    // counted, and the refusal said once as an event.
    let url = need!(REDIS);
    let port = url.rsplit(':').next().unwrap();
    let set = Command::new("redis-cli")
        .args(["-p", port, "SET", "it.redis.wrongtype", "a-string"])
        .output()
        .expect("redis-cli (package redis-tools, installed with redis-server)");
    assert!(set.status.success());
    let d = TempDir::new("redis-refused");
    let o = msgbench(
        &d.0,
        &[
            "run",
            &format!("{url}?mode=streams"),
            "--topic",
            "it.redis.wrongtype",
            "-c",
            "0",
            "--messages",
            "500",
            "--warmup",
            "0s",
            "--no-output",
            "--format",
            "json",
            "--quiet",
        ],
    );
    // Nothing acknowledged: the verdict fails.
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("nothing was confirmed"),
        "{}",
        stderr(&o)
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &measure(&r)["counters"];
    assert_eq!((u(&c["sent"]), u(&c["nacked"])), (500, 500), "{c}");
    let events = r["events"].to_string();
    assert!(events.contains("WRONGTYPE"), "{events}");
}

/// Accepted and refused commands interleaved in one pipeline (two streams, one of them a key
/// holding a string): every reply is matched to its own message, so exactly the messages to
/// the string key are refused, however the replies are grouped into acks.
#[test]
fn interleaved_refusals_are_matched_to_their_messages() {
    let url = need!(REDIS);
    let port = url.rsplit(':').next().unwrap();
    let cli = |args: &[&str]| {
        let o = Command::new("redis-cli")
            .arg("-p")
            .arg(port)
            .args(args)
            .output()
            .expect("redis-cli (package redis-tools, installed with redis-server)");
        assert!(o.status.success());
    };
    cli(&["DEL", "it.redis.mixed.0"]);
    cli(&["SET", "it.redis.mixed.1", "a-string"]);
    let d = TempDir::new("redis-mixed");
    let r = run_json(
        &d.0,
        &[
            "run",
            &format!("{url}?mode=streams&maxlen=1000"),
            "--topic",
            "it.redis.mixed.{i}",
            "--topics",
            "2",
            "-p",
            "1",
            "-c",
            "0",
            "--max-in-flight",
            "64",
            "--messages",
            "4000",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let c = &measure(&r)["counters"];
    assert_eq!(
        (u(&c["sent"]), u(&c["acked"]), u(&c["nacked"])),
        (4000, 2000, 2000),
        "{c}"
    );
}

/// A redis-server of this test's own on `port` (no persistence).
fn own_redis(port: u16) -> Child {
    own_redis_with(port, &[])
}

/// As [`own_redis`], with more of redis-server's arguments.
fn own_redis_with(port: u16, extra: &[&str]) -> Child {
    let mut child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server (scripts/brokers.sh up installs it)");
    if listens_within(port, std::time::Duration::from_secs(5)) {
        return child;
    }
    let _ = child.kill();
    let _ = child.wait();
    let log = extra
        .iter()
        .position(|a| *a == "--logfile")
        .and_then(|i| std::fs::read_to_string(extra.get(i + 1)?).ok())
        .unwrap_or_default();
    panic!("redis-server did not listen on {port}\n{log}");
}

#[test]
fn a_server_killed_mid_run_is_reconnected_and_accounted() {
    let port = free_port();
    let mut server = own_redis(port);
    let d = TempDir::new("redis-restart");
    let url = format!("redis://127.0.0.1:{port}");
    let run = spawn_run(
        &d.0,
        &[
            "run",
            &url,
            "--topic",
            "it.redis.restart",
            "--rate",
            "2000",
            "--warmup",
            "0s",
            "--duration",
            "6s",
            "--drain",
            "2s",
        ],
    );
    std::thread::sleep(std::time::Duration::from_secs(2));
    server.kill().unwrap();
    server.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(800));
    let mut server = own_redis(port);
    let r = finish_json(run);
    server.kill().unwrap();
    let _ = server.wait();
    let i = &r["integrity"];
    // Pub/sub keeps nothing: what was published while the server was down is lost, and every
    // message is accounted for, delivered or lost. The outage shows as lost messages or, when
    // the subscriber was back first and every publish in the gap failed, as failed sends.
    assert_eq!(u(&i["expected"]), u(&i["delivered"]) + u(&i["lost"]), "{i}");
    assert!(u(&i["delivered"]) > 5_000, "{i}");
    let errors = &r["result"]["counters"]["errors"];
    let failed = u(&errors["send"]) + u(&errors["connect"]);
    assert!(u(&i["lost"]) + failed > 0, "{i} {errors}");
    assert!(count_events(&r, "disconnected") >= 2, "{}", r["events"]);
    assert!(count_events(&r, "reconnected") >= 2, "{}", r["events"]);
    let m = measure(&r);
    assert!(u(&m["counters"]["sent"]) > 10_000, "{m}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let d = TempDir::new("redis-bad");
    let o = msgbench(
        &d.0,
        &[
            "run",
            &format!("redis://127.0.0.1:{}", free_port()),
            "-n",
            "10",
            "-q",
            "--no-output",
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("Connection refused"), "{}", stderr(&o));
    let o = msgbench(
        &d.0,
        &[
            "run",
            "redis://127.0.0.1:1?mode=kafka",
            "-n",
            "10",
            "-q",
            "--no-output",
        ],
    );
    assert_ne!(code(&o), 0);
    assert!(stderr(&o).contains("mode `kafka`"), "{}", stderr(&o));
    // Not a Redis server at all (an HTTP server): said, not hung.
    let http = Server::http();
    let url = http.url.replace("http://", "redis://");
    let o = msgbench(&d.0, &["run", &url, "-n", "10", "-q", "--no-output"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
}

/// TLS (`rediss://`) on the server's TLS port: verified with the test CA, a client certificate
/// offered, pub/sub exact; without the CA the certificate is refused with a clear error.
#[test]
fn tls_port_is_exact_and_verified() {
    let url = need!("MSGBENCH_IT_REDIS_TLS_URL");
    let ca = need!("MSGBENCH_IT_CA");
    let dir = std::path::Path::new(&ca).parent().unwrap();
    let (cert, key) = (
        dir.join("client.pem").display().to_string(),
        dir.join("client.key").display().to_string(),
    );
    let d = TempDir::new("redis-tls");
    for mode in ["", "?mode=streams"] {
        let target = format!("{url}{mode}");
        let r = run_json(
            &d.0,
            &[
                "run",
                &target,
                "--ca-file",
                &ca,
                "--cert",
                &cert,
                "--key",
                &key,
                "--topic",
                "it.redis.tls",
                "-c",
                "2",
                "-n",
                "5000",
                "--rate",
                "10k",
                "--warmup",
                "0s",
                "--no-output",
            ],
        );
        let i = &r["integrity"];
        assert_eq!(
            (u(&i["delivered"]), u(&i["lost"])),
            (10_000, 0),
            "{mode}: {i}"
        );
    }
    let o = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "--topic",
            "it.redis.tls",
            "-n",
            "10",
            "--no-output",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).to_lowercase().contains("certificate"),
        "{}",
        stderr(&o)
    );
}

/// Consumers at connection scale: they ramp at `--connect-rate` from the `--source-addrs`
/// given, and two refused connections are counted and retried, not the end of the run.
#[test]
fn consumers_ramp_from_source_addresses_and_retry_refused_connections() {
    util::ramp::consumers_ramp_through_a_refusing_proxy(&need!(REDIS), "it.ramp.redis", &[]);
}

/// A Redis Cluster of the test's own (3 masters joined by `redis-cli --cluster create`): of
/// the topics t0..t3 the first node holds t2 and t3, and answers `MOVED` for t0 and t1. The
/// run stops at once with what to change, instead of retrying consumers for half a minute and
/// then passing with the redirected topics left out of the account.
#[test]
fn a_cluster_redirect_is_a_clear_error() {
    let d = TempDir::new("redis-cluster");
    // Each node's cluster bus gets a free port of its own: the default (port + 10000) may
    // fall on a port in use, and then the node never starts.
    let mut taken = Vec::new();
    let mut distinct = || loop {
        let p = free_port();
        if !taken.contains(&p) {
            taken.push(p);
            return p;
        }
    };
    let ports = [distinct(), distinct(), distinct()];
    let buses = [distinct(), distinct(), distinct()];
    let _nodes: Vec<Killed> = ports
        .iter()
        .zip(buses)
        .map(|(p, bus)| {
            let dir = d.0.join(p.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            Killed(own_redis_with(
                *p,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus.to_string(),
                    "--cluster-config-file",
                    "nodes.conf",
                    "--dir",
                    &dir.display().to_string(),
                    "--logfile",
                    &dir.join("redis.log").display().to_string(),
                ],
            ))
        })
        .collect();
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let made = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli (package redis-tools, installed with redis-server)");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stdout)
    );
    for _ in 0..100 {
        let info = Command::new("redis-cli")
            .args(["-p", &ports[0].to_string(), "cluster", "info"])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let url = format!("redis://127.0.0.1:{}?mode=streams", ports[0]);
    let t0 = std::time::Instant::now();
    let o = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "--topics",
            "4",
            "--topic",
            "t{i}",
            "--rate",
            "300",
            "--duration",
            "2s",
            "-c",
            "1",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("Redis Cluster") && err.contains("MOVED"),
        "{err}"
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(15),
        "took {:?}",
        t0.elapsed()
    );
}

/// A server that closes idle clients (`timeout 1`) closes the producer between two sends of a
/// slow rate: the producer sees it while it waits and reconnects before the next send, so no
/// message is written into the closed connection (every other one had been in doubt and lost).
/// Sends 4 s apart: Redis closes a client idle for more than its timeout in whole seconds, at
/// its next check, so a 2 s gap left it a window a loaded machine could miss.
#[test]
fn a_producer_closed_while_idle_reconnects_before_its_next_send() {
    let port = free_port();
    let mut server = own_redis_with(port, &["--timeout", "1"]);
    let d = TempDir::new("redis-idle-timeout");
    let url = format!("redis://127.0.0.1:{port}");
    let r = run_json(
        &d.0,
        &[
            "run",
            &url,
            "--topic",
            "it.redis.idle",
            "--rate",
            "0.25",
            "--warmup",
            "0s",
            "--duration",
            "9s",
            "--drain",
            "2s",
            "--no-output",
        ],
    );
    server.kill().unwrap();
    let _ = server.wait();
    let m = measure(&r);
    let sent = u(&m["counters"]["sent"]);
    assert!(sent >= 3, "{m}");
    assert_eq!(u(&m["counters"]["acked"]), sent, "{m}");
    assert_eq!(
        u(&m["counters"]["errors"]["timeout"]),
        0,
        "none in doubt: {m}"
    );
    let i = &r["integrity"];
    assert_eq!((u(&i["delivered"]), u(&i["lost"])), (sent, 0), "{i}");
    assert!(
        count_events(&r, "disconnected") >= 1,
        "the server did close it: {}",
        r["events"]
    );
}

/// Consumer-group reads as users whom the server's ACL refuses a command: without `+xack` the
/// messages still arrive and the refused XACK is said (the entries stay pending); without
/// `+xreadgroup` the consumer stops at its first refusal with the server's words, instead of
/// being refused again a hundred times a second all run.
#[test]
fn a_group_consumer_refused_by_the_acl_says_so() {
    let port = free_port();
    let mut server = own_redis_with(
        port,
        &[
            "--user",
            "noack",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-xack",
            "--user",
            "noread",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-xreadgroup",
        ],
    );
    let d = TempDir::new("redis-acl");
    let url = format!("redis://127.0.0.1:{port}?mode=streams");
    let run = |user: &str| {
        let consume = format!("redis://{user}:pw@127.0.0.1:{port}?mode=streams");
        msgbench(
            &d.0,
            &[
                "run",
                &url,
                "--consume-from",
                &consume,
                "--topic",
                "it.redis.acl",
                "--queue-group",
                "g",
                "-n",
                "300",
                "-r",
                "1000",
                "--warmup",
                "0s",
                "--drain",
                "2s",
                "--no-output",
                "--format",
                "json",
                "-q",
            ],
        )
    };
    let o = run("noack");
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    let i = &r["integrity"];
    assert_eq!(u(&i["delivered"]), 300, "{}\n{i}", stderr(&o));
    assert!(
        r["events"].to_string().contains("refused XACK"),
        "{}",
        r["events"]
    );

    let o = run("noread");
    server.kill().unwrap();
    let _ = server.wait();
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    let events = r["events"].to_string();
    assert!(
        events.contains("refuses this user's reads") && events.contains("NOPERM"),
        "{events}"
    );
    // Stopped at the first refusal, not retried all run.
    let errors = u(&measure(&r)["counters"]["errors"]["connect"]);
    assert!(errors <= 2, "{errors} errors: {}", stderr(&o));
    assert_eq!(
        o.status.code(),
        Some(3),
        "nothing delivered: {}",
        stderr(&o)
    );
}

/// Slow group consumers cut off mid-run (`CLIENT KILL`, while each is half-way through a
/// batch) acknowledge on their new connection what they had taken on the old one: nothing
/// stays pending in the group (each cut had left a batch pending for good).
#[test]
fn a_group_consumer_cut_off_leaves_nothing_pending() {
    let port = free_port();
    let mut server = own_redis(port);
    let d = TempDir::new("redis-pending");
    let url = format!("redis://127.0.0.1:{port}?mode=streams");
    let run = spawn_run(
        &d.0,
        &[
            "run",
            &url,
            "--topic",
            "it.redis.pending",
            "--queue-group",
            "g",
            "-c",
            "2",
            "-r",
            "2000",
            "--processing",
            "1ms",
            "--warmup",
            "0s",
            "--duration",
            "5s",
            "--drain",
            "10s",
        ],
    );
    let cli = |args: &[&str]| {
        let o = Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli (package redis-tools, installed with redis-server)");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for _ in 0..2 {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let killed = cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
        assert_ne!(killed.trim(), "0", "{killed}");
    }
    let r = finish_json(run);
    let pending = cli(&["XPENDING", "it.redis.pending", "g"]);
    server.kill().unwrap();
    let _ = server.wait();
    assert!(count_events(&r, "reconnected") >= 2, "{}", r["events"]);
    assert!(
        u(&r["integrity"]["delivered"]) > 2_000,
        "{}",
        r["integrity"]
    );
    assert_eq!(
        pending.lines().next(),
        Some("0"),
        "entries left pending:\n{pending}"
    );
    // The stream keeps everything: only a publish whose reply the cut took may be missing
    // (in doubt); a read whose reply the cut took is read again from the group's history.
    let doubt: u64 = r["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u(&p["counters"]["errors"]["timeout"]))
        .sum();
    let lost = u(&r["integrity"]["lost"]);
    assert!(
        lost <= doubt,
        "lost {lost} > in doubt {doubt}: {}",
        r["integrity"]
    );
}

/// A connection workload in streams mode writes what its producers would, `XADD`: the stream
/// holds one entry per message the storm's connections sent (it used to `PUBLISH` them, to no
/// one, whatever the URL asked for).
#[test]
fn a_storm_in_streams_mode_adds_to_the_stream() {
    let url = need!(REDIS);
    let port = url.rsplit(':').next().unwrap().to_string();
    let cli = |args: &[&str]| {
        let o = Command::new("redis-cli")
            .args(["-p", &port])
            .args(args)
            .output()
            .expect("redis-cli (package redis-tools, installed with redis-server)");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    cli(&["DEL", "it.redis.storm"]);
    let d = TempDir::new("redis-storm-streams");
    let r = run_json(
        &d.0,
        &[
            "run",
            &format!("{url}?mode=streams"),
            "--storm",
            "--concurrency",
            "2",
            "--duration",
            "1s",
            "--messages-per-connection",
            "1",
            "--topic",
            "it.redis.storm",
            "--no-output",
        ],
    );
    let sent = u(&measure(&r)["counters"]["sent"]);
    assert!(sent > 5, "{}", measure(&r));
    let len: u64 = cli(&["XLEN", "it.redis.storm"]).parse().unwrap_or(0);
    assert!(len > 5, "XLEN {len} after {sent} sent");
    assert_eq!(cli(&["TYPE", "it.redis.storm"]), "stream");
    cli(&["DEL", "it.redis.storm"]);
}
