//! Channel multiplexing (`amqp.channels_per_connection` > 1): several clients share one
//! connection, each on a channel of its own, as RabbitMQ PerfTest's channel counts do.
//!
//! One I/O task owns the socket ([`Mux::start`] spawns it). Clients ([`MuxChan`]) buffer
//! their frames locally and hand the task whole batches over a bounded queue (the bound is the
//! backpressure a slow socket puts on them); the task writes them, reads frames and routes each
//! to the channel it names, answers the server's connection.close, and sends the heartbeats of
//! the whole connection. After a cut it tells every channel ([`In::Lost`]), reports one
//! disconnect, and reconnects with backoff; channels then open themselves again and redo their
//! own setup. Only the socket is shared: no lock is taken per message, and a producer's
//! publishes cost one queue hand-over per batch.

use crate::codec::{self, Frame};
use crate::conn::{CHANNEL, Conn};
use amq_protocol::protocol::{AMQPClass, channel, confirm};
use amq_protocol::types::ShortString;
use bytes::{Bytes, BytesMut};
use msgbench_core::driver::DriverError;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// What the I/O task hands a channel.
pub enum In {
    /// A frame for this channel.
    Frame(Frame),
    /// The connection was lost (the text says why).
    Lost(String),
}

enum Cmd {
    Register {
        ch: u16,
        inbox: mpsc::UnboundedSender<In>,
    },
    Write(Bytes),
    Close(oneshot::Sender<()>),
}

/// The connection as the channels see it.
#[derive(Debug, Clone, Copy)]
struct State {
    /// Bumped on every (re)connection.
    generation: u64,
    up: bool,
    frame_max: usize,
}

/// One shared connection.
pub struct Mux {
    cmd: mpsc::Sender<Cmd>,
    state: watch::Receiver<State>,
    /// Channels not yet closed: the last one to close closes the connection.
    users: AtomicUsize,
    timeout: Duration,
}

impl Mux {
    /// Takes over `conn` (handshake done, channel 1 open) for up to `channels` channels.
    pub fn start(conn: Conn, channels: u16, timeout: Duration) -> Arc<Mux> {
        let (cmd_tx, cmd_rx) = mpsc::channel(64.max(2 * channels as usize));
        let (state_tx, state_rx) = watch::channel(State {
            generation: 1,
            up: true,
            frame_max: conn.frame_max,
        });
        tokio::spawn(io_task(conn, cmd_rx, state_tx, channels));
        Arc::new(Mux {
            cmd: cmd_tx,
            state: state_rx,
            users: AtomicUsize::new(0),
            timeout,
        })
    }

    /// A channel on this connection; `ch` in 1..=channels, each used once.
    pub async fn channel(self: &Arc<Mux>, ch: u16) -> Result<MuxChan, DriverError> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.cmd
            .send(Cmd::Register { ch, inbox: tx })
            .await
            .map_err(|_| DriverError::Closed)?;
        self.users.fetch_add(1, Ordering::Relaxed);
        let mut c = MuxChan {
            mux: self.clone(),
            ch,
            inbox: rx,
            wbuf: BytesMut::new(),
            open: false,
            generation: 0,
            frame_max: self.state.borrow().frame_max,
            published: false,
            flow_paused: false,
            at_broker: false,
            closed: false,
        };
        c.open()
            .await
            .map_err(|e| DriverError::Subscribe(format!("opening channel {ch}: {e}")))?;
        Ok(c)
    }
}

/// The I/O task: owns the connection until the last channel closes it or every handle is gone.
async fn io_task(
    mut conn: Conn,
    mut cmds: mpsc::Receiver<Cmd>,
    state: watch::Sender<State>,
    channels: u16,
) {
    let mut routes: Vec<Option<mpsc::UnboundedSender<In>>> = vec![None; channels as usize + 1];
    let mut last_write = Instant::now();
    loop {
        if !conn.is_connected() {
            // Down: keep taking commands (writes go nowhere; the channels learnt of the cut)
            // between reconnection attempts.
            loop {
                match cmds.try_recv() {
                    Ok(Cmd::Register { ch, inbox }) => routes[ch as usize] = Some(inbox),
                    Ok(Cmd::Write(_)) => {}
                    Ok(Cmd::Close(done)) => {
                        let _ = done.send(());
                        return;
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => return,
                }
            }
            // The connection paces its own attempts (see `Conn::try_reconnect`).
            if conn.try_reconnect().await.is_ok() {
                state.send_modify(|s| {
                    s.generation += 1;
                    s.up = true;
                    s.frame_max = conn.frame_max;
                });
            }
            continue;
        }
        let beat = last_write + half(conn.heartbeat_every);
        let result: io::Result<()> = tokio::select! {
            cmd = cmds.recv() => match cmd {
                Some(Cmd::Register { ch, inbox }) => {
                    routes[ch as usize] = Some(inbox);
                    Ok(())
                }
                Some(Cmd::Write(b)) => {
                    conn.wire.wbuf.extend_from_slice(&b);
                    // Take whatever else is queued: one write for many batches.
                    while conn.wire.wbuf.len() < 256 * 1024 {
                        match cmds.try_recv() {
                            Ok(Cmd::Write(b)) => conn.wire.wbuf.extend_from_slice(&b),
                            Ok(Cmd::Register { ch, inbox }) => routes[ch as usize] = Some(inbox),
                            Ok(Cmd::Close(done)) => {
                                let _ = conn.flush().await;
                                conn.close().await;
                                let _ = done.send(());
                                return;
                            }
                            Err(_) => break,
                        }
                    }
                    last_write = Instant::now();
                    conn.flush().await
                }
                Some(Cmd::Close(done)) => {
                    conn.close().await;
                    let _ = done.send(());
                    return;
                }
                None => {
                    conn.close().await;
                    return;
                }
            },
            f = conn.read_frame() => f.and_then(|f| match f {
                Frame::Method(0, m) => conn.check_close(0, &m),
                Frame::Heartbeat => Ok(()),
                Frame::Method(ch, _) | Frame::Header(ch, ..) | Frame::Body(ch, _) => {
                    if let Some(Some(r)) = routes.get(ch as usize) {
                        let _ = r.send(In::Frame(f));
                    }
                    Ok(())
                }
            }),
            _ = tokio::time::sleep_until(beat) => {
                codec::put_heartbeat(&mut conn.wire.wbuf);
                last_write = Instant::now();
                conn.flush().await
            }
        };
        if let Err(e) = result {
            // Answer a server's connection.close before dropping the socket.
            let _ = conn.flush().await;
            conn.lost(&e);
            state.send_modify(|s| s.up = false);
            let why = e.to_string();
            for r in routes.iter().flatten() {
                let _ = r.send(In::Lost(why.clone()));
            }
        }
    }
}

fn half(hb: Duration) -> Duration {
    if hb.is_zero() {
        Duration::from_secs(3600)
    } else {
        hb / 2
    }
}

/// One client's channel on a shared connection. Same calls as [`Conn`], so producers and
/// consumers run unchanged on either (see [`crate::link::Link`]).
pub struct MuxChan {
    mux: Arc<Mux>,
    ch: u16,
    inbox: mpsc::UnboundedReceiver<In>,
    /// Frames to hand the I/O task.
    pub wbuf: BytesMut,
    /// Open on the connection of `generation`.
    open: bool,
    /// Open at the broker on the connection of `generation`, as far as we know: from the
    /// moment our channel.open is sent (or the connection brings channel 1) until either side
    /// closes it. Unlike `open`, a failure of ours (a setup cut short, a consumer the broker
    /// cancelled) does not clear it.
    at_broker: bool,
    generation: u64,
    /// Negotiated frame-max.
    pub frame_max: usize,
    /// Something was published on the channel.
    pub published: bool,
    /// The server asked the channel to stop publishing (`channel.flow`).
    pub flow_paused: bool,
    closed: bool,
}

impl MuxChan {
    /// This client's channel number.
    pub fn channel(&self) -> u16 {
        self.ch
    }

    /// Frames routed to this channel and not read yet.
    pub fn queued_frames(&self) -> usize {
        self.inbox.len()
    }

    /// Whether the channel is open (as far as the frames read so far tell).
    pub fn is_connected(&self) -> bool {
        self.open
    }

    /// Opens the channel on the current connection, waiting (up to the timeout) for the I/O
    /// task to be connected. Channel 1 comes open with every new connection; on the connection
    /// it was open on before (the server closed only the channel) it is opened like the others.
    async fn open(&mut self) -> io::Result<()> {
        let mut state = self.mux.state.clone();
        let s = tokio::time::timeout(self.mux.timeout, state.wait_for(|s| s.up))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the connection is down"))?
            .map_err(|_| io::Error::from(io::ErrorKind::NotConnected))?
            .to_owned();
        self.wbuf.clear();
        // Frames and news of the old connection are stale now.
        while self.inbox.try_recv().is_ok() {}
        self.frame_max = s.frame_max;
        let fresh = s.generation != self.generation;
        self.generation = s.generation;
        if fresh {
            self.at_broker = self.ch == CHANNEL;
        } else if self.at_broker {
            // Still open at the broker: an earlier setup was cut short (the caller's `select!`
            // moved on) after its channel.open went out, or the broker cancelled our consumer.
            // Opening it again would be 504 CHANNEL_ERROR, which closes the whole shared
            // connection; closed first, it also takes the stale answers of that setup with it.
            self.close_at_broker().await?;
        }
        if !self.at_broker {
            // From the moment it is sent: cancelled while waiting, the channel opens anyway.
            self.at_broker = true;
            match self
                .call(AMQPClass::Channel(channel::AMQPMethod::Open(
                    channel::Open {},
                )))
                .await?
            {
                AMQPClass::Channel(channel::AMQPMethod::OpenOk(_)) => {}
                other => {
                    return Err(io::Error::other(format!(
                        "expected channel.open-ok, got {other:?}"
                    )));
                }
            }
        }
        self.open = true;
        self.flow_paused = false;
        Ok(())
    }

    /// Closes the channel at the broker (on the current connection), reading past whatever
    /// it still had to say on it.
    async fn close_at_broker(&mut self) -> io::Result<()> {
        codec::put_method(
            &mut self.wbuf,
            self.ch,
            AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
                reply_code: 200,
                reply_text: ShortString::from("reopening"),
                class_id: 0,
                method_id: 0,
            })),
        );
        tokio::time::timeout(self.mux.timeout, async {
            self.flush().await?;
            loop {
                if let Frame::Method(_, m) = self.read_frame().await? {
                    if matches!(*m, AMQPClass::Channel(channel::AMQPMethod::CloseOk(_))) {
                        return Ok::<(), io::Error>(());
                    }
                    if self.check_close(self.ch, &m).is_err() {
                        // The broker closed it too (its close-ok answered).
                        return self.flush().await;
                    }
                }
            }
        })
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no channel.close-ok"))??;
        self.at_broker = false;
        Ok(())
    }

    /// Hands what is buffered to the I/O task (waits while its queue is full).
    pub async fn flush(&mut self) -> io::Result<()> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        let b = self.wbuf.split().freeze();
        self.mux
            .cmd
            .send(Cmd::Write(b))
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::NotConnected))
    }

    /// The next frame for this channel; with `flush`, hands over buffered frames first.
    pub fn poll_frame(&mut self, cx: &mut Context<'_>, flush: bool) -> Poll<io::Result<Frame>> {
        if flush && !self.wbuf.is_empty() {
            let b = self.wbuf.split().freeze();
            match self.mux.cmd.try_send(Cmd::Write(b)) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(Cmd::Write(b))) => {
                    // Keep it and come back soon: the I/O task is busy writing.
                    let mut back = BytesMut::from(&b[..]);
                    back.extend_from_slice(&self.wbuf);
                    self.wbuf = back;
                    cx.waker().wake_by_ref();
                }
                Err(_) => return Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
            }
        }
        match self.inbox.poll_recv(cx) {
            Poll::Ready(Some(In::Frame(f))) => Poll::Ready(Ok(f)),
            Poll::Ready(Some(In::Lost(why))) => {
                self.open = false;
                Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionReset, why)))
            }
            Poll::Ready(None) => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The next frame for this channel.
    pub async fn read_frame(&mut self) -> io::Result<Frame> {
        std::future::poll_fn(|cx| self.poll_frame(cx, true)).await
    }

    /// Sends one synchronous method and waits for this channel's answer.
    pub async fn call(&mut self, method: AMQPClass) -> io::Result<AMQPClass> {
        codec::put_method(&mut self.wbuf, self.ch, method);
        self.flush().await?;
        let timeout = self.mux.timeout;
        tokio::time::timeout(timeout, async {
            loop {
                if let Frame::Method(_, m) = self.read_frame().await? {
                    self.check_close(self.ch, &m)?;
                    return Ok(*m);
                }
            }
        })
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer from the server"))?
    }

    /// Enables publisher confirms on this channel.
    pub async fn confirm_select(&mut self) -> io::Result<()> {
        match self
            .call(AMQPClass::Confirm(confirm::AMQPMethod::Select(
                confirm::Select { nowait: false },
            )))
            .await?
        {
            AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(_)) => Ok(()),
            other => Err(io::Error::other(format!(
                "expected confirm.select-ok, got {other:?}"
            ))),
        }
    }

    /// A server-side close of this channel becomes an error (answered; the channel must be
    /// opened again), and the server's flow control of it is answered and noted
    /// ([`MuxChan::flow_paused`]), as on a connection of its own. Connection closes are the I/O
    /// task's.
    pub fn check_close(&mut self, _ch: u16, m: &AMQPClass) -> io::Result<()> {
        if let AMQPClass::Channel(channel::AMQPMethod::Flow(f)) = m {
            self.flow_paused = !f.active;
            codec::put_method(
                &mut self.wbuf,
                self.ch,
                AMQPClass::Channel(channel::AMQPMethod::FlowOk(channel::FlowOk {
                    active: f.active,
                })),
            );
            return Ok(());
        }
        if let AMQPClass::Channel(channel::AMQPMethod::Close(c)) = m {
            codec::put_method(
                &mut self.wbuf,
                self.ch,
                AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})),
            );
            self.open = false;
            self.at_broker = false;
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!(
                    "the server closed the channel: {} {}",
                    c.reply_code, c.reply_text
                ),
            ));
        }
        Ok(())
    }

    /// Marks the channel unusable; the connection's cut is reported once, by the I/O task.
    pub fn lost(&mut self, _why: &io::Error) {
        self.open = false;
    }

    /// Opens the channel again once the connection is back (or at once, if only the channel
    /// was closed). The caller redoes its setup.
    pub async fn try_reconnect(&mut self) -> Result<(), DriverError> {
        let _ = self.flush().await; // a close-ok owed to the server
        self.open().await.map_err(|e| DriverError::Connect {
            target: "channel".into(),
            reason: e.to_string(),
            cause: msgbench_net::classify(&e),
        })
    }

    /// Closes the channel (channel.close, waiting for close-ok so that every publish before it
    /// was handled); the last channel closes the connection.
    pub async fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        if self.open {
            codec::put_method(
                &mut self.wbuf,
                self.ch,
                AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
                    reply_code: 200,
                    reply_text: ShortString::from("bye"),
                    class_id: 0,
                    method_id: 0,
                })),
            );
            let _ = tokio::time::timeout(Duration::from_secs(5), async {
                self.flush().await?;
                loop {
                    if let Frame::Method(_, m) = self.read_frame().await?
                        && matches!(*m, AMQPClass::Channel(channel::AMQPMethod::CloseOk(_)))
                    {
                        return Ok::<(), io::Error>(());
                    }
                }
            })
            .await;
            self.open = false;
            self.at_broker = false;
        }
        if self.mux.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            let (tx, rx) = oneshot::channel();
            if self.mux.cmd.send(Cmd::Close(tx)).await.is_ok() {
                let _ = tokio::time::timeout(Duration::from_secs(3), rx).await;
            }
        }
    }
}

impl Drop for MuxChan {
    fn drop(&mut self) {
        if !self.closed {
            self.mux.users.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
