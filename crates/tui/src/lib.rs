//! # msgbench-tui
//!
//! Live terminal views of a running benchmark, both functions of the records written to the
//! results file (the results file is the contract: a view shows nothing it does not hold).
//!
//! - `msgbench run --tui`: a full-screen view ([`Tui`]) with throughput and latency percentiles
//!   over time, integrity counts, errors, generator health, connections, the phase with the time
//!   left, and recent events; keys pause the display, switch the latency series, and stop the
//!   run cleanly.
//! - Plain mode on a terminal: a progress line ([`ProgressLine`]) kept below the per-second
//!   table on long runs.
//!
//! # Layout
//! - [`plan`]: the phase, how far through it and the time left, from `begin`, `phase` events and
//!   intervals (shared by both views).
//! - [`state`]: [`LiveState`], everything the TUI shows, folded from records in bounded memory.
//! - [`keys`]: [`UiState`] and the key state machine (no terminal in it).
//! - [`draw`]: the screen as a pure function of the two states (snapshot-tested on ratatui's
//!   `TestBackend`).
//! - [`term`]: the display thread that owns the terminal.
//! - [`progress`]: the plain-mode progress line.
//! - [`snapshot`]: a rendered screen as text or HTML (tests, `docs/`).
//! - [`format`](mod@format): numbers, latencies and durations as text.
#![deny(missing_docs)]

pub mod draw;
pub mod format;
pub mod keys;
pub mod plan;
pub mod progress;
pub mod snapshot;
pub mod state;
pub mod term;

pub use keys::{Action, UiState};
pub use progress::ProgressLine;
pub use state::LiveState;
pub use term::Tui;

/// Why the terminal view failed.
#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    /// Setting up, drawing to or reading from the terminal failed.
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
    /// The display thread panicked.
    #[error("the display thread panicked")]
    Panicked,
}

/// Renders the screen for `live` and `ui` on a `width` × `height` test backend.
pub fn render(live: &LiveState, ui: &UiState, width: u16, height: u16) -> ratatui::buffer::Buffer {
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, height))
        .expect("a test backend cannot fail");
    t.draw(|f| draw::draw(f, live, ui))
        .expect("a test backend cannot fail");
    t.backend().buffer().clone()
}

/// [`render`] as text (what the snapshot tests compare and `docs/tui.txt` shows).
pub fn render_text(live: &LiveState, ui: &UiState, width: u16, height: u16) -> String {
    snapshot::buffer_text(&render(live, ui, width, height))
}
