//! Where a socket's connections come from: its listener, the dials its owner makes, and the
//! dials made again after a connection was lost. New connections arrive on one channel
//! ([`Links`]), which the socket drains when it is ready; the background tasks never touch the
//! socket itself.

use crate::conn::{Conn, ConnError, REDIAL, dial};
use crate::options::Endpoint;
use crate::registry::Registry;
use crate::zmtp::SocketType;
use msgbench_core::driver::{ConnectFailure, DriverError, DriverEventKind, EventSink};
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What every client of the driver shares to report and reconnect.
#[derive(Clone)]
pub struct Ctx {
    /// Events to the runner.
    pub events: EventSink,
    /// Who is where in this process.
    pub registry: Arc<Registry>,
    /// `zmq producer 3`.
    pub who: String,
    /// Time allowed for one connect (the run's connect timeout, a little less).
    pub attempt: Duration,
    /// Why the last peer that connected to this client's listener could not join (a failed
    /// handshake): a client that waits for peers in vain says it, not only how many came.
    pub last_refusal: Arc<std::sync::Mutex<Option<String>>>,
}

impl Ctx {
    /// A peer that connected to the listener and could not join: an error event, and the
    /// reason kept for [`Ctx::waited_in_vain`].
    fn refused(&self, why: String) {
        *self.last_refusal.lock().expect("refusal slot") = Some(why.clone());
        self.events.emit(DriverEventKind::Error, why);
    }

    /// The end of a wait for peers that did not all come: why the last one that tried could
    /// not join, if one did.
    pub fn waited_in_vain(&self) -> String {
        match self.last_refusal.lock().expect("refusal slot").as_deref() {
            Some(why) => format!("; the last peer that tried: {why}"),
            None => String::new(),
        }
    }

    /// Reports a peer that left, unless the run is ending.
    pub fn peer_left(&self, peer: &str, e: &ConnError) {
        if self.registry.is_closing() {
            return;
        }
        let how = if e.is_eof() {
            "closed the connection".to_string()
        } else {
            format!("failed: {e}")
        };
        self.events.emit(
            DriverEventKind::Disconnected,
            format!("{}: the peer at {peer} {how}", self.who),
        );
    }
}

/// A connection that just came up, and where it was dialled to (`None`: accepted), so that a
/// lost one can be dialled again.
pub struct Link {
    /// The connection.
    pub conn: Conn,
    /// The endpoint it was dialled to.
    pub dialled: Option<Endpoint>,
}

/// Where new connections of one client arrive: its listener's, its dials' and its redials'.
type Incoming = mpsc::UnboundedReceiver<Link>;
/// The sending end of [`Incoming`].
type LinkTx = mpsc::UnboundedSender<Link>;

/// How one socket makes connections: its type, what follows its READY (a SUB's subscription),
/// and where the connections go. Cloned into each background task.
#[derive(Clone)]
pub struct Dialer {
    /// The socket's type.
    pub ours: SocketType,
    /// Sent right after our READY on every connection.
    pub hello: Vec<u8>,
    tx: LinkTx,
    /// Reporting and the connect budget.
    pub ctx: Ctx,
}

impl Dialer {
    /// Hands a connection to the socket (dropped if the socket is gone).
    pub fn deliver(&self, link: Link) {
        let _ = self.tx.send(link);
    }

    /// Resolves once the socket is gone.
    pub async fn closed(&self) {
        self.tx.closed().await;
    }
}

/// A socket's connections to come, and the task (listener or dialler) that makes them.
pub struct Links {
    dialer: Dialer,
    incoming: Incoming,
    task: Option<JoinHandle<()>>,
}

impl Links {
    /// No connections yet.
    pub fn new(ours: SocketType, hello: Vec<u8>, ctx: Ctx) -> Links {
        let (tx, incoming) = mpsc::unbounded_channel();
        Links {
            dialer: Dialer {
                ours,
                hello,
                tx,
                ctx,
            },
            incoming,
            task: None,
        }
    }

    /// The socket's dialler (type, hello, reporting).
    pub fn dialer(&self) -> &Dialer {
        &self.dialer
    }

    /// Reporting and the connect budget.
    pub fn ctx(&self) -> &Ctx {
        &self.dialer.ctx
    }

    /// Binds `ep` and accepts peers from now on; returns the endpoint bound.
    ///
    /// # Errors
    /// [`DriverError::Connect`] when it cannot bind.
    pub async fn bind(&mut self, ep: &Endpoint) -> Result<Endpoint, DriverError> {
        let (listener, bound) = bind(ep, &self.dialer.ctx.who).await?;
        self.task = Some(accept(listener, self.dialer.clone()));
        Ok(bound)
    }

    /// Runs `task` (it makes this socket's connections) until [`Links::stop`].
    pub fn run(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.task = Some(tokio::spawn(task));
    }

    /// After a connection was lost: dials it again in the background if this side dialled it,
    /// unless the run is ending.
    pub fn dial_again(&self, dialled: Option<Endpoint>) {
        if let Some(ep) = dialled
            && !self.dialer.ctx.registry.is_closing()
        {
            redial(ep, self.dialer.clone());
        }
    }

    /// A connection that has come up, without waiting.
    pub fn try_recv(&mut self) -> Option<Link> {
        self.incoming.try_recv().ok()
    }

    /// The next connection to come up.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Link>> {
        self.incoming.poll_recv(cx)
    }

    /// The next connection to come up, if one does within `within`.
    pub async fn recv_within(&mut self, within: Duration) -> Option<Link> {
        tokio::time::timeout(within, self.incoming.recv())
            .await
            .ok()
            .flatten()
    }

    /// Stops accepting and dialling.
    pub fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Dials `ep` again after its connection was lost, in the background, until it succeeds or
/// nobody takes the socket's connections any more. Each attempt may take the connect budget.
fn redial(ep: Endpoint, d: Dialer) {
    tokio::spawn(async move {
        let mut pause = REDIAL;
        while !d.tx.is_closed() {
            tokio::time::sleep(pause).await;
            match dial(&ep, d.ours, &d.hello, Instant::now() + d.ctx.attempt).await {
                Ok(conn) => {
                    d.ctx.events.emit(
                        DriverEventKind::Reconnected,
                        format!("{}: connected to {ep} again", d.ctx.who),
                    );
                    let _ = d.tx.send(Link {
                        conn,
                        dialled: Some(ep),
                    });
                    return;
                }
                Err(_) => pause = (pause * 2).min(Duration::from_secs(1)),
            }
        }
    });
}

/// Binds `ep` and returns the listener with the address actually bound (port 0 resolved).
///
/// # Errors
/// [`DriverError::Connect`] saying why (usually: the port is taken).
async fn bind(ep: &Endpoint, who: &str) -> Result<(TcpListener, Endpoint), DriverError> {
    let fail = |e: io::Error| {
        let reason = match e.kind() {
            io::ErrorKind::AddrInUse => format!(
                "{who} cannot bind {ep}: the port is already in use (by another program, or by \
                 another client of this run: the binding side's client i uses PORT + i)"
            ),
            io::ErrorKind::AddrNotAvailable => {
                format!("{who} cannot bind {ep}: that address is not one of this host's")
            }
            _ => format!("{who} cannot bind {ep}: {e}"),
        };
        DriverError::Connect {
            target: ep.to_string(),
            reason,
            cause: ConnectFailure::Other,
        }
    };
    let listener = TcpListener::bind((ep.host.as_str(), ep.port))
        .await
        .map_err(fail)?;
    let local = listener.local_addr().map_err(fail)?;
    Ok((
        listener,
        Endpoint {
            host: local.ip().to_string(),
            port: local.port(),
        },
    ))
}

/// Accepts connections on `listener` for as long as anyone takes the socket's connections,
/// handshaking each on a task of its own (a slow peer holds up no other) within the connect
/// budget. Failed handshakes are reported as errors: they are peers that could not join.
fn accept(listener: TcpListener, d: Dialer) -> JoinHandle<()> {
    tokio::spawn(async move {
        let (events, who, timeout) = (&d.ctx.events, &d.ctx.who, d.ctx.attempt);
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = d.tx.closed() => return,
            };
            let (tcp, from) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    events.emit(DriverEventKind::Error, format!("{who}: accept failed: {e}"));
                    // Out of descriptors, typically: do not spin.
                    tokio::time::sleep(REDIAL).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let d = d.clone();
            tokio::spawn(async move {
                let who = &d.ctx.who;
                match tokio::time::timeout(timeout, Conn::handshake(tcp, d.ours, &d.hello)).await {
                    Ok(Ok(conn)) => {
                        let _ = d.tx.send(Link {
                            conn,
                            dialled: None,
                        });
                    }
                    Ok(Err(e)) => d
                        .ctx
                        .refused(format!("{who}: the ZMTP handshake with {from} failed: {e}")),
                    Err(_) => d.ctx.refused(format!(
                        "{who}: {from} connected but did not complete the ZMTP handshake within \
                         {timeout:?}"
                    )),
                }
            });
        }
    })
}
