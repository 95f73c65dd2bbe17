//! The history dashboard (`msgbench dashboard`): the runs list with search, a page per run
//! rendered from its results file, and the comparison of two runs.
//!
//! # Routes
//! - `GET /`: the runs list; `GET /run/{id}`: one run; `GET /compare?a=ID&b=ID`: two runs.
//! - `GET /api/runs?q=QUERY&limit=N`: matching runs, newest first (see [`Store::search`]).
//! - `GET /api/runs/{id}`: a [`RunDetail`]: summary, report, chart series.
//! - `GET /api/compare?a=ID&b=ID`: both runs' details and the [`Delta`]s from `a` to `b`.

pub mod compare;
pub mod detail;

pub use compare::{Better, Delta, Verdict, deltas};
pub use detail::{RunDetail, load};

use crate::DashboardError;
use crate::auth::Access;
use crate::server::{self, ServerHandle};
use crate::store::{RunSummary, Store};
use axum::Json;
use axum::Router;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use msgbench_report::RunReport;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Most runs one list request returns.
pub const MAX_LIST: usize = 1000;

/// Records the run `report` (written to `results`) in the history at `db`; returns its row id.
///
/// # Errors
/// The database cannot be opened or written.
pub fn record(db: &Path, report: &RunReport, results: &Path) -> Result<i64, DashboardError> {
    Store::open(db)?.insert(&RunSummary::from_report(report, results))
}

/// Adds existing results files to the history at `db`: each file's report is computed and
/// recorded (a file already known updates its row). Returns each file's row id or error.
pub fn import(
    db: &Path,
    files: &[PathBuf],
) -> Result<Vec<Result<i64, DashboardError>>, DashboardError> {
    let store = Store::open(db)?;
    Ok(files
        .iter()
        .map(|f| store.insert(&RunSummary::from_report(&detail::report(f)?, f)))
        .collect())
}

#[derive(Clone)]
struct HistoryState {
    store: Arc<Mutex<Store>>,
    access: Access,
    cap: usize,
}

/// A history dashboard server.
pub struct HistoryDashboard {
    server: ServerHandle,
    url: String,
}

impl HistoryDashboard {
    /// Opens the history at `db` and serves it on `addr` (token rules as for the live page:
    /// see [`crate::auth`]).
    ///
    /// # Errors
    /// The database cannot be opened; a bad or unavailable address; an unusable token.
    pub fn start(addr: &str, token: Option<&str>, db: &Path) -> Result<Self, DashboardError> {
        let store = Store::open(db)?;
        let (listener, access) = server::bind(addr, token)?;
        let state = HistoryState {
            store: Arc::new(Mutex::new(store)),
            access: access.clone(),
            cap: crate::series::DEFAULT_CAP,
        };
        let app = server::finish(
            Router::new()
                .route("/", get(runs_page))
                .route("/run/{id}", get(run_page))
                .route("/compare", get(compare_page))
                .route("/api/runs", get(list))
                .route("/api/runs/{id}", get(one))
                .route("/api/compare", get(compare_runs))
                .with_state(state),
            &access,
        );
        let server = ServerHandle::spawn(listener, app, || {})?;
        Ok(HistoryDashboard {
            url: server::url_for(server.local_addr()),
            server,
        })
    }

    /// The URL of the runs list (never with the token: see [`crate::auth`]).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Serves until the process ends.
    pub fn wait(self) {
        self.server.wait();
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.server.local_addr()
    }

    /// Stops the server (tests).
    pub fn stop(self) {
        self.server.stop();
    }
}

/// An API error as JSON `{ "error": ... }` with its status.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

impl From<DashboardError> for ApiError {
    fn from(e: DashboardError) -> Self {
        let status = match e {
            DashboardError::Results { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(status, e.to_string())
    }
}

async fn runs_page(State(s): State<HistoryState>) -> Response {
    server::page(server::RUNS_PAGE, &s.access)
}

async fn run_page(State(s): State<HistoryState>) -> Response {
    server::page(server::RUN_PAGE, &s.access)
}

async fn compare_page(State(s): State<HistoryState>) -> Response {
    server::page(server::COMPARE_PAGE, &s.access)
}

#[derive(Deserialize)]
struct ListQuery {
    #[serde(default)]
    q: String,
    limit: Option<usize>,
}

#[derive(Serialize)]
struct RunList {
    runs: Vec<RunSummary>,
    total: u64,
    db: String,
}

/// Runs a store call off the server's only thread (SQLite and file reads block).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

fn lock(s: &HistoryState) -> std::sync::MutexGuard<'_, Store> {
    s.store.lock().unwrap_or_else(|p| p.into_inner())
}

async fn list(
    State(s): State<HistoryState>,
    Query(q): Query<ListQuery>,
) -> Result<Json<RunList>, ApiError> {
    blocking(move || {
        let st = lock(&s);
        Ok(Json(RunList {
            runs: st.search(&q.q, q.limit.unwrap_or(200).min(MAX_LIST))?,
            total: st.count()?,
            db: st.path().display().to_string(),
        }))
    })
    .await
}

fn run_detail(s: &HistoryState, id: i64) -> Result<RunDetail, ApiError> {
    let summary = lock(s)
        .get(id)?
        .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("no run {id} in the history")))?;
    Ok(detail::detail(summary, s.cap)?)
}

async fn one(
    State(s): State<HistoryState>,
    UrlPath(id): UrlPath<i64>,
) -> Result<Json<RunDetail>, ApiError> {
    blocking(move || run_detail(&s, id).map(Json)).await
}

#[derive(Deserialize)]
struct CompareQuery {
    a: i64,
    b: i64,
}

#[derive(Serialize)]
struct Comparison {
    a: RunDetail,
    b: RunDetail,
    deltas: Vec<Delta>,
}

async fn compare_runs(
    State(s): State<HistoryState>,
    Query(q): Query<CompareQuery>,
) -> Result<Json<Comparison>, ApiError> {
    blocking(move || {
        let a = run_detail(&s, q.a)?;
        let b = run_detail(&s, q.b)?;
        let deltas = deltas(&a.report, &b.report);
        Ok(Json(Comparison { a, b, deltas }))
    })
    .await
}
