//! NATS JetStream (`nats+js://`) against a real nats-server with JetStream on: PubAcks,
//! pull and push consumers, durable and ephemeral, file and memory storage, streams created
//! (or refused when creation is off), a server without JetStream, and a server killed mid-run.
//!
//! Each test starts its own nats-server (`nats-server` on PATH, as `scripts/brokers.sh up`
//! installs it) with its JetStream store in the test's temporary directory, so streams and
//! their reserved memory never outlive the test.

use crate::util;

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use util::*;

/// A nats-server of the test's own; killed on drop.
struct Js {
    child: Child,
    port: u16,
}

impl Js {
    /// Starts nats-server on a free port, JetStream on (`jetstream`) with its store under `dir`.
    fn start(dir: &Path, jetstream: bool) -> Js {
        Js::start_on(dir, free_port(), jetstream)
    }

    fn start_on(dir: &Path, port: u16, jetstream: bool) -> Js {
        Js::start_conf(dir, port, jetstream, "")
    }

    /// As [`Js::start_on`], with `extra` added to the server's configuration.
    fn start_conf(dir: &Path, port: u16, jetstream: bool, extra: &str) -> Js {
        let conf = dir.join(format!("js-{port}.conf"));
        let mut text = format!("listen: 127.0.0.1:{port}\nmax_payload: 8MB\n{extra}\n");
        if jetstream {
            text += &format!(
                "jetstream {{\n  store_dir: {:?}\n  max_memory_store: 512MB\n  max_file_store: 2GB\n}}\n",
                dir.join("store").display().to_string()
            );
        }
        std::fs::write(&conf, text).unwrap();
        let mut child = Command::new("nats-server")
            .args(["-c", &conf.display().to_string()])
            .args([
                "-l",
                &dir.join(format!("nats-{port}.log")).display().to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server on PATH (scripts/brokers.sh up installs it)");
        if listens_within(port, Duration::from_secs(5)) {
            return Js { child, port };
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("nats-server did not start on port {port}");
    }

    fn url(&self, query: &str) -> String {
        format!("nats+js://127.0.0.1:{}{query}", self.port)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Js {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs `url` on `topic` with `extra` flags and checks the exact counts: every publish
/// confirmed by a PubAck (publish latency recorded), every message delivered `copies` times,
/// none lost, duplicated or redelivered.
fn exact(dir: &Path, url: &str, topic: &str, extra: &[&str], copies: u64) -> serde_json::Value {
    let n: u64 = 20_000;
    let mut args = vec![
        "run",
        url,
        "--topic",
        topic,
        "--messages",
        "20000",
        "--size",
        "64",
        "--warmup",
        "0s",
        "--no-output",
    ];
    args.extend(extra);
    let r = run_json(dir, &args);
    let i = &r["integrity"];
    let c = &measure(&r)["counters"];
    let what = format!("{url} {extra:?}: {i} {c}");
    assert_eq!(u(&i["expected"]), n * copies, "{what}");
    assert_eq!(u(&i["delivered"]), n * copies, "{what}");
    assert_eq!(
        (u(&i["lost"]), u(&i["duplicated"]), u(&i["foreign"])),
        (0, 0, 0),
        "{what}"
    );
    assert_eq!(
        (u(&c["sent"]), u(&c["acked"]), u(&c["nacked"])),
        (n, n, 0),
        "{what}"
    );
    assert_eq!(u(&c["redelivered"]), 0, "{what}");
    let m = measure(&r);
    assert_eq!(
        u(&m["publish"]["count"]),
        n,
        "{what}: publish latency of every PubAck"
    );
    assert!(u(&m["publish"]["p50"]) > 0, "{what}");
    assert_eq!(u(&m["e2e"]["count"]), n * copies, "{what}");
    r
}

/// Pull consumers, ephemeral and durable, on file and memory streams that msgbench creates.
#[test]
fn pubacks_and_pull_consumers() {
    let _ = need!(NATS); // nats-server, installed by the broker script
    let d = TempDir::new("js-pull");
    let js = Js::start(&d.0, true);
    exact(&d.0, &js.url(""), "js.pull.file", &["-p", "2"], 1);
    exact(
        &d.0,
        &js.url("?storage=memory&batch=64"),
        "js.pull.mem",
        &["-c", "2"],
        2,
    );
    exact(
        &d.0,
        &js.url("?durable=pd&storage=file"),
        "js.pull.durable",
        &["-c", "2"],
        2,
    );
    // Competing consumers share one durable consumer named after the queue group.
    exact(
        &d.0,
        &js.url("?batch=100"),
        "js.pull.group",
        &[
            "-c",
            "3",
            "--queue-group",
            "workers",
            "--max-in-flight",
            "64",
        ],
        1,
    );
}

/// Push consumers, ephemeral and durable, fan-out and a queue group.
#[test]
fn push_consumers() {
    let _ = need!(NATS); // nats-server, installed by the broker script
    let d = TempDir::new("js-push");
    let js = Js::start(&d.0, true);
    exact(
        &d.0,
        &js.url("?consumer=push"),
        "js.push.eph",
        &["-c", "2"],
        2,
    );
    exact(
        &d.0,
        &js.url("?consumer=push&durable=pushd&storage=memory"),
        "js.push.durable",
        &["-p", "2"],
        1,
    );
    exact(
        &d.0,
        &js.url("?consumer=push"),
        "js.push.group",
        &["-c", "2", "--queue-group", "pg"],
        1,
    );
}

/// One named stream for several topics: created for the first, extended for the others; a
/// durable consumer keeps the messages published while nobody consumed (backlog) and delivers
/// them to the next run with `deliver=all`.
#[test]
fn named_stream_and_durable_backlog() {
    let _ = need!(NATS); // nats-server, installed by the broker script
    let d = TempDir::new("js-named");
    let js = Js::start(&d.0, true);
    exact(&d.0, &js.url("?stream=SHARED"), "js.a", &[], 1);
    exact(&d.0, &js.url("?stream=SHARED"), "js.b", &[], 1);
    // 5000 messages into the stream, no consumers.
    let r = run_json(
        &d.0,
        &[
            "run",
            &js.url("?stream=BACK"),
            "--topic",
            "js.back",
            "-c",
            "0",
            "--messages",
            "5000",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    assert_eq!(u(&measure(&r)["counters"]["acked"]), 5000);
    // A durable that starts at the stream's first message finds them all (from a previous
    // run: foreign to this one) and acks them; run again, it has nothing left.
    for expect_foreign in [5000, 0] {
        let r = run_json(
            &d.0,
            &[
                "run",
                &js.url("?stream=BACK&durable=later&deliver=all"),
                "--topic",
                "js.back",
                "--messages",
                "100",
                "--warmup",
                "0s",
                "--drain",
                "2s",
                "--no-output",
            ],
        );
        assert_eq!(u(&r["integrity"]["delivered"]), 100, "{}", r["integrity"]);
        assert_eq!(
            u(&r["integrity"]["foreign"]),
            expect_foreign,
            "{}",
            r["integrity"]
        );
    }
}

/// A stream that does not exist with creation off, and a server without JetStream: a clear
/// error and exit code 1 (could not run); a wrong option: exit code 2 (usage).
#[test]
fn missing_stream_and_no_jetstream() {
    let _ = need!(NATS); // nats-server, installed by the broker script
    let d = TempDir::new("js-missing");
    let js = Js::start(&d.0, true);
    let o = msgbench(
        &d.0,
        &[
            "run",
            &js.url("?stream=NOPE&create=0"),
            "--messages",
            "10",
            "--no-output",
            "--quiet",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("JetStream stream `NOPE` does not exist"),
        "{}",
        stderr(&o)
    );
    let plain = Js::start(&d.0, false);
    let o = msgbench(
        &d.0,
        &[
            "run",
            &plain.url(""),
            "--messages",
            "10",
            "--no-output",
            "--quiet",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("JetStream is not enabled"),
        "{}",
        stderr(&o)
    );
    let o = msgbench(
        &d.0,
        &[
            "run",
            &js.url("?consumer=both"),
            "--messages",
            "10",
            "--quiet",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("consumer=both"), "{}", stderr(&o));
    // A durable an earlier run left as a pull consumer, asked for as a push one: the server
    // will not change it, and the error says whose it is and what to do.
    let run = |mode: &str| {
        msgbench(
            &d.0,
            &[
                "run",
                &js.url(&format!("?stream=DUR&durable=kept&consumer={mode}")),
                "--topic",
                "js.dur",
                "--messages",
                "10",
                "--warmup",
                "0s",
                "--no-output",
                "--quiet",
            ],
        )
    };
    let o = run("pull");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run("push");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("durable consumer `kept-0` of stream `DUR` exists with other settings")
            && stderr(&o).contains("nats consumer rm DUR kept-0"),
        "{}",
        stderr(&o)
    );
}

/// An existing stream is used as it is, and a run asking for other settings is told so (it
/// would otherwise measure a file stream while asking for a memory one); a subject another
/// stream captures is refused naming that stream.
#[test]
fn an_existing_streams_other_settings_are_reported() {
    let d = TempDir::new("js-settings");
    let js = Js::start(&d.0, true);
    let run = |query: &str, topic: &str| {
        msgbench(
            &d.0,
            &[
                "run",
                &js.url(query),
                "--topic",
                topic,
                "--messages",
                "200",
                "--warmup",
                "0s",
                "--no-output",
                "--format",
                "json",
                "--quiet",
            ],
        )
    };
    let warned = |o: &std::process::Output| -> Vec<String> {
        let r: Value = serde_json::from_slice(&o.stdout).unwrap();
        r["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["detail"].as_str().unwrap().contains("exists with"))
            .map(|e| e["detail"].as_str().unwrap().to_string())
            .collect()
    };
    let o = run("?storage=file&max_bytes=256MiB", "js.set");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(warned(&o).is_empty(), "created as asked");
    let o = run("?storage=file&max_bytes=256MiB", "js.set");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(warned(&o).is_empty(), "found as asked: {:?}", warned(&o));
    let o = run("?storage=memory&max_bytes=1MiB", "js.set");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let w = warned(&o);
    assert_eq!(w.len(), 1, "once per run, not per client: {w:?}");
    assert!(
        w[0].contains("`MSGBENCH_js_set` exists with storage file, max_bytes 268435456")
            && w[0].contains("asks for storage memory, max_bytes 1048576"),
        "{w:?}"
    );
    // A stream of another name that would capture the same subject.
    let o = run("?stream=OTHER", "js.set");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("subject `js.set` is already captured by stream `MSGBENCH_js_set`")
            && stderr(&o).contains("?stream=MSGBENCH_js_set"),
        "{}",
        stderr(&o)
    );
}

/// The server is killed mid-run and restarted on the same store: the run goes on, producers
/// and consumers reconnect (stream and durable consumer found again), every message is
/// delivered or counted lost, every lost one was reported in doubt or refused, and the report
/// and results file are complete.
#[test]
fn broker_restart_mid_run() {
    let _ = need!(NATS); // nats-server, installed by the broker script
    let d = TempDir::new("js-restart");
    let mut js = Js::start(&d.0, true);
    let port = js.port;
    let url = js.url("?durable=survivor");
    let run = Command::new(bin())
        .args([
            "run",
            &url,
            "--topic",
            "js.restart",
            "--rate",
            "3000",
            "--duration",
            "8s",
            "--warmup",
            "0s",
            "--drain",
            "5s",
            "-o",
            "r.jsonl",
            "--format",
            "json",
            "--quiet",
        ])
        .env("MSGBENCH_RESULTS_DB", d.path("runs.db"))
        .current_dir(&d.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    js.stop();
    std::thread::sleep(Duration::from_secs(1));
    let _js = Js::start_on(&d.0, port, true);
    let o = run.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &measure(&r)["counters"];
    let e = &c["errors"];
    assert!(count_events(&r, "disconnected") >= 2, "{}", r["events"]);
    assert!(count_events(&r, "reconnected") >= 2, "{}", r["events"]);
    let i = &r["integrity"];
    assert_eq!(u(&i["expected"]), u(&i["delivered"]) + u(&i["lost"]), "{i}");
    assert!(
        u(&i["delivered"]) > u(&c["sent"]) / 2,
        "deliveries went on after the restart: {i} {c}"
    );
    let in_doubt = u(&e["timeout"]) + u(&e["send"]) + u(&c["nacked"]);
    assert!(
        u(&i["lost"]) <= in_doubt,
        "every lost message was reported in doubt or refused: {i} {e}\nevents: {}",
        r["events"]
    );
    let file = std::fs::read_to_string(d.path("r.jsonl")).unwrap();
    assert!(file.lines().last().unwrap().contains("\"type\":\"end\""));
}

/// Core NATS: a user the server does not let publish to the subject. nats-server answers each
/// publish with `-ERR 'Permissions Violation for Publish ...'` and keeps the connection: every
/// refusal is counted (as a nack error), the verdict fails, and the refusals are reported in a
/// few lines, not one per message.
#[test]
fn refused_core_publishes_are_counted_not_flooded() {
    let d = TempDir::new("nats-deny-pub");
    let conf = r#"authorization {
  users = [ { user: nopub, password: pw, permissions: { publish: { deny: ["bench", "bench.>"] } } } ]
}"#;
    let s = Js::start_conf(&d.0, free_port(), false, conf);
    let url = format!("nats://nopub:pw@127.0.0.1:{}", s.port);
    let o = msgbench(
        &d.0,
        &[
            "run", &url, "--topic", "bench", "--rate", "500", "-n", "1000", "-c", "1", "--warmup",
            "0s", "--format", "json",
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    let r: Value = serde_json::from_slice(&o.stdout).expect("a JSON report");
    let nacks: u64 = r["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u(&p["counters"]["errors"]["nack"]))
        .sum();
    assert_eq!(nacks, 1000, "{}", r["phases"]);
    let lines = err.matches("Permissions Violation").count();
    assert!((1..=10).contains(&lines), "{lines} lines:\n{err}");
}

/// JetStream: a user the server does not let publish to the stream's subject. Each publish
/// gets an `-ERR` and never a PubAck; each is resolved as refused when its `-ERR` comes
/// (nacked, not left to the ack timeout to be counted in doubt, and not counted twice), so the
/// run ends on time with every message accounted for.
#[test]
fn refused_jetstream_publishes_are_nacked_at_once() {
    let d = TempDir::new("js-deny-pub");
    let conf = r#"authorization {
  users = [ { user: nopub, password: pw, permissions: { publish: { deny: ["bench", "bench.>"] } } } ]
}"#;
    let s = Js::start_conf(&d.0, free_port(), true, conf);
    let url = format!(
        "nats+js://nopub:pw@127.0.0.1:{}?stream=DENIED&storage=memory",
        s.port
    );
    let t0 = std::time::Instant::now();
    let o = msgbench(
        &d.0,
        &[
            "run", &url, "--topic", "bench", "--rate", "500", "-n", "300", "-c", "1", "--warmup",
            "0s", "--drain", "2s", "--format", "json",
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    let r: Value = serde_json::from_slice(&o.stdout).expect("a JSON report");
    let sum =
        |f: &dyn Fn(&Value) -> u64| -> u64 { r["phases"].as_array().unwrap().iter().map(f).sum() };
    let nacked = sum(&|p| u(&p["counters"]["nacked"]));
    let timeouts = sum(&|p| u(&p["counters"]["errors"]["timeout"]));
    let nack_errors = sum(&|p| u(&p["counters"]["errors"]["nack"]));
    assert_eq!(
        (nacked, nack_errors, timeouts),
        (300, 300, 0),
        "{}",
        r["phases"]
    );
}

/// nkey authentication: nats-server knows only a user's public key (the example pair of
/// NATS's own documentation) and checks the signature of its nonce. With the seed file every
/// message arrives (core NATS, and JetStream with its API calls and PubAcks); without it the
/// run stops at connect and says to add `?nkey=` or `?creds=`; a seed with a typo is refused
/// before anything connects.
#[test]
fn nkey_users_sign_the_servers_nonce() {
    let d = TempDir::new("nats-nkey");
    let conf = "authorization {\n  users = [ { nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4 } ]\n}";
    let s = Js::start_conf(&d.0, free_port(), true, conf);
    let seed = d.path("user.nk");
    std::fs::write(
        &seed,
        "SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY\n",
    )
    .unwrap();
    let seed = seed.display().to_string();
    for url in [
        format!("nats://127.0.0.1:{}?nkey={seed}", s.port),
        format!(
            "nats+js://127.0.0.1:{}?stream=NK&storage=memory&nkey={seed}",
            s.port
        ),
    ] {
        let r = run_json(
            &d.0,
            &[
                "run", &url, "--topic", "nk", "--rate", "2000", "-n", "500", "-c", "1", "--warmup",
                "0s",
            ],
        );
        let i = &r["integrity"];
        assert_eq!((u(&i["delivered"]), u(&i["lost"])), (500, 0), "{url}: {i}");
    }
    let bare = format!("nats://127.0.0.1:{}", s.port);
    let o = msgbench(&d.0, &["run", &bare, "-n", "10", "--no-output"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("Authorization Violation") && e.contains("?nkey="),
        "{e}"
    );
    let typo = d.path("typo.nk");
    std::fs::write(
        &typo,
        "SUACSSL4UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY",
    )
    .unwrap();
    let url = format!("nats://127.0.0.1:{}?nkey={}", s.port, typo.display());
    let o = msgbench(&d.0, &["run", &url, "-n", "10", "--no-output"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("nkey=") && e.contains("checksum"), "{e}");
}

/// Decentralized JWT authentication, as NGS and Synadia Cloud use: nats-server in operator
/// mode (the fixtures' operator, its accounts preloaded in a memory resolver) checks the user
/// JWT of a `.creds` file and the nonce signed with its seed. Core NATS and JetStream (the
/// account allows it) take every message; a user of an account the operator never signed,
/// and a client with no credentials, are refused at connect with the server's words.
#[test]
fn creds_files_log_in_to_an_operator_mode_server() {
    let d = TempDir::new("nats-creds");
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nats-operator");
    let conf = std::fs::read_to_string(fixtures.join("operator.conf")).unwrap();
    let s = Js::start_conf(&d.0, free_port(), true, &conf);
    let creds = fixtures.join("user.creds").display().to_string();
    for url in [
        format!("nats://127.0.0.1:{}?creds={creds}", s.port),
        format!(
            "nats+js://127.0.0.1:{}?stream=CREDS&storage=memory&creds={creds}",
            s.port
        ),
    ] {
        let r = run_json(
            &d.0,
            &[
                "run", &url, "--topic", "creds", "--rate", "2000", "-n", "500", "-c", "1",
                "--warmup", "0s",
            ],
        );
        let i = &r["integrity"];
        assert_eq!((u(&i["delivered"]), u(&i["lost"])), (500, 0), "{url}: {i}");
    }
    let stranger = fixtures.join("stranger.creds").display().to_string();
    for url in [
        format!("nats://127.0.0.1:{}?creds={stranger}", s.port),
        format!("nats://127.0.0.1:{}", s.port),
    ] {
        let o = msgbench(&d.0, &["run", &url, "-n", "10", "--no-output"]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{url}: {e}");
        assert!(e.contains("Authorization Violation"), "{url}: {e}");
    }
}

/// A list of servers whose first is down when the run starts: clients try the next one, as
/// NATS clients do, and the run takes every message (core NATS and JetStream).
#[test]
fn a_dead_first_server_is_passed_over_at_start() {
    let d = TempDir::new("nats-first-dead");
    let s = Js::start(&d.0, true);
    let dead = free_port();
    for scheme in ["nats", "nats+js"] {
        let url = format!("{scheme}://127.0.0.1:{dead},127.0.0.1:{}", s.port);
        let r = run_json(
            &d.0,
            &[
                "run", &url, "-n", "200", "--rate", "400", "--warmup", "0s", "-p", "2",
            ],
        );
        let i = &r["integrity"];
        assert_eq!(
            (u(&i["expected"]), u(&i["delivered"])),
            (200, 200),
            "{scheme}: {i}"
        );
    }
}

/// One named stream for eight topics set up at once: every topic ends up in its subjects and
/// every publish is acknowledged. (A stream update replaces the whole subject list: clients
/// adding their topics together had dropped each other's, and up to three publishes in four
/// were refused with 503.)
#[test]
fn many_topics_join_one_stream_at_once() {
    let _ = need!(NATS); // nats-server, installed by the broker script
    let d = TempDir::new("js-topics-at-once");
    let js = Js::start(&d.0, true);
    let r = run_json(
        &d.0,
        &[
            "run",
            &js.url("?stream=MANY"),
            "-c",
            "0",
            "--topics",
            "8",
            "--topic",
            "js.many.{i}",
            "-n",
            "4000",
            "-r",
            "4k",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let c = &measure(&r)["counters"];
    assert_eq!((u(&c["sent"]), u(&c["acked"])), (4000, 4000), "{c}");
}

/// A user who may not use the JetStream API (no publish permission on `$JS.API.>`): nats-server
/// refuses the request with an `-ERR` and sends no reply, so the run stops at once with the
/// server's words and a hint, instead of waiting out a time-out and calling it one.
#[test]
fn a_user_refused_the_jetstream_api_is_told_at_once() {
    let d = TempDir::new("js-api-denied");
    let port = free_port();
    let _js = Js::start_conf(
        &d.0,
        port,
        true,
        "authorization { users: [ { user: noapi, password: pw, permissions: { publish: { deny: [\"$JS.API.>\"] } } } ] }",
    );
    let url = format!("nats+js://noapi:pw@127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let o = msgbench(
        &d.0,
        &[
            "run",
            &url,
            "--topic",
            "it.js.denied",
            "-n",
            "10",
            "--warmup",
            "0s",
            "--no-output",
        ],
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("refused the request") && e.contains("Permissions Violation"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "took {:?}: {e}",
        started.elapsed()
    );
}
