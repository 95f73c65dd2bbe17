//! The receiving side: the consumer owns its connection and receiver link and reads them in
//! `recv` itself. Deliveries are settled in batches: the ids handed over are collected into a
//! range and settled with one disposition when nothing more is buffered (or the range is
//! long), so a busy consumer writes one disposition per read, not one per message.
//!
//! Cancel-safety (the runner drops `recv` whenever its tick fires): all state lives in the
//! struct, and a reconnection in progress is a future the consumer keeps, so a tick never
//! throws a half-made connection away.

use crate::Inner;
use crate::client::Endpoint;
use crate::conn::{Conn, Event, LinkError, LinkId};
use msgbench_core::driver::{Consumer, ConsumerSpec, Delivery, DriverError};
use msgbench_net::Backoff;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Most deliveries settled by one disposition.
const MAX_BATCH: u32 = 256;

/// What a consumer subscribes to, kept for reconnecting.
struct Sub {
    d: Arc<Inner>,
    ep: Arc<Endpoint>,
    id: u64,
    address: String,
    capabilities: Vec<String>,
    /// The link name of a shared subscription (a group on a `topic` address).
    link_name: Option<String>,
    meta: bool,
    /// The local address to connect from (`--source-addrs`), for every reconnection too.
    source: Option<std::net::IpAddr>,
}

impl Sub {
    async fn open(&self) -> Result<(Conn, LinkId), DriverError> {
        let d = &self.d;
        let mut conn = self
            .ep
            .open(&d.container_id("sub", self.id), self.source, d.timeout)
            .await?;
        let link = tokio::time::timeout(
            d.timeout,
            conn.attach(
                self.link_name.as_deref(),
                &self.address,
                &self.capabilities,
                true,
                false,
                d.plan.credit,
                self.meta,
            ),
        )
        .await
        .map_err(|_| {
            DriverError::Timeout(format!("attaching a receiver to `{}`", self.address))
        })??;
        Ok((conn, link))
    }
}

type Connecting = Pin<Box<dyn Future<Output = Result<(Conn, LinkId), DriverError>> + Send>>;

/// Subscribes (the first time synchronously, so errors reach the caller).
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
    let sub = Arc::new(Sub {
        id: spec.id as u64,
        address: d.plan.address_of(&spec.topic),
        capabilities,
        link_name,
        meta: spec.meta,
        source: spec.source,
        ep,
        d,
    });
    let live = sub.open().await?;
    if sub.link_name.is_some() && !live.0.shared_subs {
        warn_unshared(&sub);
    }
    Ok(Amqp10Consumer {
        label: format!("consumer {}", spec.id),
        sub,
        live: Some(live),
        opened: tokio::time::Instant::now(),
        connecting: None,
        backoff: Backoff::default(),
        range: None,
        refused: None,
    })
}

/// A queue group on a topic asks for a shared subscription, which a broker that does not
/// offer `SHARED-SUBS` may not honour: ActiveMQ Classic gives each consumer every message,
/// which the report would show as duplicates. Said once per run.
fn warn_unshared(sub: &Sub) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    sub.d.events.emit(
        msgbench_core::driver::DriverEventKind::Warning,
        format!(
            "{}: the broker does not offer shared subscriptions (no SHARED-SUBS in its open), \
             so the consumers of a queue group on topic `{}` may each get every message \
             (counted as duplicates); on ActiveMQ Classic use a queue (--address \
             'queue://{{topic}}') or a virtual topic for competing consumers",
            sub.ep.display(),
            sub.address
        ),
    );
}

/// The AMQP 1.0 consumer.
pub struct Amqp10Consumer {
    sub: Arc<Sub>,
    label: String,
    live: Option<(Conn, LinkId)>,
    /// When the live connection opened: one lost soon after counts as a failed attempt.
    opened: tokio::time::Instant,
    connecting: Option<Connecting>,
    backoff: Backoff,
    /// Delivery ids handed over and not yet settled: first, last.
    range: Option<(u32, u32)>,
    /// The broker refused this consumer for good (see [`LinkError::refusal`]): `recv` stops
    /// it with this instead of reconnecting to be refused again.
    refused: Option<String>,
}

impl Amqp10Consumer {
    /// Writes the disposition of the ids handed over.
    fn settle(&mut self) {
        if let (Some((first, last)), Some((conn, _))) = (self.range.take(), self.live.as_mut()) {
            conn.settle(first, last, self.sub.d.plan.on_receive);
        }
    }

    fn lost(&mut self, why: &LinkError) {
        self.range = None;
        if self.live.take().is_some() {
            self.sub.d.events.connection_lost(&self.label, &why.loss());
            self.backoff.lost_after(self.opened.elapsed());
            // As for producers: ActiveMQ Classic's `amqp:decode-error` on a connection that
            // worked is its shutdown, not a refusal.
            let worked = self.opened.elapsed() >= std::time::Duration::from_secs(1);
            if let Some(e) = why
                .refusal()
                .filter(|e| !(worked && e.condition == "amqp:decode-error"))
            {
                self.refused = Some(format!("the broker refuses for good ({e})"));
            }
        }
    }

    /// The next delivery; `None` once the broker refused this consumer for good.
    fn poll_delivery(&mut self, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        loop {
            if self.refused.is_some() {
                return Poll::Ready(None);
            }
            if let Some(c) = self.connecting.as_mut() {
                match c.as_mut().poll(cx) {
                    Poll::Ready(Ok(live)) => {
                        self.connecting = None;
                        self.live = Some(live);
                        self.opened = tokio::time::Instant::now();
                        let d = &self.sub.d;
                        d.events.reconnected(&self.label, self.sub.ep.display(), "");
                    }
                    Poll::Ready(Err(_)) => {
                        self.connecting = None;
                        self.backoff.failed();
                    }
                    Poll::Pending => return Poll::Pending,
                }
            }
            if self.live.is_none() {
                let sub = self.sub.clone();
                let wait = self.backoff.until();
                self.connecting = Some(Box::pin(async move {
                    tokio::time::sleep_until(wait).await;
                    sub.open().await
                }));
                continue;
            }
            // Settle what was handed over before waiting, or once the run is long.
            let ready = self.live.as_ref().is_some_and(|(c, _)| c.frame_ready());
            if self
                .range
                .is_some_and(|(first, last)| !ready || last.wrapping_sub(first) >= MAX_BATCH)
            {
                self.settle();
            }
            let Some((conn, _)) = self.live.as_mut() else {
                continue;
            };
            match conn.poll_event(cx, true) {
                Poll::Ready(Ok(Event::Delivery(r))) => {
                    if !r.settled {
                        self.range = match self.range {
                            Some((first, last)) if last.wrapping_add(1) == r.id => {
                                Some((first, r.id))
                            }
                            Some(_) => {
                                self.settle();
                                Some((r.id, r.id))
                            }
                            None => Some((r.id, r.id)),
                        };
                    }
                    let p = r.parts;
                    return Poll::Ready(Some(Delivery {
                        payload: p.body,
                        redelivered: p.redelivered,
                        meta: self.sub.meta.then(|| Box::new(p.meta)),
                    }));
                }
                // Settlements and brokerless link events do not concern a broker's consumer.
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => self.lost(&e),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Consumer for Amqp10Consumer {
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        match std::future::poll_fn(|cx| self.poll_delivery(cx)).await {
            Some(d) => Ok(Some(d)),
            None => Err(DriverError::Refused(
                self.refused.clone().unwrap_or_default(),
            )),
        }
    }

    async fn close(mut self) -> Result<(), DriverError> {
        self.settle();
        if let Some((mut conn, link)) = self.live.take() {
            let t = self.sub.d.timeout;
            conn.detach(link, t).await;
            conn.close(t).await;
        }
        Ok(())
    }
}
