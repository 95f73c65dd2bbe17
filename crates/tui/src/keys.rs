//! The TUI's own state (what the person chose to see) and its keys, as a state machine with no
//! terminal in it, so every key's effect is testable.
//!
//! | key | effect |
//! |---|---|
//! | `p` | pause / resume the display (the run and the recording go on) |
//! | `s`, Tab | next latency series (end-to-end, publish, each stage...) |
//! | `S`, Shift-Tab | previous latency series |
//! | `q`, Esc, Ctrl-C | stop the run cleanly: drain, write the end record and the report; again: cut the drain short |

use crate::state::{LiveState, Source};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// What the terminal loop must do after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing changed.
    None,
    /// The display changed: draw again.
    Redraw,
    /// Request a stop of the run (and draw again).
    Stop,
}

/// What the person chose to see.
#[derive(Debug, Clone, Default)]
pub struct UiState {
    /// While paused: the state as it was when `p` was pressed (records keep being folded into
    /// the live state, so nothing is lost when the display resumes).
    pub frozen: Option<Box<LiveState>>,
    /// Index into [`LiveState::sources`] of the latency chart's series.
    pub source: usize,
    /// Stop requests sent so far.
    pub stop_requests: u32,
    /// Facts from outside the results file shown under the header (the dashboard's URL...).
    pub notes: Vec<String>,
}

impl UiState {
    /// The initial state: live display, first latency series.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the display is paused.
    pub fn paused(&self) -> bool {
        self.frozen.is_some()
    }

    /// The state to draw: the frozen one while paused, otherwise `live`.
    pub fn shown<'a>(&'a self, live: &'a LiveState) -> &'a LiveState {
        self.frozen.as_deref().unwrap_or(live)
    }

    /// The latency series shown, given the series `state` has.
    pub fn source(&self, state: &LiveState) -> Source {
        let all = state.sources();
        all[self.source % all.len()]
    }

    /// Applies one key; `live` is the current state (frozen on pause).
    pub fn handle_key(&mut self, key: KeyEvent, live: &LiveState) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::None;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Char('c') if ctrl => self.stop(),
            KeyCode::Char('q') | KeyCode::Esc => self.stop(),
            KeyCode::Char('p') | KeyCode::Char('P') => {
                self.frozen = match self.frozen.take() {
                    Some(_) => None,
                    None => Some(Box::new(live.clone())),
                };
                Action::Redraw
            }
            KeyCode::Char('s') | KeyCode::Tab => {
                let n = self.shown(live).sources().len();
                self.source = (self.source % n + 1) % n;
                Action::Redraw
            }
            KeyCode::Char('S') | KeyCode::BackTab => {
                let n = self.shown(live).sources().len();
                self.source = (self.source % n + n - 1) % n;
                Action::Redraw
            }
            _ => Action::None,
        }
    }

    fn stop(&mut self) -> Action {
        self.stop_requests += 1;
        Action::Stop
    }
}
