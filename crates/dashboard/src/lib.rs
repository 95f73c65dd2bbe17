//! # msgbench-dashboard
//!
//! The web dashboard: live charts of a running benchmark and the history of past runs, served
//! by an axum server on a thread of its own, with its front end (HTML, JS, CSS and a vendored
//! uPlot) embedded in the binary.
//!
//! Like every other view, it shows only what the results file holds: the live page is fed the
//! records the run writes (plus host figures sampled from `/proc` while it watches), and a run
//! page of the history is computed from the run's results file through `msgbench_report`.
//! SQLite keeps an index of runs (summary figures and the results file's path) for the list,
//! its search and comparisons.
//!
//! # Layout
//! - [`live`]: `msgbench run --dashboard`: the [`LiveFeed`] the run writes to and the server
//!   streaming chart points as server-sent events.
//! - [`history`]: `msgbench dashboard`: runs list, run page, comparison; recording and
//!   importing runs.
//! - [`store`]: the SQLite run history.
//! - [`frame`]: records to chart rows; [`series`]: the bounded-memory downsampler.
//! - [`sysstat`]: host CPU and memory from `/proc`.
//! - [`auth`]: loopback by default, a token required everywhere else, compared in constant
//!   time and never logged.
//! - [`server`]: binding, embedded assets, the server thread.
#![deny(missing_docs)]

pub mod auth;
pub mod frame;
pub mod history;
pub mod live;
pub mod series;
pub mod server;
pub mod store;
pub mod sysstat;

pub use history::HistoryDashboard;
pub use live::{LiveDashboard, LiveFeed};
pub use store::{RunSummary, Store};

use std::path::PathBuf;

/// Why the dashboard or its history could not do something.
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    /// The listen address is malformed or cannot be bound.
    #[error("dashboard address `{addr}`: {message}")]
    Address {
        /// The address as given.
        addr: String,
        /// What went wrong.
        message: String,
    },
    /// The access token is unusable.
    #[error("dashboard token: {0}")]
    Token(String),
    /// A non-loopback address without a token: refused, never served open.
    #[error(
        "dashboard on {addr}: beyond loopback every request must carry a token, and none was given; give one (`msgbench dashboard --token TOKEN`, `msgbench run --dashboard ADDR --dashboard-token TOKEN`; 8 to 256 letters, digits or -_.~, e.g. from `openssl rand -hex 16`) or listen on 127.0.0.1"
    )]
    NeedsToken {
        /// The address bound.
        addr: std::net::SocketAddr,
    },
    /// The run history database failed.
    #[error("run history {}: {message}", path.display())]
    Store {
        /// The database file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A results file could not be read.
    #[error("results file {}: {message}", path.display())]
    Results {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Other I/O (threads, sockets).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
