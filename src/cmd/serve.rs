//! `msgbench serve`: an embedded server, standalone, until Ctrl-C.

use crate::cli::args::{ServeArgs, ServerArg};
use anyhow::{Context, Result, bail};
use msgbench_serve::amqp::{Sink, SinkConfig, tls_acceptor};
use msgbench_serve::mqtt::{Broker, BrokerConfig};
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
                if args.tls_cert.is_some() {
                    bail!("the MQTT broker has no TLS listener yet (--tls-cert is for amqp-sink)");
                }
                let listen = args.listen.as_deref().unwrap_or("127.0.0.1:1883");
                let broker = Broker::bind(listen, BrokerConfig::default())
                    .await
                    .with_context(|| format!("cannot listen on {listen}"))?;
                eprintln!(
                    "msgbench serve: MQTT 3.1.1/5 broker on mqtt://{} (Ctrl-C to stop)",
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
