//! The accept loop every embedded server shares: TCP_NODELAY on each accepted socket, one task
//! per connection, accept errors survived, and an orderly stop.

use std::future::Future;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How long connections get to finish after a stop, unless a server says otherwise.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Accepts until `stop` resolves, handing each socket (NODELAY set) and a shutdown signal to
/// `serve`, whose future runs as its own task. Accept errors (e.g. out of file descriptors) do
/// not end the loop: they are reported on stderr at most once a second (prefixed with `name`)
/// and retried after 10 ms. On stop the listener closes, every connection is told to shut down
/// and given 5 s before it is aborted.
pub(crate) async fn accept_loop<F, Fut>(
    listener: TcpListener,
    name: &str,
    stop: impl Future<Output = ()> + Send,
    serve: F,
) where
    F: FnMut(TcpStream, watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    accept_loop_with_grace(listener, name, stop, STOP_GRACE, serve).await;
}

/// [`accept_loop`] giving connections `grace` to finish after a stop.
pub(crate) async fn accept_loop_with_grace<F, Fut>(
    listener: TcpListener,
    name: &str,
    stop: impl Future<Output = ()> + Send,
    grace: Duration,
    mut serve: F,
) where
    F: FnMut(TcpStream, watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    let mut stop = std::pin::pin!(stop);
    let mut last_report: Option<Instant> = None;
    loop {
        tokio::select! {
            biased;
            () = &mut stop => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((sock, _peer)) => {
                    // Without this, Nagle's algorithm meets the client's delayed ACK and small
                    // messages wait up to 40 ms.
                    let _ = sock.set_nodelay(true);
                    conns.spawn(serve(sock, shutdown_rx.clone()));
                }
                Err(e) => {
                    if last_report.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                        eprintln!("{name}: accepting a connection failed: {e}");
                        last_report = Some(Instant::now());
                    }
                    tokio::select! {
                        () = &mut stop => break,
                        () = tokio::time::sleep(Duration::from_millis(10)) => {}
                    }
                }
            },
        }
    }
    drop(listener);
    let _ = shutdown_tx.send(true);
    let drained =
        tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        conns.shutdown().await;
    }
}
