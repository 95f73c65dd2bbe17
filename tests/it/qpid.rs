//! Apache Qpid Broker-J (`scripts/brokers.sh`: AMQP 0-9-1 and AMQP 1.0 on one port), a broker
//! that is stricter than RabbitMQ where clients are concerned: its password provider offers no
//! PLAIN login without TLS (only SCRAM and CRAM-MD5), it answers an unroutable mandatory
//! publish on a confirm channel with a nack and then its return (RabbitMQ: the return, then an
//! ack), and it keeps several virtual hosts, which an AMQP 1.0 connection opens by hostname.

use crate::util;

use util::*;

/// Broker-J's port, as an AMQP 0-9-1 URL.
const QPID_AMQP: &str = "MSGBENCH_IT_QPID_AMQP_URL";
/// The same port, as an AMQP 1.0 URL.
const QPID_AMQP10: &str = "MSGBENCH_IT_QPID_AMQP10_URL";

fn run_args<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["run", url, "--warmup", "0s", "--no-output"];
    v.extend_from_slice(extra);
    v
}

/// Both protocols log in by SCRAM-SHA-256 (the broker offers no PLAIN here), every message
/// arrives and is acknowledged; a wrong password is refused by name of the mechanism, without
/// printing the password.
#[test]
fn both_protocols_log_in_by_scram_where_plain_is_hidden() {
    let d = TempDir::new("qpid-scram");
    for (var, extra) in [(QPID_AMQP, &["--confirm"][..]), (QPID_AMQP10, &[][..])] {
        let url = need!(var);
        let mut args = run_args(&url, &["-n", "2000", "-r", "4000", "--topic", "it.scram"]);
        args.extend_from_slice(extra);
        let r = run_json(&d.0, &args);
        let (m, i) = (measure(&r), &r["integrity"]);
        assert_eq!(u(&m["counters"]["sent"]), 2000, "{var}: {m}");
        assert_eq!(u(&m["counters"]["acked"]), 2000, "{var}: {m}");
        assert_eq!((u(&i["delivered"]), u(&i["lost"])), (2000, 0), "{var}: {i}");

        let bad = url.replace(":msgbench-secret@", ":not-the-password@");
        assert_ne!(bad, url);
        let o = msgbench(&d.0, &run_args(&bad, &["-n", "10", "--topic", "it.scram"]));
        assert_eq!(o.status.code(), Some(1), "{var}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("SCRAM-SHA-256"), "{var}: {e}");
        assert!(
            !e.contains("not-the-password"),
            "{var}: the password is printed: {e}"
        );
    }
}

/// An unroutable mandatory publish with confirms is nacked, then returned: the nack is the
/// returned message's confirm, so it counts once, as returned, not also as a refusal (the
/// first message had counted as refused, and each later nack was matched to the return
/// before it).
#[test]
fn a_nack_then_return_counts_once_as_returned() {
    let d = TempDir::new("qpid-returned");
    let url = need!(QPID_AMQP);
    let args = run_args(
        &url,
        &[
            "--exchange",
            "it.unrouted",
            "--mandatory",
            "--confirm",
            "-c",
            "0",
            "-n",
            "1000",
            "--topic",
            "it.nowhere",
        ],
    );
    let r = run_json(&d.0, &args);
    let m = measure(&r);
    assert_eq!(u(&m["counters"]["returned"]), 1000, "{m}");
    assert_eq!(u(&m["counters"]["acked"]), 1000, "{m}");
    assert_eq!(u(&m["counters"]["nacked"]), 0, "{m}");
    // Why they came back, in the broker's words, once.
    let events = r["events"].to_string();
    assert_eq!(
        events.matches("returned a mandatory publish: 312").count(),
        1,
        "{events}"
    );
}

/// The path of an `amqp10://` URL names the virtual host to open (Broker-J keeps several; it
/// had been dropped in silence, so a run measured the default one): `other` is there and
/// creates no queue on demand, a host that does not exist is refused by name.
#[test]
fn the_amqp10_path_opens_that_virtual_host() {
    let d = TempDir::new("qpid-vhost");
    let url = need!(QPID_AMQP10);
    let other = format!("{url}/other");
    // Fan-out through an exchange that every virtual host has.
    let r = run_json(
        &d.0,
        &run_args(
            &other,
            &["--address", "{topic}", "--topic", "amq.fanout", "-n", "300"],
        ),
    );
    assert_eq!(u(&r["integrity"]["delivered"]), 300, "{}", r["integrity"]);
    // `other` creates no queue for an unknown address, as the default one does.
    let o = msgbench(
        &d.0,
        &run_args(&other, &["--topic", "it.vhost", "-n", "10"]),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("Could not find destination"),
        "{}",
        stderr(&o)
    );
    let o = msgbench(
        &d.0,
        &run_args(&format!("{url}?hostname=nosuch"), &["-n", "10"]),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("Unknown hostname in connection open: 'nosuch'"),
        "{}",
        stderr(&o)
    );
}
