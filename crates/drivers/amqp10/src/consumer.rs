//! The receiving side: a task per consumer owns the connection and the receiver link, hands
//! deliveries to the runner in batches through a bounded channel and settles them after the
//! hand-over; it reconnects on its own when the connection or the link is lost.
//!
//! Why a task: the runner polls `recv` inside `select!` and drops it whenever its tick timer
//! fires; reading from a channel is cancel-safe by construction, whatever the AMQP client does
//! inside its receive. It also lets one disposition settle a whole batch of deliveries.

use crate::client::{Client, Endpoint, Receiver};
use crate::{Backoff, Inner};
use msgbench_core::driver::{Consumer, ConsumerSpec, Delivery, DriverError};
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Most deliveries handed over (and settled) at once.
const MAX_BATCH: usize = 256;

/// What a consumer subscribes to, kept for reconnecting.
struct Sub {
    d: Arc<Inner>,
    ep: Arc<Endpoint>,
    id: u64,
    label: String,
    address: String,
    capabilities: Vec<String>,
    /// The link name of a shared subscription (a group on a `topic` address).
    link_name: Option<String>,
    meta: bool,
}

struct Live {
    client: Client,
    receiver: Receiver,
}

impl Sub {
    async fn open(&self) -> Result<Live, DriverError> {
        let d = &self.d;
        let mut client =
            Client::connect(&self.ep, &d.container_id("sub", self.id), None, d.timeout).await?;
        let receiver = tokio::time::timeout(
            d.timeout,
            client.receiver(
                &self.address,
                &self.capabilities,
                d.plan.credit,
                self.link_name.as_deref(),
            ),
        )
        .await
        .map_err(|_| {
            DriverError::Timeout(format!("attaching a receiver to `{}`", self.address))
        })??;
        Ok(Live { client, receiver })
    }

    /// Receives until `stop` fires or the consumer is dropped, reconnecting when needed.
    async fn run(
        self,
        mut live: Live,
        tx: mpsc::Sender<Vec<Delivery>>,
        mut stop: oneshot::Receiver<()>,
    ) {
        let mut backoff = Backoff::new();
        loop {
            let why = match self.pump(&mut live, &tx, &mut stop).await {
                Ok(()) => {
                    live.receiver.close(self.d.timeout).await;
                    live.client.close(self.d.timeout).await;
                    return;
                }
                Err(why) => why,
            };
            self.d.events.connection_lost(&self.label, &why);
            drop(live);
            live = loop {
                tokio::select! {
                    _ = &mut stop => return,
                    () = backoff.wait() => {}
                }
                let attempt = tokio::select! {
                    _ = &mut stop => return,
                    r = self.open() => r,
                };
                match attempt {
                    Ok(l) => {
                        backoff.reset();
                        self.d
                            .events
                            .reconnected(&self.label, self.ep.display(), "");
                        break l;
                    }
                    Err(_) => backoff.failed(),
                }
            };
        }
    }

    /// Moves deliveries to the runner and settles them. `Ok` when told to stop (or nobody
    /// listens any more), `Err(why)` when the link or connection failed.
    async fn pump(
        &self,
        live: &mut Live,
        tx: &mpsc::Sender<Vec<Delivery>>,
        stop: &mut oneshot::Receiver<()>,
    ) -> Result<(), String> {
        let how = self.d.plan.on_receive;
        let max = MAX_BATCH.min((self.d.plan.credit as usize / 2).max(1));
        loop {
            let first = tokio::select! {
                _ = &mut *stop => return Ok(()),
                r = live.receiver.recv(self.meta) => r?,
            };
            let mut batch = Vec::with_capacity(max.min(16));
            let mut tokens = Vec::with_capacity(max.min(16));
            let mut failed = None;
            let mut take = |r: crate::client::Received| {
                tokens.push(r.token);
                batch.push(Delivery {
                    payload: r.body,
                    redelivered: r.redelivered,
                    meta: self.meta.then(|| Box::new(r.meta)),
                });
            };
            take(first);
            let mut n = 1;
            while n < max {
                match live.receiver.try_recv(self.meta).await {
                    Some(Ok(r)) => take(r),
                    Some(Err(why)) => {
                        failed = Some(why);
                        break;
                    }
                    None => break,
                }
                n += 1;
            }
            tokio::select! {
                _ = &mut *stop => return Ok(()),
                sent = tx.send(batch) => if sent.is_err() { return Ok(()) },
            }
            live.receiver.settle(tokens, how).await?;
            if let Some(why) = failed {
                return Err(why);
            }
        }
    }
}

/// Subscribes (the first time synchronously, so errors reach the caller) and starts the task.
pub(crate) async fn start(
    d: Arc<Inner>,
    spec: &ConsumerSpec,
) -> Result<Amqp10Consumer, DriverError> {
    let ep = match &spec.target {
        Some(url) => Arc::new(Endpoint::parse(url, &d.tls)?),
        None => d.ep.clone(),
    };
    let mut capabilities = d.plan.capabilities.clone();
    let link_name = match &spec.group {
        Some(g) if capabilities.iter().any(|c| c == "topic") => {
            for c in ["shared", "global"] {
                if !capabilities.iter().any(|x| x == c) {
                    capabilities.push(c.to_string());
                }
            }
            Some(g.clone())
        }
        _ => None,
    };
    let sub = Sub {
        id: spec.id as u64,
        label: format!("consumer {}", spec.id),
        address: d.plan.address_of(&spec.topic),
        capabilities,
        link_name,
        meta: spec.meta,
        ep,
        d,
    };
    let live = sub.open().await?;
    let (tx, rx) = mpsc::channel(4);
    let (stop_tx, stop_rx) = oneshot::channel();
    let timeout = sub.d.timeout;
    let task = tokio::spawn(sub.run(live, tx, stop_rx));
    Ok(Amqp10Consumer {
        rx,
        buf: VecDeque::new(),
        stop: Some(stop_tx),
        task: Some(task),
        timeout,
    })
}

/// The AMQP 1.0 consumer: reads what its task received.
pub struct Amqp10Consumer {
    rx: mpsc::Receiver<Vec<Delivery>>,
    buf: VecDeque<Delivery>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    timeout: std::time::Duration,
}

impl Consumer for Amqp10Consumer {
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        loop {
            if let Some(d) = self.buf.pop_front() {
                return Ok(Some(d));
            }
            match self.rx.recv().await {
                Some(batch) => self.buf.extend(batch),
                None => return Ok(None),
            }
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            // Detach and close take at most a timeout each.
            let _ = tokio::time::timeout(self.timeout * 2 + self.timeout / 2, t).await;
        }
        Ok(())
    }
}

impl Drop for Amqp10Consumer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}
