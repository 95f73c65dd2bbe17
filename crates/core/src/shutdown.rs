//! Ctrl-C and other stop requests, as a cloneable handle the runner watches.
//!
//! The first request ends the run gracefully: producers stop, in-flight messages get a short
//! drain, the final report and results file are written. A second request cuts the drain short.

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

    /// Installs a Ctrl-C (SIGINT) and SIGTERM handler that calls [`Shutdown::request`].
    pub fn listen_for_signals(&self) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            loop {
                tokio::select! {
                    r = tokio::signal::ctrl_c() => if r.is_err() { return },
                    _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
                }
                me.request();
            }
        });
    }
}
