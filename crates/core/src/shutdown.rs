//! Ctrl-C and other stop requests, as a cloneable handle the runner watches.
//!
//! The first request ends the run gracefully: producers stop, in-flight messages get a short
//! drain, the final report and results file are written. A second request cuts the drain short
//! (the report and the results file are still written, with what was in flight counted as in
//! doubt or lost).
//!
//! Ctrl-C (SIGINT), SIGTERM and SIGHUP are each a request. SIGHUP is one too because its
//! default action kills the process without a report: a benchmark whose terminal or SSH session
//! goes away should end the way Ctrl-C ends it, with its results file complete.

use tokio::sync::watch;

/// Counts stop requests; cloneable, cheap to check.
#[derive(Debug, Clone)]
pub struct Shutdown {
    tx: watch::Sender<u32>,
    rx: watch::Receiver<u32>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A handle with no stop requested.
    pub fn new() -> Self {
        let (tx, rx) = watch::channel(0);
        Self { tx, rx }
    }

    /// Requests a stop (the second call makes it urgent).
    pub fn request(&self) {
        self.tx.send_modify(|n| *n += 1);
    }

    /// How many stops were requested.
    pub fn requests(&self) -> u32 {
        *self.rx.borrow()
    }

    /// Resolves when the number of requests reaches `n`.
    pub async fn reached(&self, n: u32) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|v| *v >= n).await;
    }

    /// Installs a handler for Ctrl-C (SIGINT), SIGTERM and SIGHUP that calls
    /// [`Shutdown::request`] once per signal received.
    pub fn listen_for_signals(&self) {
        use tokio::signal::unix::{Signal, SignalKind, signal};
        async fn next(s: &mut Option<Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        let me = self.clone();
        tokio::spawn(async move {
            let mut term = signal(SignalKind::terminate()).ok();
            let mut hup = signal(SignalKind::hangup()).ok();
            loop {
                tokio::select! {
                    r = tokio::signal::ctrl_c() => if r.is_err() { return },
                    _ = next(&mut term) => {}
                    _ = next(&mut hup) => {}
                }
                me.request();
            }
        });
    }
}
