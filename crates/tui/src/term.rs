//! The terminal side of the TUI: its own thread owns the terminal (raw mode, alternate screen on
//! stderr), takes records from a bounded queue, reads keys and redraws when something changed.
//!
//! The run's aggregation thread only ever does a non-blocking `try_send` of a cloned record
//! ([`Tui::record`]), so a slow terminal can never slow the run: when the queue is full the
//! record is skipped for the display (and the count of skipped records shown), never for the
//! results file. The terminal is restored when the view finishes, when it is dropped (an error
//! ended the run), and from a panic hook (the release build aborts on panic, so no destructor
//! would run).

use crate::TuiError;
use crate::draw::draw;
use crate::keys::{Action, UiState};
use crate::state::LiveState;
use msgbench_core::shutdown::Shutdown;
use msgbench_report::Record;
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyEvent, KeyEventKind};
use ratatui::crossterm::terminal::{
    Clear, ClearType, EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use ratatui::crossterm::{cursor, execute};
use std::io::Stderr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::sync::{Arc, Once};
use std::thread::JoinHandle;
use std::time::Duration;

/// Records waiting for the display at most (about a quarter of an hour of one-second ticks).
const QUEUE: usize = 1024;
/// How long the loop waits for a key before looking at the queue again.
const POLL: Duration = Duration::from_millis(50);

/// Whether the terminal is in raw mode on the alternate screen (for the panic hook).
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

enum Msg {
    Record(Box<Record>),
    Finish,
}

/// A running TUI. Create it with [`Tui::start`]; feed it with [`Tui::record`]; [`Tui::finish`]
/// (or dropping it) closes the display and gives the terminal back.
pub struct Tui {
    tx: SyncSender<Msg>,
    skipped: Arc<AtomicU64>,
    thread: Option<JoinHandle<Result<(), TuiError>>>,
}

/// Leaves raw mode and the alternate screen and shows the cursor, once.
fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let _ = execute!(std::io::stderr(), LeaveAlternateScreen, cursor::Show);
    }
}

impl Tui {
    /// Takes over the terminal on stderr and starts the display thread. A `q` (Esc, Ctrl-C)
    /// calls [`Shutdown::request`] on `shutdown`. `notes` are shown under the header for the
    /// whole run (where the dashboard and the metrics endpoint listen, say).
    ///
    /// # Errors
    /// When the terminal cannot be set up (the terminal is restored before returning).
    pub fn start(shutdown: Shutdown, notes: Vec<String>) -> Result<Tui, TuiError> {
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        ACTIVE.store(true, Ordering::SeqCst);
        let terminal = (|| {
            enable_raw_mode()?;
            // Clearing through crossterm rather than `Terminal::clear`, which asks the terminal
            // for the cursor position and fails where nothing answers (a pty under `script`).
            execute!(
                std::io::stderr(),
                EnterAlternateScreen,
                cursor::Hide,
                Clear(ClearType::All)
            )?;
            Terminal::new(CrosstermBackend::new(std::io::stderr()))
        })();
        let terminal = match terminal {
            Ok(t) => t,
            Err(e) => {
                restore();
                return Err(TuiError::Terminal(e));
            }
        };
        let (tx, rx) = sync_channel(QUEUE);
        let skipped = Arc::new(AtomicU64::new(0));
        let seen = skipped.clone();
        let thread = std::thread::Builder::new()
            .name("msgbench-tui".into())
            .spawn(move || {
                let r = run(terminal, rx, shutdown, seen, notes);
                restore();
                r
            })
            .map_err(|e| {
                restore();
                TuiError::Terminal(e)
            })?;
        Ok(Tui {
            tx,
            skipped,
            thread: Some(thread),
        })
    }

    /// Hands a record to the display without waiting: skipped (and counted) when the display
    /// is that far behind, ignored once the display has stopped.
    pub fn record(&self, r: &Record) {
        match self.tx.try_send(Msg::Record(Box::new(r.clone()))) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Closes the display after the records sent so far were shown, and restores the terminal.
    ///
    /// # Errors
    /// What made the display fail during the run, if anything did.
    pub fn finish(&mut self) -> Result<(), TuiError> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        let _ = self.tx.send(Msg::Finish);
        let r = thread.join().unwrap_or(Err(TuiError::Panicked));
        restore();
        r
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// Applies a key to the display state; a stop key requests a stop of the run on `shutdown`.
/// Returns whether the screen must be drawn again.
pub fn on_key(ui: &mut UiState, key: KeyEvent, live: &LiveState, shutdown: &Shutdown) -> bool {
    match ui.handle_key(key, live) {
        Action::None => false,
        Action::Redraw => true,
        Action::Stop => {
            shutdown.request();
            true
        }
    }
}

fn run(
    mut terminal: Terminal<CrosstermBackend<Stderr>>,
    rx: Receiver<Msg>,
    shutdown: Shutdown,
    skipped: Arc<AtomicU64>,
    notes: Vec<String>,
) -> Result<(), TuiError> {
    let mut live = LiveState::new();
    let mut ui = UiState::new();
    ui.notes = notes;
    let mut dirty = true;
    let mut keys = true;
    loop {
        loop {
            match rx.try_recv() {
                Ok(Msg::Record(r)) => {
                    live.apply(&r);
                    dirty = true;
                }
                Ok(Msg::Finish) | Err(TryRecvError::Disconnected) => return Ok(()),
                Err(TryRecvError::Empty) => break,
            }
        }
        if dirty {
            live.skipped_records = skipped.load(Ordering::Relaxed);
            terminal
                .draw(|f| draw(f, &live, &ui))
                .map_err(TuiError::Terminal)?;
            dirty = false;
        }
        if !keys {
            std::thread::sleep(POLL);
            continue;
        }
        // Without a readable terminal (no controlling tty) the view still shows the run; only
        // its keys are gone (Ctrl-C from elsewhere and SIGTERM still stop the run).
        match event::poll(POLL).and_then(|ready| ready.then(event::read).transpose()) {
            Ok(Some(Event::Key(k))) if k.kind != KeyEventKind::Release => {
                dirty |= on_key(&mut ui, k, &live, &shutdown);
            }
            Ok(Some(Event::Resize(..))) => dirty = true,
            Ok(_) => {}
            Err(_) => keys = false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::crossterm::event::{KeyCode, KeyModifiers};

    #[test]
    fn stop_keys_request_a_clean_stop_of_the_run() {
        let live = LiveState::new();
        let shutdown = Shutdown::new();
        let mut ui = UiState::new();
        let key = |c| KeyEvent::new(c, KeyModifiers::NONE);
        assert!(!on_key(&mut ui, key(KeyCode::Char('x')), &live, &shutdown));
        assert_eq!(shutdown.requests(), 0);
        assert!(on_key(&mut ui, key(KeyCode::Char('q')), &live, &shutdown));
        assert_eq!(shutdown.requests(), 1, "q asks for a graceful stop");
        assert!(on_key(&mut ui, key(KeyCode::Esc), &live, &shutdown));
        assert_eq!(shutdown.requests(), 2, "a second stop cuts the drain short");
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert!(on_key(&mut ui, ctrl_c, &live, &shutdown));
        assert_eq!(shutdown.requests(), 3);
        assert!(on_key(&mut ui, key(KeyCode::Char('p')), &live, &shutdown));
        assert_eq!(
            shutdown.requests(),
            3,
            "pausing the display does not stop the run"
        );
    }
}
