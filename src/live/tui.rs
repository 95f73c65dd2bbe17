//! The full-screen terminal view (`msgbench run --tui`) as a live view: each record is handed to
//! the display thread of [`msgbench_tui::Tui`] without waiting; `finish` closes the display and
//! gives the terminal back before the final report prints.

use super::LiveView;
use msgbench_core::shutdown::Shutdown;
use msgbench_report::Record;
use msgbench_tui::Tui;
use std::io::IsTerminal;

/// Forwards each record to the TUI's display thread.
pub struct TuiView {
    tui: Tui,
}

impl TuiView {
    /// Takes over the terminal on stderr; `q` in the view requests a stop on `shutdown`.
    /// `None`, after a one-line notice, when stderr is not a terminal or the terminal cannot be
    /// set up: the run then shows the plain table.
    pub fn start(shutdown: &Shutdown, notes: Vec<String>) -> Option<TuiView> {
        if !std::io::stderr().is_terminal() {
            eprintln!("msgbench: --tui needs a terminal on stderr; showing the plain table");
            return None;
        }
        match Tui::start(shutdown.clone(), notes) {
            Ok(tui) => Some(TuiView { tui }),
            Err(e) => {
                eprintln!(
                    "msgbench: cannot start the terminal view ({e}); showing the plain table"
                );
                None
            }
        }
    }
}

impl LiveView for TuiView {
    fn record(&mut self, record: &Record) {
        self.tui.record(record);
    }

    fn finish(&mut self) {
        if let Err(e) = self.tui.finish() {
            eprintln!(
                "msgbench: the terminal view failed: {e} (the run and its results are complete)"
            );
        }
    }
}
