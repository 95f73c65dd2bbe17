//! `msgbench serve`: an embedded server, standalone, until Ctrl-C.

use crate::cli::args::{GatewayArg, ServeArgs, ServerArg};
use anyhow::{Context, Result};
use msgbench_serve::amqp::{Sink, SinkConfig};
use msgbench_serve::mqtt::{Broker, BrokerConfig};
use msgbench_serve::tls::tls_acceptor;
use msgbench_serve::ws::{Broadcast, BroadcastConfig};
use msgbench_serve::ws_gateway::{Outcome, Shape};
use std::process::ExitCode;
use std::time::Duration;

/// Runs the server; a status line every 10 s unless `--quiet`.
pub fn run(args: ServeArgs) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    rt.block_on(async {
        match args.server {
            ServerArg::Mqtt => {
                let tls = match (&args.tls_cert, &args.tls_key) {
                    (Some(c), Some(k)) => Some(tls_acceptor(c, k).map_err(anyhow::Error::msg)?),
                    _ => None,
                };
                let listen = args
                    .listen
                    .as_deref()
                    .unwrap_or(if tls.is_some() { "127.0.0.1:8883" } else { "127.0.0.1:1883" });
                let mut broker = Broker::bind(listen, BrokerConfig::default())
                    .await
                    .with_context(|| format!("cannot listen on {listen}"))?;
                let scheme = if tls.is_some() { "mqtts" } else { "mqtt" };
                if let Some(t) = tls {
                    broker = broker.with_tls(t);
                }
                eprintln!(
                    "msgbench serve: MQTT 3.1.1/5 broker on {scheme}://{} (Ctrl-C to stop)",
                    broker.local_addr()
                );
                let stats = broker.stats();
                let status = status_loop(args.quiet, move || {
                    let s = stats.snapshot();
                    (s.connections_current, s.connections_total, s.messages_in, s.messages_out)
                });
                broker.run(stop).await.context("broker failed")?;
                status.abort();
            }
            ServerArg::AmqpSink => {
                let tls = match (&args.tls_cert, &args.tls_key) {
                    (Some(c), Some(k)) => Some(tls_acceptor(c, k).map_err(anyhow::Error::msg)?),
                    _ => None,
                };
                let scheme = if tls.is_some() { "amqps" } else { "amqp" };
                let default = if tls.is_some() { "127.0.0.1:5671" } else { "127.0.0.1:5672" };
                let listen = args.listen.as_deref().unwrap_or(default);
                let config = SinkConfig {
                    tls,
                    ..SinkConfig::default()
                };
                let sink = Sink::bind(listen, config)
                    .await
                    .with_context(|| format!("cannot listen on {listen}"))?;
                eprintln!(
                    "msgbench serve: AMQP 0-9-1 sink on {scheme}://{} (counts and drops publishes; Ctrl-C to stop)",
                    sink.local_addr()
                );
                let stats = sink.stats();
                let status = status_loop(args.quiet, move || {
                    let s = stats.snapshot();
                    (s.connections_current, s.connections_total, s.messages, s.confirms)
                });
                sink.run(stop).await.context("sink failed")?;
                status.abort();
            }
            ServerArg::AmqpProxy => {
                let upstream = args
                    .upstream
                    .as_deref()
                    .context("amqp-proxy needs --upstream amqp://HOST:PORT (or amqps://)")?;
                let tls = msgbench_core::scenario::TlsPlan {
                    ca_file: args.ecp.ca_file.as_ref().map(Into::into),
                    insecure: args.ecp.insecure,
                    ..Default::default()
                };
                let config = msgbench_serve::amqp_proxy::ProxyConfig::parse(upstream, &tls)
                    .map_err(|e| anyhow::anyhow!("--upstream: {e}"))?;
                let listen = args.listen.as_deref().unwrap_or("127.0.0.1:5673");
                let proxy = msgbench_serve::amqp_proxy::Proxy::bind(listen, config)
                    .await
                    .with_context(|| format!("cannot listen on {listen}"))?;
                eprintln!(
                    "msgbench serve: strict AMQP 0-9-1 proxy on amqp://{} to {} (Ctrl-C to stop)",
                    proxy.local_addr(),
                    msgbench_core::redact::url(upstream)
                );
                let stats = proxy.stats();
                proxy.run(stop).await;
                if !args.quiet {
                    use std::sync::atomic::Ordering::Relaxed;
                    eprintln!(
                        "msgbench serve: {} connections relayed, {} failed, {} bytes held (sent before open-ok)",
                        stats.relayed.load(Relaxed),
                        stats.failed.load(Relaxed),
                        stats.held_bytes.load(Relaxed)
                    );
                }
            }
            ServerArg::Http => {
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
                eprintln!(
                    "msgbench serve: {what}://{} (200 to every request; Ctrl-C to stop)",
                    listener.local_addr()?
                );
                let mut server = msgbench_driver_http::server::HttpServer::new();
                if let Some(t) = tls {
                    server = server.with_tls(t);
                }
                if let Some(d) = &args.delay {
                    let d = msgbench_core::units::parse_duration(d)
                        .map_err(|e| anyhow::anyhow!("--delay: {e}"))?;
                    server = server.with_delay(d);
                }
                let counts = server.counts();
                let status = status_loop(args.quiet, move || {
                    use std::sync::atomic::Ordering::Relaxed;
                    let r = counts.requests.load(Relaxed);
                    (0, 0, r, counts.http2_requests.load(Relaxed))
                });
                server.serve(listener, stop).await;
                status.abort();
            }
            ServerArg::EcpEndpoint => super::serve_ecp::run(&args, stop).await?,
            ServerArg::Time => {
                let listen = args.listen.as_deref().unwrap_or("127.0.0.1:7123");
                let socket = tokio::net::UdpSocket::bind(listen)
                    .await
                    .with_context(|| format!("cannot listen on {listen} (UDP)"))?;
                eprintln!(
                    "msgbench serve: time reference on udp://{} (use --time-reference {0} on each segment; Ctrl-C to stop)",
                    socket.local_addr()?
                );
                let answered = msgbench_serve::time::serve(socket, stop).await?;
                if !args.quiet {
                    eprintln!("msgbench serve: answered {answered} probes");
                }
            }
            ServerArg::WsBroadcast => ws_broadcast(&args, stop).await?,
        }
        eprintln!("msgbench serve: stopped");
        Ok(ExitCode::SUCCESS)
    })
}

/// Every 10 s: connections now and in total, and two message rates (in, out or confirmed).
fn status_loop(
    quiet: bool,
    read: impl Fn() -> (u64, u64, u64, u64) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        tick.tick().await;
        let mut last = read();
        loop {
            tick.tick().await;
            let now = read();
            if !quiet {
                eprintln!(
                    "msgbench serve: {} connections ({} total), {:.0} msgs/s in, {:.0} msgs/s out/confirmed",
                    now.0,
                    now.1,
                    (now.2 - last.2) as f64 / 10.0,
                    (now.3 - last.3) as f64 / 10.0,
                );
            }
            last = now;
        }
    })
}

/// `serve ws-broadcast`: the broadcast server, or with `--gateway` the JSON gateway, relaying
/// what `--from` delivers until `stop` (or until the relay fails: its error is the command's).
async fn ws_broadcast(args: &ServeArgs, stop: impl Future<Output = ()> + Send) -> Result<()> {
    use std::sync::atomic::Ordering::Relaxed;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => Some(tls_acceptor(c, k).map_err(anyhow::Error::msg)?),
        _ => None,
    };
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
            s.amqp.exchange = args
                .exchange
                .clone()
                .or_else(|| gateway.map(|_| "peatio.events.ranger".into()));
            s.amqp.exchange_type = args
                .exchange_type
                .clone()
                .or_else(|| gateway.map(|_| "topic".into()));
            let plan = msgbench_core::scenario::plan::resolve(&s, 0)
                .map_err(|e| anyhow::anyhow!("--from: {e}"))?;
            Some(plan)
        }
        None => None,
    };
    let what = match gateway {
        None => "WebSocket broadcast".to_string(),
        Some(shape) => format!("JSON WebSocket gateway ({shape:?} shape)"),
    };
    let exchange = match &from {
        Some(p) if p.scheme().starts_with("amqp") => format!(
            " on {} exchange `{}`",
            p.amqp.exchange_type, p.amqp.exchange
        ),
        _ => String::new(),
    };
    eprintln!(
        "msgbench serve: {what} on {scheme}://{}{} (Ctrl-C to stop)",
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
    let stats = server.stats();
    let read = stats.clone();
    let status = status_loop(args.quiet, move || {
        (
            read.connections_current.load(Relaxed),
            read.connections_total.load(Relaxed),
            read.messages_in.load(Relaxed),
            read.frames_out.load(Relaxed),
        )
    });
    // The relay runs beside the server; if it fails (broker unreachable, bad URL), the server
    // stops too and the error is the command's.
    let relay = server.relay();
    let mut gw = gateway.map(|_| server.gateway_relay());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<anyhow::Error>();
    let relaying = from.map(|plan| {
        let topic = topic.clone();
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
    server.run(stopping).await.context("server failed")?;
    status.abort();
    if let Some(r) = relaying {
        let _ = r.await;
    }
    if gateway.is_some() && !args.quiet {
        let n = |c: &std::sync::atomic::AtomicU64| c.load(Relaxed);
        eprintln!(
            "msgbench serve: {} messages in, {} frames out; dropped: {} not JSON, {} on no public \
             stream (private.*), {} to unsubscribed clients, {} to clients that fell behind; {} \
             requests from clients ({} refused)",
            n(&stats.messages_in),
            n(&stats.frames_out),
            n(&stats.rejected),
            n(&stats.ignored),
            n(&stats.unsubscribed),
            n(&stats.lagged),
            n(&stats.requests),
            n(&stats.bad_requests),
        );
    }
    if let Some(e) = failure.lock().expect("failure slot").take() {
        return Err(e);
    }
    Ok(())
}
