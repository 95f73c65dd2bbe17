//! One interface for every built-in server, so `msgbench serve` is a table of how to bind each
//! (flags → configuration) and one way to run any of them: a status line every few seconds,
//! serving until the stop signal, a summary at the end.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// How often a running server's status line is written.
pub const STATUS_EVERY: Duration = Duration::from_secs(10);

/// The signal a server stops at.
pub type Stop = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A server at work: resolves when it has stopped, with a summary line if it has one.
pub type Serving = Pin<Box<dyn Future<Output = Result<Option<String>, ServeError>> + Send>>;

/// Makes the next status line (called every [`STATUS_EVERY`]; it keeps what it needs from the
/// last call to give rates).
pub type StatusLine = Box<dyn FnMut() -> String + Send>;

/// Why a server stopped before it was told to.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Its socket failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Something it depends on failed (the broker a relay reads from, a simulator's broker).
    #[error("{0}")]
    Failed(String),
}

/// A built-in server, bound and ready.
pub trait Server: Send {
    /// Its status line, if it keeps counts worth one.
    fn status(&self) -> Option<StatusLine> {
        None
    }

    /// Serves until `stop`.
    fn serve(self: Box<Self>, stop: Stop) -> Serving;
}

/// Counts a server keeps of its connections and messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Connections open now.
    pub connections: u64,
    /// Connections accepted so far.
    pub connections_total: u64,
    /// Messages (or requests) received so far.
    pub messages_in: u64,
    /// Messages sent (or confirmed, or answered over HTTP/2) so far.
    pub messages_out: u64,
}

/// The common status line: connections now and in total, and the two message rates since the
/// last line.
pub fn counts_line(read: impl Fn() -> Counts + Send + 'static) -> StatusLine {
    let mut last = read();
    Box::new(move || {
        let now = read();
        let secs = STATUS_EVERY.as_secs_f64();
        let line = format!(
            "{} connections ({} total), {:.0} msgs/s in, {:.0} msgs/s out/confirmed",
            now.connections,
            now.connections_total,
            now.messages_in.saturating_sub(last.messages_in) as f64 / secs,
            now.messages_out.saturating_sub(last.messages_out) as f64 / secs,
        );
        last = now;
        line
    })
}

impl Server for crate::mqtt::Broker {
    fn status(&self) -> Option<StatusLine> {
        let stats = self.stats();
        Some(counts_line(move || {
            let s = stats.snapshot();
            Counts {
                connections: s.connections_current,
                connections_total: s.connections_total,
                messages_in: s.messages_in,
                messages_out: s.messages_out,
            }
        }))
    }

    fn serve(self: Box<Self>, stop: Stop) -> Serving {
        Box::pin(async move {
            self.run(stop).await?;
            Ok(None)
        })
    }
}

impl Server for crate::amqp::Sink {
    fn status(&self) -> Option<StatusLine> {
        let stats = self.stats();
        Some(counts_line(move || {
            let s = stats.snapshot();
            Counts {
                connections: s.connections_current,
                connections_total: s.connections_total,
                messages_in: s.messages,
                messages_out: s.confirms,
            }
        }))
    }

    fn serve(self: Box<Self>, stop: Stop) -> Serving {
        Box::pin(async move {
            self.run(stop).await?;
            Ok(None)
        })
    }
}

impl Server for crate::amqp_proxy::Proxy {
    fn serve(self: Box<Self>, stop: Stop) -> Serving {
        use std::sync::atomic::Ordering::Relaxed;
        Box::pin(async move {
            let stats = self.stats();
            self.run(stop).await;
            Ok(Some(format!(
                "{} connections relayed, {} failed, {} bytes held (sent before open-ok)",
                stats.relayed.load(Relaxed),
                stats.failed.load(Relaxed),
                stats.held_bytes.load(Relaxed)
            )))
        })
    }
}

impl Server for crate::http::Bound {
    fn status(&self) -> Option<StatusLine> {
        use std::sync::atomic::Ordering::Relaxed;
        let counts = self.server.counts();
        Some(counts_line(move || Counts {
            messages_in: counts.requests.load(Relaxed),
            messages_out: counts.http2_requests.load(Relaxed),
            ..Counts::default()
        }))
    }

    fn serve(self: Box<Self>, stop: Stop) -> Serving {
        Box::pin(async move {
            self.server.serve(self.listener, stop).await;
            Ok(None)
        })
    }
}

impl Server for crate::time::Reference {
    fn serve(self: Box<Self>, stop: Stop) -> Serving {
        Box::pin(async move {
            let answered = crate::time::serve(self.socket, stop).await?;
            Ok(Some(format!("answered {answered} probes")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn the_status_line_gives_rates_since_the_last_one() {
        let n = Arc::new(AtomicU64::new(100));
        let read = n.clone();
        let mut line = counts_line(move || Counts {
            connections: 2,
            connections_total: 5,
            messages_in: read.load(Ordering::Relaxed),
            messages_out: 0,
        });
        n.store(1_100, Ordering::Relaxed);
        assert_eq!(
            line(),
            "2 connections (5 total), 100 msgs/s in, 0 msgs/s out/confirmed"
        );
        assert_eq!(
            line(),
            "2 connections (5 total), 0 msgs/s in, 0 msgs/s out/confirmed"
        );
    }

    #[tokio::test]
    async fn any_server_serves_until_its_stop() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server: Box<dyn Server> = Box::new(crate::http::Bound {
            server: crate::http::HttpServer::new(),
            listener,
        });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(server.serve(Box::pin(async move {
            let _ = rx.await;
        })));
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
        tx.send(()).unwrap();
        let summary = tokio::time::timeout(Duration::from_secs(5), running)
            .await
            .expect("stopped")
            .unwrap()
            .unwrap();
        assert_eq!(summary, None);
    }
}
