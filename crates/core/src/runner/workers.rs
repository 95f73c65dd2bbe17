//! Where tasks run: one single-threaded tokio runtime per core ("thread per core").
//!
//! A work-stealing runtime puts a task woken by another into the waker's own queue, so a
//! producer and the consumer it feeds end up taking turns on one core while the other idles.
//! Here each task (and the connection it owns, created on the same runtime) stays on the worker
//! it was placed on; tasks are placed round-robin, consumers first, so with one producer and one
//! consumer each gets a core.

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// A set of single-threaded runtimes on their own threads; dropped, they shut down.
pub struct Workers {
    handles: Vec<Handle>,
    /// The event-loop lag probes ([`super::lag`]), one per loop; aborted on drop.
    probes: Vec<tokio::task::JoinHandle<()>>,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    next: usize,
}

impl Workers {
    /// Starts `n` workers; with `n == 0` tasks run on the calling (work-stealing) runtime.
    pub fn start(n: usize) -> std::io::Result<Workers> {
        let mut w = Workers {
            handles: Vec::new(),
            probes: Vec::new(),
            stops: Vec::new(),
            threads: Vec::new(),
            next: 0,
        };
        for i in 0..n {
            let rt = Builder::new_current_thread().enable_all().build()?;
            let (stop_tx, stop_rx) = oneshot::channel::<()>();
            w.handles.push(rt.handle().clone());
            w.probes.push(super::lag::spawn_probe(rt.handle()));
            w.stops.push(stop_tx);
            w.threads.push(
                std::thread::Builder::new()
                    .name(format!("msgbench-worker-{i}"))
                    .spawn(move || {
                        rt.block_on(async {
                            let _ = stop_rx.await;
                        });
                        // Tasks still running are dropped here (the runner joins them first).
                        rt.shutdown_background();
                    })?,
            );
        }
        if n == 0 {
            w.probes.push(super::lag::spawn_probe(&Handle::current()));
        }
        Ok(w)
    }

    /// The worker for the next task, round-robin.
    pub fn next_handle(&mut self) -> Handle {
        if self.handles.is_empty() {
            return Handle::current();
        }
        let h = self.handles[self.next % self.handles.len()].clone();
        self.next += 1;
        h
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for p in self.probes.drain(..) {
            p.abort();
        }
        for s in self.stops.drain(..) {
            let _ = s.send(());
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
