//! The live page of a running benchmark (`msgbench run --dashboard`).
//!
//! The run hands every record it writes to a [`LiveFeed`] (a bounded channel: sending never
//! waits; when the server falls behind, records are dropped and counted, the benchmark is never
//! slowed). The server's ingest task turns `interval` records into chart rows
//! ([`crate::frame::FrameBuilder`], plus host figures sampled from `/proc`), keeps them in a
//! [`crate::series::Downsampler`] and broadcasts each to the connected pages as a server-sent
//! event.
//!
//! # Event stream (`GET /api/live/events`)
//! - `hello`: everything so far: run metadata, the [`crate::series::Schema`], the downsampled
//!   points (complete buckets, the pending one, the stride), recent events, totals, and the end
//!   if the run is over. Sent first on every connection, and again to everyone when `begin`
//!   arrives; a page replaces all it holds with it.
//! - `point`: one raw row (the page folds it into its own copy of the downsampler) and totals.
//! - `event`: a run event (connected, warning, phase...).
//! - `end`: the run is over: duration, interruption, final integrity account, warnings.
//!
//! A page that falls more than [`BACKLOG`] messages behind has its stream closed; the browser
//! reconnects and resynchronises from a new `hello`.

mod hub;

pub use hub::{Hub, Totals};

use crate::DashboardError;
use crate::auth::Access;
use crate::server::{self, ServerHandle};
use axum::Router;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::stream::{self, Stream, StreamExt};
use msgbench_report::Record;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Records queued between the run and the server before new ones are dropped (a few minutes
/// of intervals plus bursts of events).
pub const FEED_CAPACITY: usize = 4096;

/// Messages a page may be behind before its stream is closed (it reconnects and resyncs).
pub const BACKLOG: usize = 1024;

/// The run's side of the live dashboard: hands records to the server without waiting.
#[derive(Clone, Debug)]
pub struct LiveFeed {
    tx: tokio::sync::mpsc::Sender<Record>,
    dropped: Arc<AtomicU64>,
}

impl LiveFeed {
    /// Queues a copy of `record` for the server; if the queue is full (or the server is gone)
    /// the record is dropped and counted. Never blocks.
    pub fn send(&self, record: &Record) {
        // Reserve first: a full queue costs no copy of the record.
        match self.tx.try_reserve() {
            Ok(slot) => slot.send(record.clone()),
            Err(_) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Records dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// A live dashboard server.
pub struct LiveDashboard {
    server: ServerHandle,
    feed: LiveFeed,
    url: String,
}

#[derive(Clone)]
struct LiveState {
    hub: Arc<Hub>,
    access: Access,
}

impl LiveDashboard {
    /// Binds `addr` and starts serving from a thread of its own. `token` is required of every
    /// request when given; without one, only a loopback address is accepted (see
    /// [`crate::auth`]).
    ///
    /// # Errors
    /// A bad or unavailable address, an unusable token.
    pub fn start(addr: &str, token: Option<&str>) -> Result<Self, DashboardError> {
        let (listener, access) = server::bind(addr, token)?;
        let hub = Arc::new(Hub::new(crate::series::DEFAULT_CAP));
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Record>(FEED_CAPACITY);
        let state = LiveState {
            hub: hub.clone(),
            access: access.clone(),
        };
        let app = server::finish(
            Router::new()
                .route("/", get(live_page))
                .route("/api/live/events", get(events))
                .route("/api/live/state", get(snapshot))
                .with_state(state),
            &access,
        );
        let server = ServerHandle::spawn(listener, app, move || {
            tokio::spawn(async move {
                let mut sampler = crate::sysstat::Sampler::new();
                // The first sample only sets the CPU baseline for the next.
                let _ = sampler.sample();
                while let Some(r) = rx.recv().await {
                    hub.apply(&r, &mut sampler);
                }
            });
        })?;
        Ok(LiveDashboard {
            url: server::url_for(server.local_addr()),
            server,
            feed: LiveFeed {
                tx,
                dropped: Arc::new(AtomicU64::new(0)),
            },
        })
    }

    /// The URL of the live page (never with the token: see [`crate::auth`]).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The run's handle for sending records.
    pub fn feed(&self) -> LiveFeed {
        self.feed.clone()
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.server.local_addr()
    }

    /// Stops the server (tests; a CLI run simply ends with the process).
    pub fn stop(self) {
        self.server.stop();
    }
}

async fn live_page(State(s): State<LiveState>) -> Response {
    server::page(server::LIVE_PAGE, &s.access)
}

/// The `hello` payload on its own, as JSON (for scripts and tests).
async fn snapshot(State(s): State<LiveState>) -> Response {
    let (hello, _rx) = s.hub.subscribe();
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        hello.to_string(),
    )
        .into_response()
}

async fn events(State(s): State<LiveState>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (hello, rx) = s.hub.subscribe();
    let first = stream::once(async move { Ok(Event::default().event("hello").data(&*hello)) });
    let rest = stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(m) => Some((Ok(Event::default().event(m.kind).data(&*m.data)), rx)),
            // Lagged: end the stream; the browser reconnects and gets a fresh `hello`.
            Err(_) => None,
        }
    });
    Sse::new(first.chain(rest)).keep_alive(KeepAlive::default())
}
