//! The HTTP side shared by the live page and the history: binding (loopback by default, a
//! token required elsewhere), the embedded front-end assets, and a server thread of its own.
//!
//! The server runs on its own thread with a single-threaded runtime, not on the benchmark's
//! runtime: serving a page never takes a worker from producers and consumers, and the server
//! outlives the benchmark runtime's shutdown until the process ends (or [`ServerHandle::stop`]).

use crate::DashboardError;
use crate::auth::{self, Access};
use axum::Router;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};

/// One embedded front-end file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

macro_rules! asset {
    ($name:literal, $ty:literal) => {
        Asset {
            name: $name,
            content_type: $ty,
            body: include_str!(concat!("../assets/", $name)),
        }
    };
}

/// Scripts and styles (pages are served by [`page`]). uPlot is vendored from its npm package
/// in the report crate (MIT, `crates/report/assets/uplot/LICENSE`); nothing is built or fetched.
const ASSETS: &[Asset] = &[
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("charts.js", "text/javascript; charset=utf-8"),
    asset!("live.js", "text/javascript; charset=utf-8"),
    asset!("history.js", "text/javascript; charset=utf-8"),
    // The one vendored copy of uPlot, in the report crate (its HTML reports inline it).
    Asset {
        name: "vendor/uplot/uPlot.iife.min.js",
        content_type: "text/javascript; charset=utf-8",
        body: msgbench_report::html::UPLOT_JS,
    },
    Asset {
        name: "vendor/uplot/uPlot.min.css",
        content_type: "text/css; charset=utf-8",
        body: msgbench_report::html::UPLOT_CSS,
    },
    Asset {
        name: "vendor/uplot/LICENSE",
        content_type: "text/plain; charset=utf-8",
        body: msgbench_report::html::UPLOT_LICENSE,
    },
];

/// The pages; `{{Q}}` in them becomes the token query (`?token=...` or nothing), so the assets
/// they load carry the token too.
pub(crate) const LIVE_PAGE: &str = include_str!("../assets/live.html");
pub(crate) const RUNS_PAGE: &str = include_str!("../assets/runs.html");
pub(crate) const RUN_PAGE: &str = include_str!("../assets/run.html");
pub(crate) const COMPARE_PAGE: &str = include_str!("../assets/compare.html");

/// A page with the token query filled in.
pub(crate) fn page(template: &'static str, access: &Access) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        template.replace("{{Q}}", &access.query_suffix()),
    )
        .into_response()
}

async fn asset(Path(path): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == path) {
        Some(a) => (
            [
                (header::CONTENT_TYPE, a.content_type),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            a.body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    }
}

/// Adds the asset route and the token check (on every route) to `app`.
pub(crate) fn finish(app: Router, access: &Access) -> Router {
    app.route("/assets/{*path}", get(asset))
        .layer(axum::middleware::from_fn_with_state(
            access.clone(),
            auth::require,
        ))
}

/// Resolves `addr` (`127.0.0.1:0`, `[::1]:8080`, `localhost:9000`, `0.0.0.0:8080`), settles
/// who may see the server there ([`Access::for_address`]: a non-loopback address without a
/// token is refused *before* anything listens on it) and binds its first address.
pub fn bind(addr: &str, token: Option<&str>) -> Result<(TcpListener, Access), DashboardError> {
    let bad = |m: String| DashboardError::Address {
        addr: addr.to_string(),
        message: m,
    };
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| bad(format!("{e} (expected HOST:PORT, e.g. 127.0.0.1:8080)")))?
        .collect();
    let first = *addrs
        .first()
        .ok_or_else(|| bad("resolves to no address".into()))?;
    let access = Access::for_address(&first, token)?;
    let l = TcpListener::bind(first).map_err(|e| bad(format!("cannot listen: {e}")))?;
    l.set_nonblocking(true)
        .map_err(|e| bad(format!("cannot listen: {e}")))?;
    Ok((l, access))
}

/// The URL to print for a server on `local` (a wildcard address is shown as this host's
/// loopback address, which reaches it). It never holds the token: printed URLs end up in
/// terminals, CI logs and shell history (see [`crate::auth`]).
pub fn url_for(local: SocketAddr) -> String {
    let host = match local.ip() {
        ip if ip.is_unspecified() && local.is_ipv4() => "127.0.0.1".to_string(),
        ip if ip.is_unspecified() => "[::1]".to_string(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        std::net::IpAddr::V4(v4) => v4.to_string(),
    };
    format!("http://{host}:{}/", local.port())
}

/// A server running on its own thread.
pub struct ServerHandle {
    local: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerHandle {
    /// Serves `app` on `listener` from a new thread. `setup` runs on the server's runtime first
    /// (to spawn the tasks the app needs).
    pub fn spawn(
        listener: TcpListener,
        app: Router,
        setup: impl FnOnce() + Send + 'static,
    ) -> Result<Self, DashboardError> {
        let local = listener.local_addr().map_err(DashboardError::Io)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(DashboardError::Io)?;
        let thread = std::thread::Builder::new()
            .name("msgbench-dashboard".into())
            .spawn(move || {
                rt.block_on(async move {
                    setup();
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            eprintln!("msgbench: dashboard: {e}");
                            return;
                        }
                    };
                    // Stopping drops the server and, with the runtime, every open connection:
                    // event streams never end by themselves, so waiting for them would hang.
                    tokio::select! {
                        served = axum::serve(listener, app) => {
                            if let Err(e) = served {
                                eprintln!("msgbench: dashboard stopped: {e}");
                            }
                        }
                        _ = stopped => {}
                    }
                });
            })
            .map_err(DashboardError::Io)?;
        Ok(ServerHandle {
            local,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Stops serving (open connections are closed) and waits for the thread.
    pub fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Blocks until the server ends (it ends only by [`ServerHandle::stop`] from elsewhere or
    /// an error: this is for `msgbench dashboard`, which serves until killed).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
