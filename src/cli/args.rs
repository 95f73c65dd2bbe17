//! Command-line syntax only: clap structs with no logic. `cli::plan` turns them into a plan.

// The doc comments in this file are the `--help` text clap prints, written for a terminal:
// `[send]`, `<stream>` and `[default: ...]` in them are not rustdoc links or HTML tags.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

const ABOUT: &str = "A fast, honest load generator and benchmark for messaging systems.";

/// msgbench: how many messages per second does it take, at what latency, and does it lose any?
#[derive(Debug, Parser)]
#[command(name = "msgbench", version, about = ABOUT, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Parses the command line. Every `run` option can also come from the environment as
/// `MSGBENCH_<OPTION>` (`--connect-rate` → `MSGBENCH_CONNECT_RATE`, `--target` →
/// `MSGBENCH_TARGET`; switches take true/false, 1/0, yes/no, on/off), as containers and Kubernetes configure tools;
/// a variable counts as given (the command line wins over it for the same option, and options
/// that exclude each other are refused as on the command line); `run --help` shows each one.
pub fn parse() -> Cli {
    let matches = with_run_env(Cli::command()).get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// `cmd` with a `MSGBENCH_*` variable on every option of `run` (not the positional input).
pub fn with_run_env(cmd: clap::Command) -> clap::Command {
    cmd.mut_subcommand("run", |run| {
        run.mut_args(|a| {
            let id = a.get_id().as_str();
            // --results-db reads $MSGBENCH_RESULTS_DB itself, where --no-history may override it.
            if a.is_positional() || matches!(id, "help" | "version" | "results_db") {
                return a;
            }
            // Built once per process; clap keeps &'static names.
            let name: &'static str =
                Box::leak(format!("MSGBENCH_{}", id.to_ascii_uppercase()).into_boxed_str());
            // Values never shown in --help: targets and headers may hold credentials.
            let a = a.env(name).hide_env_values(true);
            // Switches take what people write in environments: 1/0, yes/no, on/off too.
            if matches!(a.get_action(), clap::ArgAction::SetTrue) {
                a.value_parser(clap::builder::BoolishValueParser::new())
            } else {
                a
            }
        })
    })
}

/// Subcommands.
#[allow(clippy::large_enum_variant)] // parsed once per process
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a benchmark (no target: a short demo against the embedded in-process broker).
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Find the highest rate at which every objective holds (a capacity search): rates grow,
    /// then the knee is bisected and repeated; every step goes to one results file.
    #[command(after_help = SEARCH_EXAMPLES)]
    Search(SearchArgs),
    /// Check scenario files without running them.
    #[command(after_help = VALIDATE_EXAMPLES)]
    Validate(ValidateArgs),
    /// Re-render a results file.
    #[command(after_help = REPORT_EXAMPLES)]
    Report(ReportArgs),
    /// Compare two runs: per-stage deltas in throughput, latency and integrity, B against A.
    #[command(after_help = COMPARE_EXAMPLES)]
    Compare(CompareArgs),
    /// Merge the results files of a segmented run (--segment I/N) into one, exactly.
    #[command(after_help = MERGE_EXAMPLES)]
    Merge(MergeArgs),
    /// List the available drivers and what they support.
    #[command(after_help = DRIVERS_EXAMPLES)]
    Drivers,
    /// Run one of msgbench's embedded servers standalone (the broker `msgbench run` uses when no
    /// target is given).
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(ServeArgs),
    /// Serve the run history in the browser: runs list with search, run pages, comparison.
    #[command(after_help = DASHBOARD_EXAMPLES)]
    Dashboard(DashboardArgs),
}

const DASHBOARD_EXAMPLES: &str = "\
Examples:
  msgbench dashboard
      The run history on http://127.0.0.1:8642/: every `msgbench run` that wrote a results
      file, searchable by name, tag and target (name:x tag:x target:x narrow a word to one
      field); a page per run with its charts; tick two runs to compare them side by side.
  msgbench dashboard --results-db ./runs.db --listen 127.0.0.1:0
  MSGBENCH_DASHBOARD_TOKEN=$(openssl rand -hex 16) msgbench dashboard --listen 0.0.0.0:8642
      Reachable from other machines: only with a token (--token or the variable), which every
      request must carry as ?token=... or Authorization: Bearer ...; it is never printed.
  msgbench dashboard --import old/*.jsonl
      Add existing results files to the history, then exit.
  msgbench run mem:// --duration 1m --dashboard
      The live page of a run instead (see `msgbench run --help`).

The history lives in $MSGBENCH_RESULTS_DB, else $XDG_DATA_HOME/msgbench/runs.db, else
~/.local/share/msgbench/runs.db. It indexes results files; pages are computed from the files.";

/// `msgbench dashboard`.
#[derive(Debug, Args)]
pub struct DashboardArgs {
    /// Address to serve on (loopback by default; any other address requires a token).
    #[arg(
        long,
        short = 'l',
        default_value = "127.0.0.1:8642",
        value_name = "ADDR"
    )]
    pub listen: String,
    /// Run history database (default: see below).
    #[arg(long, value_name = "PATH")]
    pub results_db: Option<PathBuf>,
    /// Token every request must carry (?token= or Authorization: Bearer); required to listen
    /// beyond loopback. Compared in constant time, never printed; the variable keeps it out
    /// of `ps`.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "MSGBENCH_DASHBOARD_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Add these results files to the history and exit.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub import: Vec<PathBuf>,
}

const SERVE_EXAMPLES: &str = "\
Examples:
  msgbench serve mqtt
      An MQTT 3.1.1/5 broker on 127.0.0.1:1883 (QoS 0-2, wildcards, $share, retained,
      persistent sessions; no authentication, no persistence to disk).
  msgbench serve mqtt --listen 0.0.0.0:11883
  msgbench serve mqtt --tls-cert server.pem --tls-key server.key
      The same over TLS on 127.0.0.1:8883 (clients: mqtts://HOST:8883 --ca-file ca.pem).
  msgbench run mqtt://127.0.0.1:1883 --qos 1 --producers 4 --consumers 4
  msgbench serve amqp-sink --listen 127.0.0.1:5672
      An AMQP 0-9-1 sink: handshake, channels, declares, confirms (acked), heartbeats; it
      swallows and counts publishes (for measuring proxies and clients without a broker).
  msgbench serve amqp-sink --listen 127.0.0.1:5671 --tls-cert server.pem --tls-key server.key
  msgbench run amqp://127.0.0.1:5672 --storm --concurrency 64 --duration 10s
  msgbench serve ws-broadcast --listen 127.0.0.1:8080 --from nats://127.0.0.1:4222 --topic feed
      Relays what NATS delivers on `feed` to every WebSocket client (the rango scenario):
  msgbench run nats://127.0.0.1:4222 --topic feed --consume-from ws://127.0.0.1:8080/ -c 1000
  msgbench run nats://127.0.0.1:4222 --topic feed -c 40000 --connect-rate 5000 \\
      --consume-from ws://127.0.0.1:8080,127.0.0.1:8081/
      Client i joins server i % 2; past the open-file limit, receivers live in io_uring tables.
  msgbench serve ws-broadcast --gateway rango --from amqp://guest:guest@127.0.0.1:5672/%2f
      A JSON gateway shaped like rango: consumes topic exchange peatio.events.ranger (binding
      public.#; --exchange, --topic change them), routing key public.btcusd.trades -> stream
      btcusd.trades; clients subscribe with ws://HOST:8080/?stream=btcusd.trades or the
      message {\"event\":\"subscribe\",\"streams\":[...]} and get {\"btcusd.trades\":BODY}; bodies
      that are not JSON are dropped and counted (--gateway envelope re-serializes each body
      into {\"stream\":...,\"data\":BODY,\"ts\":...} instead). Measure it end to end with JSON
      bodies carrying the stamp:
  msgbench run amqp://guest:guest@127.0.0.1:5672/%2f --exchange peatio.events.ranger \\
      --exchange-type topic --topic public.btcusd.trades --payload '{\"id\":\"{{stamp}}\"}' \\
      --consume-from 'ws://127.0.0.1:8080/?stream=btcusd.trades' -c 100
  msgbench serve http --listen 127.0.0.1:8443 --tls-cert server.pem --tls-key server.key
      200 to every request over HTTPS, HTTP/2 by ALPN (without TLS: HTTP/1.1 and h2c):
  msgbench run https://127.0.0.1:8443/ --ca-file ca.pem --http2 -p 4 --max-in-flight 64
  msgbench serve ecp-endpoint --broker amqp10://artemis:secret@127.0.0.1:5672 --extra-events
      An ECP endpoint on an AMQP 1.0 broker: outbox -> reply (messageID), inbox, send events
      (--error-ratio, --failed-ratio, --duplicate-every inject faults; --*-delay add latency):
  msgbench run --preset ecp --outbox-url amqp10://artemis:secret@127.0.0.1:5672 -n 100000
  msgbench serve time --listen 0.0.0.0:7123
      A time reference for segments on several hosts (UDP; default 127.0.0.1:7123):
  msgbench run nats://broker:4222 --segment auto/8 --start-at 2026-11-22T10:00:00Z --time-reference ref:7123";

const MERGE_EXAMPLES: &str = "\
Examples:
  msgbench merge seg-0.jsonl seg-1.jsonl seg-2.jsonl seg-3.jsonl -o run.jsonl
      Counts summed, histograms merged (exact percentiles), loss and duplicates joined across
      segments; refuses files of different runs or plans.
  msgbench merge /results/seg-*.jsonl -o /results/run.jsonl && msgbench report /results/run.jsonl
  msgbench merge seg-*.jsonl -o run.jsonl --partial
      Merge what there is when a segment is missing or was killed (said in the warnings).";

/// `msgbench merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The segments' results files (one per segment of one run).
    #[arg(required = true, value_name = "SEGMENT.jsonl")]
    pub files: Vec<PathBuf>,
    /// Where to write the merged results file.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// Merge even when segments are missing or incomplete (the warnings say what is missing).
    #[arg(long)]
    pub partial: bool,
    /// Also print the merged report in this format.
    #[arg(long, short = 'f', value_enum)]
    pub format: Option<FormatArg>,
}

/// `msgbench serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Which server.
    #[arg(value_enum)]
    pub server: ServerArg,
    /// Address to listen on (default: 127.0.0.1 on the protocol's port).
    #[arg(long, short = 'l')]
    pub listen: Option<String>,
    /// TLS certificate chain (PEM) for the listener (mqtt, amqp-sink, ws-broadcast, http).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// TLS private key (PEM) for the listener (mqtt, amqp-sink, ws-broadcast, http).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// ws-broadcast: relay what this broker delivers on --topic to every client
    /// (amqp://, mqtt://, nats://).
    #[arg(long, value_name = "URL")]
    pub from: Option<String>,
    /// amqp-proxy: where to relay (amqp://HOST:PORT, or amqps:// with --ca-file).
    #[arg(long, value_name = "URL")]
    pub upstream: Option<String>,
    /// http: answer each request after this long (e.g. 20ms), to see queueing in the figures.
    #[arg(long)]
    pub delay: Option<String>,
    /// ws-broadcast --from: the topic (routing key, subject) to consume [default: msgbench;
    /// with --gateway: public.# for amqp://, public.> for nats://, public/# for mqtt://].
    #[arg(long)]
    pub topic: Option<String>,
    /// ws-broadcast: be a JSON WebSocket gateway instead of broadcasting: clients subscribe to
    /// streams (?stream=NAME in the URL, or {"event":"subscribe","streams":[...]}) and get
    /// the --from messages published on public.NAME, wrapped in JSON; bodies must be JSON.
    #[arg(long, value_enum, value_name = "SHAPE")]
    pub gateway: Option<GatewayArg>,
    /// ws-broadcast --from amqp://: the exchange to bind to [default: msgbench; with
    /// --gateway: peatio.events.ranger].
    #[arg(long, value_name = "NAME")]
    pub exchange: Option<String>,
    /// ws-broadcast --from amqp://: that exchange's type [default: direct; with --gateway:
    /// topic].
    #[arg(long, value_name = "TYPE")]
    pub exchange_type: Option<String>,
    /// No periodic status line.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    #[command(flatten)]
    pub ecp: EcpServeArgs,
}

/// The ECP queue names, shared by `run --preset ecp` and `serve ecp-endpoint` (defaults are
/// go-mades-bench's).
#[derive(Debug, Args, Default, PartialEq, Eq)]
pub struct EcpQueues {
    /// Outbox queue (default ecp.endpoint.outbox).
    #[arg(long, value_name = "QUEUE")]
    pub outbox_queue: Option<String>,
    /// Reply queue (default ecp.endpoint.outbox.reply).
    #[arg(long, value_name = "QUEUE")]
    pub reply_queue: Option<String>,
    /// Send-event queue (default ecp.endpoint.send.event).
    #[arg(long, value_name = "QUEUE")]
    pub send_event_queue: Option<String>,
    /// Inbox queue (default ecp.endpoint.inbox).
    #[arg(long, value_name = "QUEUE")]
    pub inbox_queue: Option<String>,
}

/// `msgbench serve ecp-endpoint`.
#[derive(Debug, Args)]
#[command(next_help_heading = "ecp-endpoint")]
pub struct EcpServeArgs {
    /// The AMQP 1.0 broker of the outbox side (where the business application sends).
    #[arg(long, value_name = "URL")]
    pub broker: Option<String>,
    /// The inbox side's broker, if another one.
    #[arg(long, value_name = "URL")]
    pub inbox_broker: Option<String>,
    /// Answer on the reply queue after this long (e.g. 5ms).
    #[arg(long, default_value = "0s")]
    pub reply_delay: String,
    /// Deliver to the inbox after this long.
    #[arg(long, default_value = "0s")]
    pub deliver_delay: String,
    /// Emit send events after this long.
    #[arg(long, default_value = "0s")]
    pub event_delay: String,
    /// Also emit ACCEPTED and TRANSPORTED send events.
    #[arg(long)]
    pub extra_events: bool,
    /// Share of messages rejected with an errorCode reply (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub error_ratio: f64,
    /// Share of messages that fail after the reply (a FAILED event, no delivery) (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub failed_ratio: f64,
    /// Every Nth message is delivered twice (and its RECEIVED event sent twice); 0 = never.
    #[arg(long, default_value_t = 0)]
    pub duplicate_every: u64,
    /// Link address template ('/queue/{topic}' for RabbitMQ 3.x).
    #[arg(long, value_name = "TEMPLATE")]
    pub address: Option<String>,
    /// Link capabilities, comma-separated (default queue).
    #[arg(long, value_delimiter = ',')]
    pub capabilities: Option<Vec<String>>,
    /// Trust this CA for amqp10s:// brokers.
    #[arg(long)]
    pub ca_file: Option<String>,
    /// Do not verify amqp10s:// brokers' certificates.
    #[arg(long)]
    pub insecure: bool,
    #[command(flatten)]
    pub queues: EcpQueues,
}

/// What `serve ws-broadcast --gateway` sends its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GatewayArg {
    /// rango's shape: {"<stream>": <body>}, the body verbatim.
    Rango,
    /// {"stream":"<stream>","data":<body re-serialized>,"ts":<unix ms>}: the body parsed
    /// and re-encoded, as a gateway that rewrites messages does.
    Envelope,
}

/// Servers `msgbench serve` can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ServerArg {
    /// MQTT 3.1.1 and 5 broker.
    Mqtt,
    /// AMQP 0-9-1 sink: accepts and counts publishes, acks confirms.
    AmqpSink,
    /// Strict AMQP 0-9-1 proxy to --upstream (amqp:// or amqps://, verified with --ca-file):
    /// answers the handshake itself frame by frame, as amqpprox does, then replays it upstream
    /// and relays bytes; what a client sends before connection.open-ok is held, never relayed.
    AmqpProxy,
    /// WebSocket broadcast: every binary message (from a client or relayed --from a broker)
    /// goes to every other client; a client's text messages are requests (a subscribe, --hello),
    /// counted and not relayed; with --gateway, a JSON gateway routing by stream (rango's shape).
    WsBroadcast,
    /// HTTP/1.1 and h2c server answering 200 to every request (for the HTTP driver's tests and
    /// for measuring the client side).
    Http,
    /// ECP endpoint simulator on an AMQP 1.0 broker (--broker): consumes the outbox, replies,
    /// delivers to the inbox, emits send events (the target of `run --preset ecp`).
    EcpEndpoint,
    /// Time reference (UDP) for segmented runs on several hosts: `run --time-reference`
    /// measures each host's clock offset against it.
    Time,
}

const RUN_EXAMPLES: &str = "\
Examples:
  msgbench run
      Demo: 5 s of MQTT pub/sub against an embedded broker on a free loopback port.
  msgbench run mqtt://127.0.0.1:1883 --qos 1 --producers 10 --consumers 1 --size 100 --rate 50k
      10 QoS 1 publishers on one topic (publish latency = PUBLISH to PUBACK).
  msgbench run mqtt://127.0.0.1:1883 --qos 1 --topics 10 --topic 'bench/{i}' --ack-every 16
      A subscriber per topic, writing its PUBACKs 16 at a time (at most 1 ms late): fewer TCP
      segments for both sides at high rates.
  msgbench run mqtt://127.0.0.1:1883 --topics 10 --topic 'bench/{i}' --subscribe 'bench/+'
      10 topics, each subscriber on a wildcard (MQTT 5: --mqtt-version 5; shared: --queue-group g).
  msgbench run mqtts://broker:8883 --ca-file ca.pem --cert client.pem --key client.key
      TLS with a client certificate (verification is on; --insecure skips it).
  msgbench run mqtt://127.0.0.1:1883 --connections 20000 --connect-rate 2000 --hold 60s
      Open and hold 20,000 connections: connect latency, failures by cause, memory per connection
      (--source-addrs 127.0.0.1-127.0.0.8 when one address runs out of ports).
  msgbench run mqtt://127.0.0.1:1883,127.0.0.1:1884 --connections 100000 --source-addrs 127.0.0.1-127.0.0.4
      Clients shared round robin by two brokers; beyond the open-file limit, MQTT connections
      are held in io_uring tables (Linux).
  msgbench run tls://nats.example:4222 --ca-file ca.pem --rate 10000 --duration 30s
      NATS over TLS (started after the server's INFO, as NATS servers expect).
  msgbench run nats://127.0.0.1:4222 --storm --concurrency 64 --duration 10s
      Connect storm: connect, handshake, close, repeat; connections/s and handshake latency.
  msgbench run nats://127.0.0.1:4222 --producers 4 --consumers 4 --rate 50000 --size 1KiB --duration 30s
      4 publishers and 4 fan-out subscribers on one subject, 50k msgs/s in total.
  msgbench run nats://127.0.0.1:4222 --topics 8 --topic 'bench.{i}' --consumers 3 --queue-group workers
      8 subjects, 3 competing consumers per subject.
  msgbench run nats://127.0.0.1:4222 --request-reply --max-in-flight 64 --messages 1000000
      Request/reply round trips, 64 outstanding per requester, one million requests.
  msgbench run 'nats+js://127.0.0.1:4222?storage=file&consumer=pull&batch=256' --max-in-flight 1000 --size 1KiB
      NATS JetStream: a file stream created for the subject (create=0: it must exist), publish
      latency to each PubAck with up to 1000 unconfirmed (the async publish window), an ephemeral
      pull consumer fetching 256 at a time, explicit acks. Options in the URL: stream=NAME,
      storage=file|memory, consumer=pull|push, durable=NAME (fan-out consumers: NAME-<i>; a queue
      group shares one durable), batch=N, create=1|0, max_bytes=SIZE (256MiB file, 64MiB memory),
      replicas=N, ack_pending=N, ack_wait=D, deliver=new|all, expires=D (pull requests).
  msgbench run http://127.0.0.1:8080/api -p 50 --duration 10s
      HTTP/1.1 closed loop: 50 keep-alive connections, one request in flight each.
  msgbench run http://127.0.0.1:8080/api -p 50 --rate 20000 --method GET --header 'X-Key: 1'
      HTTP at a fixed rate (open loop); latency from request to response.
  msgbench run ws://127.0.0.1:9001/ --echo -p 50 --duration 30s
      A WebSocket echo server: each message's echo is its response (timed like HTTP's).
  msgbench run https://api.example/ingest --header 'Authorization: Bearer ...' --header 'X-Tenant-Sig: ...' --redact-header 'x-tenant-*'
      Credentials are sent but never written: URL passwords, Authorization, Cookie, API-key
      headers and those matching --redact-header show as *** in results, reports and dashboard.
  msgbench run amqp://guest:guest@127.0.0.1:5672/%2f --confirm --size 1KiB --queue-group q
      RabbitMQ: publisher confirms (publish latency = publish -> confirm), one shared queue.
  msgbench run amqp://127.0.0.1 -p 100 -c 100 --channels 20 --rate 10k --mandatory
      100 publishers and 100 consumers on 10 connections (20 channels each).
  msgbench run amqp10://user:pass@127.0.0.1:5672 -p 2 -c 2 --size 3000 --persistent
      AMQP 1.0 (Artemis, Qpid, RabbitMQ with --address '/queue/{topic}'): unsettled sends,
      publish latency = transfer -> disposition (--settled: fire and forget).
  msgbench run --preset ecp --outbox-url amqp10://endpoint:password@ecp-broker:5672 -n 100000 --size 3000
      go-mades-bench's ECP endpoint benchmark: outbox, reply, inbox, DELIVERED and RECEIVED
      events as stages with their own rates and latency percentiles; --max-in-flight bounds
      the messages not yet RECEIVED (--ecp-mode toolbox|amqp|tracing for the other modes).
  msgbench run mem:// --rate 20000 --rate-shape ramp:1000..20000/30s --duration 40s
      A linear ramp (other shapes: poisson, steps:1000/10s,5000/10s, burst:500/1s).
  msgbench run scenario.toml --duration 1m -o results.jsonl
      A scenario file, with flags overriding it.
  msgbench run nats://127.0.0.1:4222 --rate 50k --duration 1h --metrics 127.0.0.1:9464
      Prometheus metrics at http://127.0.0.1:9464/metrics while the run lasts (counters,
      latency summaries per phase and per interval; deploy/grafana/ has a dashboard).
  msgbench run nats://127.0.0.1:4222 --rate 50k --duration 10m --tui
      Full-screen live view: msgs/s and latency p50/p99/max over time, lost/dup/reordered,
      errors, generator CPU and send delay, phase and time left (p pauses the display,
      s/Tab switches the latency series, q stops the run cleanly and prints the report).
      Without --tui, long runs on a terminal show a progress line below the table.
  msgbench run mem:// --rate 50k --duration 10m --dashboard
      Live charts in the browser (the URL is printed; --dashboard 0.0.0.0:8643 serves other
      machines, with --dashboard-token or MSGBENCH_DASHBOARD_TOKEN). Every run is also recorded for `msgbench dashboard`
      (--results-db PATH elsewhere, --no-history not at all).
  msgbench run nats://127.0.0.1:4222 --rate 20k --threshold 'e2e.p99 < 10ms' --threshold 'lost == 0' --junit verdicts.xml
      A verdict for CI: exit code 3 when a threshold fails (the report and the results file
      list each with its actual value; --threshold-abort stops at the first failure).
  msgbench run nats://broker:4222 -p 8 -c 8 -n 1M --segment 0/4 --start-at 2026-11-22T10:00:00Z -o seg-0.jsonl
      One of four segments of one run (run 1/4, 2/4, 3/4 alike, on other machines), then:
      msgbench merge seg-*.jsonl -o run.jsonl

Rates are messages per second for all producers together; --producers and --consumers are
per topic. Latencies are measured from each message's intended send time (coordinated
omission corrected). Ctrl-C, SIGTERM or SIGHUP stops early and still writes the report and
results file; a second one cuts the drain short.

Exit codes: 0 the run completed (and every threshold passed); 1 it could not run (unreachable
target, refused connection, every producer failed, a results file that cannot be written); 2
usage error (bad flag, URL, scenario or threshold); 3 verdict failed: a threshold failed, or, without thresholds, nothing
was delivered where deliveries were expected, nothing was confirmed where the protocol confirms
(every publish refused or unanswered, every HTTP response an error), producers sent nothing at
all (e.g. a peer granting no AMQP 1.0 credit), or a connection workload opened no connection;
130 interrupted (Ctrl-C, SIGTERM, SIGHUP).";

const VALIDATE_EXAMPLES: &str = "\
Examples:
  msgbench validate scenario.toml
  msgbench validate scenarios/*.toml";

const REPORT_EXAMPLES: &str = "\
Examples:
  msgbench report results.jsonl
  msgbench report results.jsonl --format json
  msgbench report results.jsonl --format csv > intervals.csv
  msgbench report results.jsonl --threshold 'e2e.p99 < 5ms' --threshold 'completeness >= 99.99%'
      Judges an old run by new thresholds (exit code 3 when one fails; --junit FILE too).
  msgbench report results.jsonl --format html -o report.html
      One self-contained page (opens without a network): configuration, summary, charts of
      throughput, latency percentiles, errors, integrity and CPU over time, and the latency
      percentile distribution.";

const COMPARE_EXAMPLES: &str = "\
Examples:
  msgbench compare baseline.jsonl candidate.jsonl
      For each stage (throughput, publish, end-to-end, send delay, connect, each stage of a
      multi-stage run), integrity and generator CPU: A, B, the delta, the change in percent and
      whether B is better or worse (higher throughput, lower latency, loss and CPU are better).
  msgbench compare a.jsonl b.jsonl --format html -o compare.html
      The same tables, with A and B overlaid on the charts.
  msgbench compare a.jsonl b.jsonl --format json -o compare.json
      The comparison model: per group, rows of metric, a, b, delta, percent, better, verdict.

Runs with different plans (target, size, rate...) are compared all the same, with a warning.";

const SEARCH_EXAMPLES: &str = "\
Examples:
  msgbench search nats://127.0.0.1:4222 --slo 'e2e.p99 < 10ms' --slo 'lost == 0'
      How many messages per second NATS takes while p99 stays under 10 ms and nothing is
      lost: rates from 1,000/s double until an objective fails, the bracket is halved to 2%,
      and the rate found is run twice more to show it holds.
  msgbench search scenario.toml --slo 'publish.p999 < 50ms' --start-rate 20k --max-rate 2M
  msgbench search 'mem://?max_rate=50k' --slo 'e2e.p99 < 10ms'
      A system of known capacity (the in-process broker capped at 50,000 msgs/s).
  msgbench report search.jsonl -f html -o knee.html
      The step table and the knee (achieved rate and p50/p99/p99.9 against the offered rate).
  msgbench compare before.jsonl after.jsonl
      Capacity of search B against search A, then the figures of all steps together.

Each step runs the workload at one offered rate: a warm-up (--warmup, default 1s here) and a
measure phase (--duration, default 2s here). A step passes when every objective (--slo, and
--threshold or the scenario's [thresholds]) holds and it sent at least --min-achieved of the
rate offered. A failing step during which msgbench's own threads were saturated ends the
search: above that rate the figures describe msgbench, and the answer is a lower bound.
Exit codes: 0 a capacity was found, 1 could not run, 2 usage error, 3 no rate held the
objectives, 130 interrupted (the steps so far are reported).";

const DRIVERS_EXAMPLES: &str = "\
Examples:
  msgbench drivers";

/// `msgbench run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// A target URL (nats://host:4222, nats+js://host:4222?stream=S, mem://) or a scenario
    /// file (*.toml).
    pub input: Option<String>,
    /// Target URL (overrides the scenario's).
    #[arg(long, short = 't')]
    pub target: Option<String>,
    /// Consumers connect here instead of the target: a cross-protocol pipeline, e.g. publish
    /// on amqp://, receive on mqtt:// through a broker that bridges them.
    #[arg(long, value_name = "URL")]
    pub consume_from: Option<String>,
    /// Time each consumer spends on each delivery before taking the next: 5ms, or exp:5ms
    /// (exponentially distributed, that mean). Slow consumers build a backlog in the system.
    #[arg(long, value_name = "DURATION|exp:MEAN")]
    pub processing: Option<String>,
    /// Most deliveries each consumer takes per second (a slow consumer).
    #[arg(long, value_name = "N")]
    pub consumer_rate: Option<String>,
    /// Producers per topic.
    #[arg(long, short = 'p')]
    pub producers: Option<u32>,
    /// Consumers per topic.
    #[arg(long, short = 'c')]
    pub consumers: Option<u32>,
    /// Number of topics (subjects).
    #[arg(long)]
    pub topics: Option<u32>,
    /// Topic name or pattern; `{i}` becomes the topic index.
    #[arg(long)]
    pub topic: Option<String>,
    /// How producers spread over the topics: uniform (default), zipf:S (topic i weighs
    /// 1/(i+1)^S), hot:10%:90% (the first 10% of the topics get 90% of the producers).
    #[arg(long, value_name = "SHAPE")]
    pub topic_popularity: Option<String>,
    /// Consumers of a topic compete (queue group) instead of each receiving everything.
    #[arg(long, num_args = 0..=1, default_missing_value = "msgbench", value_name = "GROUP")]
    pub queue_group: Option<String>,
    /// Messages per second, all producers together (0 or omitted: unlimited). Accepts 50k, 1.5M.
    #[arg(long, short = 'r')]
    pub rate: Option<String>,
    /// constant | poisson | ramp:FROM..TO/OVER | steps:RATE/DUR,... | burst:SIZE/EVERY
    #[arg(long)]
    pub rate_shape: Option<String>,
    /// How paced sends wait: efficient (timer on a 50 µs grid, little CPU) or precise
    /// (spin the last 300 µs: smallest send delay, busy core).
    #[arg(long, value_enum)]
    pub pacing: Option<PacingArg>,
    /// Message size including the 40-byte stamp: 1KiB, 512, a uniform range 100..2KiB, a
    /// distribution normal:MEAN,SD or lognormal:MEDIAN,SIGMA (clamped to 4 σ), or @FILE: an
    /// empirical histogram, one `SIZE [WEIGHT]` per line.
    #[arg(long, short = 's')]
    pub size: Option<String>,
    /// How the stamp travels: binary (40 bytes at the start, the default) or text (58
    /// printable, JSON-safe bytes, found anywhere in a delivery, then printable filler): for
    /// systems that need text or re-encode what they relay.
    #[arg(long, value_enum)]
    pub stamp: Option<StampArg>,
    /// Message template, inline or @FILE (implies --stamp text). Placeholders: {{stamp}}
    /// (required), {{seq}}, {{producer}}, {{stream}}, {{run}}, {{time}} (Unix ms) and {{pad}}
    /// (filler up to --size; without it a message is the template alone). Example:
    /// '{"id":"{{stamp}}","price":1.5,"seq":{{seq}},"x":"{{pad}}"}'
    #[arg(long, value_name = "TEMPLATE|@FILE")]
    pub payload: Option<String>,
    /// Messages are real documents: each is its stamp followed by one file of DIR, the files
    /// taken in turn (sizes are the files' own; excludes --size, --content and --payload).
    #[arg(long, value_name = "DIR")]
    pub payload_files: Option<String>,
    /// What fills each message after the stamp: random (incompressible, the default), zeros
    /// (best case for compression) or text (English-like words, implies --stamp text): to
    /// measure a system's compression.
    #[arg(long, value_enum)]
    pub content: Option<ContentArg>,
    /// Measure for this long (30s, 5m).
    #[arg(long, short = 'd', conflicts_with = "messages")]
    pub duration: Option<String>,
    /// Measure until this many messages were sent (all producers).
    #[arg(long, short = 'n')]
    pub messages: Option<String>,
    /// Warm-up before measuring (recorded, excluded from the summary).
    #[arg(long)]
    pub warmup: Option<String>,
    /// Longest wait for in-flight messages after the last send.
    #[arg(long)]
    pub drain: Option<String>,
    /// Build a backlog first: consumers subscribe but read nothing until producers have sent
    /// this many bytes (`512MiB`, `1GB`), then are released; the report gives the build time
    /// and how fast the backlog drained. Meant for durable queues and logs (Kafka, JetStream,
    /// Redis streams, RabbitMQ and Artemis queues). No warm-up unless one is asked for.
    #[arg(long, value_name = "SIZE")]
    pub backlog: Option<String>,
    /// Unacknowledged messages allowed per producer (acks, replies).
    #[arg(long)]
    pub max_in_flight: Option<usize>,
    /// Give up on an ack (or reply) after this long and count a timeout.
    #[arg(long)]
    pub ack_timeout: Option<String>,
    /// Send requests; consumers reply; publish latency is the round trip.
    #[arg(long)]
    pub request_reply: bool,
    /// Interval between live lines and results records.
    #[arg(long)]
    pub tick: Option<String>,
    /// A send later than this after its intended time counts as late.
    #[arg(long)]
    pub late_threshold: Option<String>,
    /// Worker threads producers and consumers run on, one event loop each; 0 = a work-stealing
    /// pool of one thread per CPU (default: half the CPUs when the target is a broker on this
    /// machine, leaving the rest to it; otherwise 0).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Socket I/O: readiness (epoll; one system call per send and per receive) or batched
    /// (each worker thread's plain TCP connections share one io_uring and submit together;
    /// needs --workers 1 or more).
    #[arg(long, value_enum, value_name = "MODE")]
    pub io: Option<IoArg>,
    /// Run name shown in reports.
    #[arg(long)]
    pub name: Option<String>,
    /// A label for finding the run again in the dashboard's history (repeatable; replaces the
    /// scenario's `tags`).
    #[arg(long, value_name = "TAG")]
    pub tag: Vec<String>,
    /// Results file (default: msgbench-<UTC time>.jsonl in the current directory).
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Do not write a results file.
    #[arg(long, conflicts_with = "output")]
    pub no_output: bool,
    /// Also hide the values of headers whose name matches this glob (case-insensitive, `*` any
    /// run, `?` one character; repeatable or comma-separated; scenario `[output]
    /// redact_headers`). Always hidden: the password (or bare token) of every URL's user info
    /// (the user name shows), credential query parameters,
    /// Authorization, Proxy-Authorization, Cookie and headers named like *api-key*, *token*,
    /// *secret*, *auth*, *session*: in the results file, every report, the dashboard and the
    /// history, as `***`.
    #[arg(long, value_name = "GLOB", value_delimiter = ',')]
    pub redact_header: Vec<String>,
    /// No live table on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Full-screen live view on the terminal instead of the table: throughput and latency
    /// charts, integrity, errors, generator health, phase and time left. Keys: p pause the
    /// display, s/Tab switch the latency series, q/Esc stop the run (the report is written).
    #[arg(long, conflicts_with = "quiet")]
    pub tui: bool,
    /// Format of the final report on stdout.
    #[arg(long, value_enum, default_value_t = FormatArg::Text)]
    pub format: FormatArg,
    #[command(flatten)]
    pub verdict: VerdictArgs,
    /// Judge the thresholds every interval of the measure phase too and stop the run at the
    /// first that fails (exit code 3; thresholds on the delivery account, such as lost and
    /// completeness, are judged at the end only).
    #[arg(long, help_heading = "Verdicts")]
    pub threshold_abort: bool,
    /// Serve live Prometheus metrics at http://ADDR/metrics while the run lasts. ADDR is PORT
    /// or :PORT (on 127.0.0.1) or HOST:PORT; port 0 picks a free port (the URL is printed).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,

    /// Consumers subscribe to this filter instead of their topic (e.g. 'bench/+', 'bench/#').
    #[arg(long, help_heading = "Protocol client")]
    pub subscribe: Option<String>,
    /// Delivery guarantee: MQTT QoS 0, 1 or 2.
    #[arg(long, help_heading = "Protocol client")]
    pub qos: Option<u8>,
    /// Publish retained messages (MQTT).
    #[arg(long, help_heading = "Protocol client")]
    pub retain: bool,
    /// Consumers acknowledge N deliveries at a time (default 1): AMQP 0-9-1 sends one
    /// multiple-ack per N (and when idle); MQTT QoS 1/2 writes N acknowledgements together, at
    /// most 1 ms late, so fewer TCP segments go back to the broker (a broker with Nagle on may
    /// hold its next delivery until they arrive).
    #[arg(long, value_name = "N", help_heading = "Protocol client")]
    pub ack_every: Option<u32>,
    /// Protocol version: MQTT 3.1.1 (default) or 5.
    #[arg(long, value_name = "VERSION", help_heading = "Protocol client")]
    pub mqtt_version: Option<String>,
    /// Keep-alive interval (default 30s): MQTT keep-alive, AMQP heartbeat, AMQP 1.0 idle
    /// time-out; NATS, Redis, MQTT and AMQP data connections silent for two of them reconnect.
    #[arg(long, help_heading = "Protocol client")]
    pub keep_alive: Option<String>,
    /// Client id pattern: {run}, {role} (pub, sub, conn) and {i} are replaced.
    #[arg(long, help_heading = "Protocol client")]
    pub client_id: Option<String>,
    /// Keep sessions across connections (MQTT clean session off; use a fixed --client-id).
    #[arg(long, help_heading = "Protocol client")]
    pub persistent_session: bool,
    /// Message each receiving client sends after connecting; {i} and {topic} are replaced
    /// (WebSocket subscribe requests, e.g. '{"subscribe":"public.{i}"}').
    #[arg(long, value_name = "TEMPLATE", help_heading = "Protocol client")]
    pub hello: Option<String>,
    /// WebSocket: the target sends every message back on its connection (an echo server).
    /// Producers take each echo as their message's response, timed from the intended send time
    /// as HTTP responses are; the run needs no consumers and keeps one message in flight per
    /// connection unless --max-in-flight says otherwise.
    #[arg(long, help_heading = "Protocol client")]
    pub echo: bool,
    /// Connect timeout per client (default 10s).
    #[arg(long, help_heading = "Protocol client")]
    pub connect_timeout: Option<String>,
    /// Send each handshake step before the answer to the previous one (AMQP 0-9-1:
    /// channel.open with connection.open; AMQP 1.0: begin with open): one round trip less per
    /// connection. Off by default: proxies that answer the handshake themselves (amqpprox)
    /// stall on a pipelined step.
    #[arg(long, help_heading = "Protocol client")]
    pub pipeline_handshake: bool,
    /// PEM file of the CA to trust (default: the system's roots).
    #[arg(long, help_heading = "TLS")]
    pub ca_file: Option<String>,
    /// Client certificate (PEM).
    #[arg(long, requires = "key", help_heading = "TLS")]
    pub cert: Option<String>,
    /// Client private key (PEM).
    #[arg(long, requires = "cert", help_heading = "TLS")]
    pub key: Option<String>,
    /// Do not verify the server's certificate.
    #[arg(long, help_heading = "TLS")]
    pub insecure: bool,

    /// Hold this many connections (a connection workload instead of pub/sub).
    #[arg(long, value_name = "N", help_heading = "Connection workloads")]
    pub connections: Option<String>,
    /// Connect storm: connect, handshake, [send], close, repeat.
    #[arg(
        long,
        conflicts_with = "connections",
        help_heading = "Connection workloads"
    )]
    pub storm: bool,
    /// Connection attempts per second (default: as fast as --concurrency allows). Without
    /// --connections or --storm: the rate a message run's consumers connect at, the run
    /// measuring once all have (a failed one is retried with backoff once others connected).
    #[arg(long, help_heading = "Connection workloads")]
    pub connect_rate: Option<String>,
    /// How attempts are spread at --connect-rate: constant (evenly, the default) or poisson
    /// (exponential gaps, as independent devices switch on).
    #[arg(
        long,
        value_name = "constant|poisson",
        help_heading = "Connection workloads"
    )]
    pub connect_arrival: Option<String>,
    /// How long to hold the connections once open (default: --duration, else 10s).
    #[arg(long, help_heading = "Connection workloads")]
    pub hold: Option<String>,
    /// Connection attempts (storm: cycles) in progress at once (default 64).
    #[arg(long, help_heading = "Connection workloads")]
    pub concurrency: Option<u32>,
    /// Messages sent on each connection after it opens (storm: per cycle).
    #[arg(long, value_name = "M", help_heading = "Connection workloads")]
    pub messages_per_connection: Option<u32>,
    /// Hold: every connection publishes once per this interval.
    #[arg(long, help_heading = "Connection workloads")]
    pub publish_interval: Option<String>,
    /// Hold: a reconnect storm this long after the start (every held connection dropped and
    /// opened again at once, as devices after an outage); reconnect latency and failures are
    /// reported.
    #[arg(long, value_name = "DURATION", help_heading = "Connection workloads")]
    pub reconnect_at: Option<String>,
    /// Hold: drop this many held connections per second, one at a time, each opened again at
    /// once (churn, as devices on flaky networks); reconnect latency, failures and missed
    /// publishes are reported.
    #[arg(long, value_name = "PER_SECOND", help_heading = "Connection workloads")]
    pub churn: Option<String>,
    /// A journey each of --connections N virtual users runs: steps separated by `;` (connect;
    /// subscribe [TOPIC]; publish N [at R/s]; publish for D at R/s; request (as publish, each
    /// waiting for its reply: NATS, AMQP, MQTT 5); sleep D; sleep exp:D; disconnect).
    #[arg(long, value_name = "STEPS", help_heading = "Connection workloads")]
    pub journey: Option<String>,
    /// Journey: passes per virtual user (default 1; 0 = until the end of --duration).
    #[arg(long, value_name = "K", help_heading = "Connection workloads")]
    pub journey_repeat: Option<u32>,
    /// Local addresses to spread connections over: 127.0.0.1-127.0.0.50 or a list (each gives
    /// ~28,000 ports per destination). Without --connections or --storm: the consumers'.
    #[arg(long, help_heading = "Connection workloads")]
    pub source_addrs: Option<String>,

    /// Persistent messages (AMQP 0-9-1 delivery mode 2; AMQP 1.0 durable header).
    #[arg(long, help_heading = "AMQP 0-9-1")]
    pub persistent: bool,
    #[command(flatten)]
    pub amqp: msgbench_driver_amqp::options::AmqpArgs,
    #[command(flatten)]
    pub http: msgbench_driver_http::options::HttpArgs,
    #[command(flatten)]
    pub amqp10: msgbench_driver_amqp10::options::Amqp10Args,
    #[command(flatten)]
    pub kafka: msgbench_driver_kafka::options::KafkaArgs,

    /// A ready-made scenario under the file and the flags: `ecp` (go-mades-bench's ECP/MADES
    /// business-application API benchmark over AMQP 1.0).
    #[arg(long, value_name = "NAME", help_heading = "Presets")]
    pub preset: Option<String>,
    #[command(flatten)]
    pub ecp: EcpArgs,
    #[command(flatten)]
    pub segment: SegmentArgs,
    #[command(flatten)]
    pub dashboard: DashboardRunArgs,
}

/// The live web dashboard of a run and its record in the run history.
#[derive(Debug, Args, Default, PartialEq, Eq)]
#[command(next_help_heading = "Dashboard and history")]
pub struct DashboardRunArgs {
    /// Serve live charts of the run in the browser (default 127.0.0.1:0: a free loopback port;
    /// the URL is printed). Put it after the target, or write --dashboard=ADDR.
    #[arg(long, num_args = 0..=1, default_missing_value = "127.0.0.1:0", value_name = "ADDR")]
    pub dashboard: Option<String>,
    /// Token every dashboard request must carry (?token= or Authorization: Bearer); required
    /// for --dashboard beyond loopback. Compared in constant time, never printed.
    #[arg(long, value_name = "TOKEN", requires = "dashboard")]
    pub dashboard_token: Option<String>,
    /// Run history to record this run in (default: $MSGBENCH_RESULTS_DB, else
    /// $XDG_DATA_HOME/msgbench/runs.db, else ~/.local/share/msgbench/runs.db).
    #[arg(long, value_name = "PATH")]
    pub results_db: Option<PathBuf>,
    /// Do not record this run in the history.
    #[arg(long, conflicts_with = "results_db")]
    pub no_history: bool,
}

/// Splitting one run over several processes or machines (`msgbench merge` joins the files).
#[derive(Debug, Args, Default, PartialEq, Eq)]
#[command(next_help_heading = "Segments (one run over several processes or machines)")]
pub struct SegmentArgs {
    /// Run only slice I of N (I from 0) of the workload: producers, consumers and connections
    /// by global index, rates and message counts split; `auto/N` reads I from
    /// JOB_COMPLETION_INDEX (Kubernetes Indexed Jobs). `producers` or `consumers` splits by
    /// role instead: one process sends, the other receives (e.g. ZeroMQ between two processes).
    #[arg(long, value_name = "I/N|producers|consumers")]
    pub segment: Option<String>,
    /// Connect early, then release the load at this wall-clock instant (RFC 3339 such as
    /// 2026-11-22T10:00:00Z, or Unix milliseconds), so all segments start together.
    #[arg(long, value_name = "TIME")]
    pub start_at: Option<String>,
    /// Measure this host's clock offset against `msgbench serve time` at HOST:PORT and correct
    /// for it (cross-host end-to-end latency then carries the measured uncertainty).
    #[arg(long, value_name = "HOST:PORT")]
    pub time_reference: Option<String>,
    /// The run id stamped into every message (segments of one run must share it; by default
    /// it is derived from the plan and --start-at, so identical command lines agree).
    #[arg(long, value_name = "N")]
    pub run_id: Option<u32>,
}

/// The `ecp` preset's settings (go-mades-bench's flags; defaults are its defaults).
#[derive(Debug, Args, Default, PartialEq, Eq)]
#[command(next_help_heading = "ECP preset (--preset ecp)")]
pub struct EcpArgs {
    /// endpoint (default), toolbox, amqp or tracing.
    #[arg(long, value_name = "MODE")]
    pub ecp_mode: Option<String>,
    /// Outbox-side broker (default amqp10://endpoint:password@localhost:5672).
    #[arg(long, value_name = "URL")]
    pub outbox_url: Option<String>,
    /// Inbox-side broker (default: the outbox side's).
    #[arg(long, value_name = "URL")]
    pub inbox_url: Option<String>,
    /// receiverCode: the ECP component code of the receiving endpoint (default ecp-endpoint).
    #[arg(long, value_name = "CODE")]
    pub receiver_code: Option<String>,
    /// messageType and businessType (default TEST-MESSAGE).
    #[arg(long)]
    pub message_type: Option<String>,
    #[command(flatten)]
    pub queues: EcpQueues,
    /// Do not drain the stage queues before the run.
    #[arg(long)]
    pub no_clean: bool,
}

/// `msgbench search`: the workload of `run`, at rates the search chooses.
#[derive(Debug, Args)]
pub struct SearchArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub search: SearchOptions,
}

/// The capacity search's own options.
#[derive(Debug, Args, Default, PartialEq, Eq)]
#[command(next_help_heading = "Capacity search")]
pub struct SearchOptions {
    /// An objective every step must meet, METRIC OP VALUE as for --threshold (repeatable):
    /// 'e2e.p99 < 10ms', 'lost == 0', 'publish.p999 < 50ms', 'completeness >= 99.99%'.
    #[arg(long, value_name = "COND")]
    pub slo: Vec<String>,
    /// The first rate tried, messages per second (default 1000; 20k, 1.5M accepted).
    #[arg(long, value_name = "RATE")]
    pub start_rate: Option<String>,
    /// The highest rate tried (default 10M): holding the objectives there ends the search.
    #[arg(long, value_name = "RATE")]
    pub max_rate: Option<String>,
    /// How narrow the bracket around the knee must get, relative to its lower end (default 2%).
    #[arg(long, value_name = "PERCENT")]
    pub precision: Option<String>,
    /// Extra runs at the rate found, to show it holds (default 2).
    #[arg(long, value_name = "N")]
    pub repeat: Option<u32>,
    /// The least share of the offered rate a step must send to pass (default 95%).
    #[arg(long, value_name = "PERCENT")]
    pub min_achieved: Option<String>,
    /// Upper bound on the number of steps (default 40).
    #[arg(long, value_name = "N")]
    pub max_steps: Option<u32>,
}

/// `msgbench validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Scenario files.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// `msgbench report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A results file written by `msgbench run`.
    pub results: PathBuf,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = FormatArg::Text)]
    pub format: FormatArg,
    /// Write the report to this file instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub verdict: VerdictArgs,
}

/// Thresholds and where their verdicts go (`run` and `report`).
#[derive(Debug, Clone, Default, Args)]
pub struct VerdictArgs {
    /// A pass/fail condition on the result, METRIC OP VALUE (repeatable; replaces the
    /// scenario's [thresholds]; `report`: replaces the run's): 'e2e.p99 < 10ms',
    /// 'lost == 0', 'received_per_s >= 50k', 'completeness >= 99.99%', 'publish.p999 < 50ms',
    /// 'stage.NAME.p99 < 20ms'. A failed one makes the exit code 3.
    #[arg(long, value_name = "COND", help_heading = "Verdicts")]
    pub threshold: Vec<String>,
    /// Write the verdicts as JUnit XML (one test case per threshold) for CI.
    #[arg(long, value_name = "FILE", help_heading = "Verdicts")]
    pub junit: Option<PathBuf>,
    /// Write a JSON summary for scripts: verdict, exit code, thresholds, the result's figures
    /// and the delivery account (format: docs/GUIDE.md, "Verdicts").
    #[arg(long, value_name = "FILE", help_heading = "Verdicts")]
    pub summary: Option<PathBuf>,
}

/// `msgbench compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Run A, the baseline (a results file).
    pub a: PathBuf,
    /// Run B, compared with A.
    pub b: PathBuf,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = CompareFormatArg::Text)]
    pub format: CompareFormatArg,
    /// Write the comparison to this file instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `msgbench compare` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompareFormatArg {
    /// Tables.
    Text,
    /// One self-contained HTML page with the tables and overlaid charts.
    Html,
    /// The comparison model as JSON.
    Json,
}

/// Report formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// Human-readable tables.
    Text,
    /// JSON.
    Json,
    /// One CSV row per interval.
    Csv,
    /// One self-contained HTML page with charts.
    Html,
}

/// `--stamp` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StampArg {
    /// 40 binary bytes at the start of every message.
    Binary,
    /// 58 printable bytes, found anywhere in a delivery.
    Text,
}

/// `--content` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ContentArg {
    /// Incompressible random bytes.
    Random,
    /// Zero bytes.
    Zeros,
    /// English-like words.
    Text,
}

/// `--io` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IoArg {
    /// epoll: a system call per send and per receive.
    Readiness,
    /// io_uring: each worker's sends and receives submitted together.
    Batched,
}

/// `--pacing` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PacingArg {
    /// Kernel timer on a 50 µs grid.
    Efficient,
    /// Timer, then spin the last 300 µs.
    Precise,
}

#[cfg(test)]
mod tests {
    /// clap's own consistency checks over every subcommand (unique argument names among
    /// them): a clash would otherwise panic only when that subcommand runs.
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
