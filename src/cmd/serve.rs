//! `msgbench serve`: an embedded server, standalone, until Ctrl-C.

use crate::cli::args::{ServeArgs, ServerArg};
use anyhow::{Context, Result};
use msgbench_serve::mqtt::{Broker, BrokerConfig};
use std::process::ExitCode;
use std::time::Duration;

/// Runs the server; a status line every 10 s unless `--quiet`.
pub fn run(args: ServeArgs) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async {
        match args.server {
            ServerArg::Mqtt => {
                let broker = Broker::bind(&args.listen, BrokerConfig::default())
                    .await
                    .with_context(|| format!("cannot listen on {}", args.listen))?;
                eprintln!(
                    "msgbench serve: MQTT 3.1.1/5 broker on mqtt://{} (Ctrl-C to stop)",
                    broker.local_addr()
                );
                let stats = broker.stats();
                let quiet = args.quiet;
                let status = tokio::spawn(async move {
                    let mut tick = tokio::time::interval(Duration::from_secs(10));
                    tick.tick().await;
                    let mut last = stats.snapshot();
                    loop {
                        tick.tick().await;
                        let s = stats.snapshot();
                        if !quiet {
                            eprintln!(
                                "msgbench serve: {} connections ({} total), {:.0} msgs/s in, {:.0} msgs/s out",
                                s.connections_current,
                                s.connections_total,
                                (s.messages_in - last.messages_in) as f64 / 10.0,
                                (s.messages_out - last.messages_out) as f64 / 10.0,
                            );
                        }
                        last = s;
                    }
                });
                broker
                    .run(async {
                        let _ = tokio::signal::ctrl_c().await;
                    })
                    .await
                    .context("broker failed")?;
                status.abort();
                eprintln!("msgbench serve: stopped");
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}
