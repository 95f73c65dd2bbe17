//! `msgbench serve`: an embedded server, standalone, until Ctrl-C, SIGTERM or SIGHUP. [`bind`] is the table of
//! how each server is bound from the flags; every server then runs the same way (its banner,
//! a status line every 10 s, a summary at the end), through `msgbench_serve::server::Server`.

use crate::cli::args::{GatewayArg, ServeArgs, ServerArg};
use anyhow::{Context, Result, anyhow};
use msgbench_driver_amqp::options::AmqpSection;
use msgbench_serve::amqp::{Sink, SinkConfig};
use msgbench_serve::amqp_proxy::{Proxy, ProxyConfig};
use msgbench_serve::http::HttpServer;
use msgbench_serve::mqtt::{Broker, BrokerConfig};
use msgbench_serve::server::{STATUS_EVERY, ServeError, Server, Serving, StatusLine, Stop};
use msgbench_serve::tls::tls_acceptor;
use msgbench_serve::ws::{Broadcast, BroadcastConfig};
use msgbench_serve::ws_gateway::{Outcome, Shape};
use std::process::ExitCode;

/// Runs the server; a status line every 10 s and a summary at the end unless `--quiet`.
pub fn run(args: ServeArgs) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async {
        let Bound {
            server,
            banner,
            what,
        } = bind(&args).await?;
        eprintln!("msgbench serve: {banner}");
        let status = server.status().map(|line| status_loop(args.quiet, line));
        // SIGTERM (how a container or a service manager stops it) and SIGHUP stop it as
        // Ctrl-C does: clients are told (WebSocket 1001, MQTT 5 DISCONNECT 0x8B) and the summary
        // is printed.
        let signals = msgbench_core::shutdown::Shutdown::new();
        signals.listen_for_signals();
        let stop = Box::pin(async move { signals.reached(1).await });
        let summary = server
            .serve(stop)
            .await
            .with_context(|| format!("{what} failed"));
        if let Some(s) = status {
            s.abort();
        }
        if let Ok(Some(s)) = &summary
            && !args.quiet
        {
            eprintln!("msgbench serve: {s}");
        }
        summary?;
        eprintln!("msgbench serve: stopped");
        Ok(ExitCode::SUCCESS)
    })
}

/// A server bound from the flags: what to say it is, and what to call it if it fails.
pub(super) struct Bound {
    pub server: Box<dyn Server>,
    pub banner: String,
    pub what: &'static str,
}

/// The table: how each server is bound from the flags.
async fn bind(args: &ServeArgs) -> Result<Bound> {
    match args.server {
        ServerArg::Mqtt => mqtt(args).await,
        ServerArg::AmqpSink => amqp_sink(args).await,
        ServerArg::AmqpProxy => amqp_proxy(args).await,
        ServerArg::Http => http(args).await,
        ServerArg::EcpEndpoint => super::serve_ecp::bind(args),
        ServerArg::Time => time(args).await,
        ServerArg::WsBroadcast => ws_broadcast(args).await,
    }
}

/// The TLS acceptor of `--tls-cert` and `--tls-key`, if given.
fn tls(args: &ServeArgs) -> Result<Option<msgbench_serve::tls::TlsAcceptor>> {
    match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => Ok(Some(tls_acceptor(c, k).map_err(anyhow::Error::msg)?)),
        _ => Ok(None),
    }
}

async fn mqtt(args: &ServeArgs) -> Result<Bound> {
    let tls = tls(args)?;
    let (scheme, default) = match tls {
        Some(_) => ("mqtts", "127.0.0.1:8883"),
        None => ("mqtt", "127.0.0.1:1883"),
    };
    let listen = args.listen.as_deref().unwrap_or(default);
    let mut broker = Broker::bind(listen, BrokerConfig::default())
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    if let Some(t) = tls {
        broker = broker.with_tls(t);
    }
    Ok(Bound {
        banner: format!(
            "MQTT 3.1.1/5 broker on {scheme}://{} (Ctrl-C to stop)",
            broker.local_addr()
        ),
        server: Box::new(broker),
        what: "broker",
    })
}

async fn amqp_sink(args: &ServeArgs) -> Result<Bound> {
    let tls = tls(args)?;
    let (scheme, default) = match tls {
        Some(_) => ("amqps", "127.0.0.1:5671"),
        None => ("amqp", "127.0.0.1:5672"),
    };
    let listen = args.listen.as_deref().unwrap_or(default);
    let config = SinkConfig {
        tls,
        ..SinkConfig::default()
    };
    let sink = Sink::bind(listen, config)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    Ok(Bound {
        banner: format!(
            "AMQP 0-9-1 sink on {scheme}://{} (counts and drops publishes; Ctrl-C to stop)",
            sink.local_addr()
        ),
        server: Box::new(sink),
        what: "sink",
    })
}

async fn amqp_proxy(args: &ServeArgs) -> Result<Bound> {
    let upstream = args
        .upstream
        .as_deref()
        .context("amqp-proxy needs --upstream amqp://HOST:PORT (or amqps://)")?;
    let tls = msgbench_core::scenario::TlsPlan {
        ca_file: args.ecp.ca_file.as_ref().map(Into::into),
        insecure: args.ecp.insecure,
        ..Default::default()
    };
    let config = ProxyConfig::parse(upstream, &tls).map_err(|e| anyhow!("--upstream: {e}"))?;
    let listen = args.listen.as_deref().unwrap_or("127.0.0.1:5673");
    let proxy = Proxy::bind(listen, config)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    Ok(Bound {
        banner: format!(
            "strict AMQP 0-9-1 proxy on amqp://{} to {} (Ctrl-C to stop)",
            proxy.local_addr(),
            msgbench_core::redact::url(upstream)
        ),
        server: Box::new(proxy),
        what: "proxy",
    })
}

async fn http(args: &ServeArgs) -> Result<Bound> {
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => Some(
            msgbench_serve::tls::tls_acceptor_alpn(c, k, &[b"h2", b"http/1.1"])
                .map_err(anyhow::Error::msg)?,
        ),
        _ => None,
    };
    let listen = args.listen.as_deref().unwrap_or("127.0.0.1:8080");
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let what = if tls.is_some() {
        "HTTP/1.1 + HTTP/2 (ALPN) server on https"
    } else {
        "HTTP/1.1 + h2c server on http"
    };
    let banner = format!(
        "{what}://{} (200 to every request; Ctrl-C to stop)",
        listener.local_addr()?
    );
    let mut server = HttpServer::new();
    if let Some(t) = tls {
        server = server.with_tls(t);
    }
    if let Some(d) = &args.delay {
        let d = msgbench_core::units::parse_duration(d).map_err(|e| anyhow!("--delay: {e}"))?;
        server = server.with_delay(d);
    }
    Ok(Bound {
        server: Box::new(msgbench_serve::http::Bound { server, listener }),
        banner,
        what: "server",
    })
}

async fn time(args: &ServeArgs) -> Result<Bound> {
    let listen = args.listen.as_deref().unwrap_or("127.0.0.1:7123");
    let socket = tokio::net::UdpSocket::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen} (UDP)"))?;
    Ok(Bound {
        banner: format!(
            "time reference on udp://{} (use --time-reference {0} on each segment; Ctrl-C to stop)",
            socket.local_addr()?
        ),
        server: Box::new(msgbench_serve::time::Reference { socket }),
        what: "time reference",
    })
}

/// Writes the server's status line every 10 s (unless `quiet`) until aborted.
fn status_loop(quiet: bool, mut line: StatusLine) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(STATUS_EVERY);
        tick.tick().await;
        loop {
            tick.tick().await;
            let l = line();
            if !quiet {
                eprintln!("msgbench serve: {l}");
            }
        }
    })
}

/// `serve ws-broadcast`: the broadcast server, or with `--gateway` the JSON gateway, relaying
/// what `--from` delivers.
async fn ws_broadcast(args: &ServeArgs) -> Result<Bound> {
    let tls = tls(args)?;
    let scheme = if tls.is_some() { "wss" } else { "ws" };
    let listen = args.listen.as_deref().unwrap_or("127.0.0.1:8080");
    let gateway = args.gateway.map(|g| match g {
        GatewayArg::Rango => Shape::Rango,
        GatewayArg::Envelope => Shape::Envelope,
    });
    let config = BroadcastConfig {
        tls,
        gateway,
        ..BroadcastConfig::default()
    };
    let server = Broadcast::bind(listen, config)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let from_scheme = args
        .from
        .as_deref()
        .and_then(|u| u.split_once("://"))
        .map(|(s, _)| s);
    // A gateway binds to rango's public keys unless told otherwise, in each protocol's syntax.
    let topic = args.topic.clone().unwrap_or_else(|| {
        match (gateway, from_scheme) {
            (None, _) => "msgbench",
            (Some(_), Some("nats" | "tls" | "nats+tls")) => "public.>",
            (Some(_), Some("mqtt" | "mqtts")) => "public/#",
            (Some(_), _) => "public.#",
        }
        .to_string()
    });
    let from = match &args.from {
        Some(url) => {
            let mut s = msgbench_core::scenario::Scenario {
                target: Some(url.clone()),
                ..Default::default()
            };
            // rango's exchange: peatio publishes its events to this topic exchange.
            s.drivers.put(&AmqpSection {
                exchange: args
                    .exchange
                    .clone()
                    .or_else(|| gateway.map(|_| "peatio.events.ranger".into())),
                exchange_type: args
                    .exchange_type
                    .clone()
                    .or_else(|| gateway.map(|_| "topic".into())),
                ..AmqpSection::default()
            });
            let plan =
                crate::registry::resolve(&s, 0).map_err(|e| anyhow::anyhow!("--from: {e}"))?;
            Some(plan)
        }
        None => None,
    };
    let what = match gateway {
        None => "WebSocket broadcast".to_string(),
        Some(shape) => format!("JSON WebSocket gateway ({shape:?} shape)"),
    };
    let exchange = match &from {
        Some(p) if p.scheme().starts_with("amqp") => {
            let amqp = p.drivers.get::<AmqpSection>()?;
            format!(" on {} exchange `{}`", amqp.exchange_type, amqp.exchange)
        }
        _ => String::new(),
    };
    let banner = format!(
        "{what} on {scheme}://{}{} (Ctrl-C to stop)",
        server.local_addr(),
        match &from {
            Some(p) => format!(
                ", relaying `{topic}`{exchange} from {}",
                p.redacted().target
            ),
            None if gateway.is_some() => ", nothing to relay (give --from URL)".into(),
            None => ", relaying what clients send".into(),
        }
    );
    Ok(Bound {
        server: Box::new(WsBroadcast {
            server,
            from,
            topic,
            gateway,
        }),
        banner,
        what: "server",
    })
}

/// The broadcast server (or gateway) with what it relays.
struct WsBroadcast {
    server: Broadcast,
    /// Where relayed messages come from (`--from`).
    from: Option<msgbench_core::scenario::RunPlan>,
    topic: String,
    gateway: Option<Shape>,
}

impl Server for WsBroadcast {
    fn status(&self) -> Option<StatusLine> {
        use std::sync::atomic::Ordering::Relaxed;
        let read = self.server.stats();
        Some(msgbench_serve::server::counts_line(move || {
            msgbench_serve::server::Counts {
                connections: read.connections_current.load(Relaxed),
                connections_total: read.connections_total.load(Relaxed),
                messages_in: read.messages_in.load(Relaxed),
                messages_out: read.frames_out.load(Relaxed),
            }
        }))
    }

    /// Relays beside the server until `stop`, or until the relay fails (broker unreachable, bad
    /// URL): the server stops too and the relay's error is the command's.
    fn serve(self: Box<Self>, stop: Stop) -> Serving {
        Box::pin(async move {
            let WsBroadcast {
                server,
                from,
                topic,
                gateway,
            } = *self;
            let stats = server.stats();
            let (stopping, relaying, failure) = relay_beside(&server, from, topic, gateway, stop);
            server.run(stopping).await?;
            if let Some(r) = relaying {
                let _ = r.await;
            }
            if let Some(e) = failure.lock().expect("failure slot").take() {
                return Err(ServeError::Failed(format!("{e:#}")));
            }
            Ok(Some(match gateway {
                Some(_) => gateway_summary(&stats),
                None => broadcast_summary(&stats),
            }))
        })
    }
}

/// What the broadcast relayed, and what clients that fell behind skipped (they see it as
/// loss; this says it was theirs, not the publisher's).
fn broadcast_summary(stats: &msgbench_serve::ws::BroadcastStats) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let n = |c: &std::sync::atomic::AtomicU64| c.load(Relaxed);
    let defaults = msgbench_serve::ws::BroadcastConfig::default();
    format!(
        "{} messages in, {} frames out; {} skipped by clients that fell behind (more than {} \
         messages or {} MiB queued for them)",
        n(&stats.messages_in),
        n(&stats.frames_out),
        n(&stats.lagged),
        defaults.queue,
        defaults.queue_bytes >> 20,
    )
}

/// What the gateway relayed and dropped, and why.
fn gateway_summary(stats: &msgbench_serve::ws::BroadcastStats) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let n = |c: &std::sync::atomic::AtomicU64| c.load(Relaxed);
    format!(
        "{} messages in, {} frames out; dropped: {} not JSON, {} on no public stream \
         (private.*), {} to unsubscribed clients, {} to clients that fell behind; {} requests \
         from clients ({} refused)",
        n(&stats.messages_in),
        n(&stats.frames_out),
        n(&stats.rejected),
        n(&stats.ignored),
        n(&stats.unsubscribed),
        n(&stats.lagged),
        n(&stats.requests),
        n(&stats.bad_requests),
    )
}

/// The slot a failed relay leaves its error in.
type FailureSlot = std::sync::Arc<std::sync::Mutex<Option<anyhow::Error>>>;

/// Starts relaying `from` into `server` (plain or through the gateway); the server's stop
/// signal, which fires at `stop` or when the relay fails; the relay's task; its failure.
fn relay_beside(
    server: &Broadcast,
    from: Option<msgbench_core::scenario::RunPlan>,
    topic: String,
    gateway: Option<Shape>,
    stop: Stop,
) -> (
    impl std::future::Future<Output = ()> + Send + 'static,
    Option<tokio::task::JoinHandle<()>>,
    FailureSlot,
) {
    let relay = server.relay();
    let mut gw = gateway.map(|_| server.gateway_relay());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<anyhow::Error>();
    let relaying = from.map(|plan| {
        let mut stop_rx = stop_rx.clone();
        tokio::spawn(async move {
            let stopped = async move {
                let _ = stop_rx.changed().await;
            };
            let r = match gw.as_mut() {
                None => {
                    crate::registry::relay(
                        &plan,
                        &topic,
                        false,
                        |m| relay.send(&m.payload),
                        stopped,
                    )
                    .await
                }
                Some(gw) => {
                    // rango logs each body it cannot parse; here the first is explained and
                    // all are counted (`rejected` in the summary).
                    let mut told = false;
                    let each = |m: &msgbench_core::driver::Delivery| {
                        // Drivers that know no key per message (ws://, zmq://): the --topic.
                        let key = m.meta.as_ref().and_then(|x| x.topic.as_deref());
                        let key = key.unwrap_or(&topic);
                        if gw.send(key, &m.payload) == Outcome::Rejected && !told {
                            told = true;
                            eprintln!(
                                "msgbench serve: dropped a message on `{key}`: its body is not \
                                 JSON (UTF-8); such messages are counted as rejected, not sent"
                            );
                        }
                    };
                    crate::registry::relay(&plan, &topic, true, each, stopped).await
                }
            };
            if let Err(e) = r {
                let _ = failed_tx.send(e);
            }
        })
    });
    let failure = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen = failure.clone();
    let stopping = async move {
        tokio::select! {
            () = stop => {}
            Ok(e) = failed_rx => { *seen.lock().expect("failure slot") = Some(e); }
        }
        let _ = stop_tx.send(true);
    };
    (stopping, relaying, failure)
}
