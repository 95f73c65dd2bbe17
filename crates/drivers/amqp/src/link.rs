//! What a producer or consumer talks through: a connection of its own ([`Conn`], channel 1)
//! or its channel on a shared connection ([`MuxChan`]). One set of calls over both, so the
//! clients' code does not care which.

use crate::codec::Frame;
use crate::conn::{CHANNEL, Conn};
use crate::mux::MuxChan;
use amq_protocol::protocol::AMQPClass;
use bytes::BytesMut;
use msgbench_core::driver::DriverError;
use std::future::Future;
use std::io;
use std::task::{Context, Poll};
use std::time::Duration;

/// A client's way to the broker.
// One per client, held for the run: unboxed, a send reaches its connection without a pointer
// to follow, which is worth the few hundred bytes a shared channel's clients leave unused.
#[allow(clippy::large_enum_variant)]
pub enum Link {
    /// A connection of its own.
    Own(Conn),
    /// A channel on a shared connection.
    Shared(MuxChan),
}

macro_rules! each {
    ($self:ident, $l:ident => $e:expr) => {
        match $self {
            Link::Own($l) => $e,
            Link::Shared($l) => $e,
        }
    };
}

impl Link {
    /// The channel number frames go out on.
    pub fn channel(&self) -> u16 {
        match self {
            Link::Own(_) => CHANNEL,
            Link::Shared(c) => c.channel(),
        }
    }

    /// Frames waiting to be written.
    pub fn wbuf(&mut self) -> &mut BytesMut {
        match self {
            Link::Own(c) => &mut c.wire.wbuf,
            Link::Shared(c) => &mut c.wbuf,
        }
    }

    /// How much has arrived and is not yet handled: unparsed bytes of an own connection, frames
    /// queued for a shared channel (consumers ack when this runs low, i.e. when going idle).
    pub fn unread(&self) -> usize {
        match self {
            Link::Own(c) => c.wire.rbuf.len(),
            Link::Shared(c) => c.queued_frames(),
        }
    }

    /// Negotiated frame-max.
    pub fn frame_max(&self) -> usize {
        each!(self, c => c.frame_max)
    }

    /// How often this client sends heartbeats itself: never on a shared connection, whose I/O
    /// task sends them for every channel.
    pub fn heartbeat_every(&self) -> Duration {
        match self {
            Link::Own(c) => c.heartbeat_every,
            Link::Shared(_) => Duration::ZERO,
        }
    }

    /// Notes that something was published (the close then waits for the channel's close-ok).
    pub fn set_published(&mut self) {
        each!(self, c => c.published = true)
    }

    /// The server asked this client's channel to stop publishing (`channel.flow`) and has
    /// not let it go on yet.
    pub fn flow_paused(&self) -> bool {
        each!(self, c => c.flow_paused)
    }

    /// Whether the connection (or the channel) is up.
    pub fn is_connected(&self) -> bool {
        each!(self, c => c.is_connected())
    }

    /// The next frame for this client; with `flush`, buffered frames go out first.
    pub fn poll_frame(&mut self, cx: &mut Context<'_>, flush: bool) -> Poll<io::Result<Frame>> {
        each!(self, c => c.poll_frame(cx, flush))
    }

    /// The next frame for this client.
    pub async fn read_frame(&mut self) -> io::Result<Frame> {
        each!(self, c => c.read_frame().await)
    }

    /// Writes (or hands over) everything buffered.
    pub async fn flush(&mut self) -> io::Result<()> {
        each!(self, c => c.flush().await)
    }

    /// One synchronous method on this client's channel.
    pub async fn call(&mut self, method: AMQPClass) -> io::Result<AMQPClass> {
        each!(self, c => c.call(method).await)
    }

    /// Enables publisher confirms on this client's channel.
    pub async fn confirm_select(&mut self) -> io::Result<()> {
        each!(self, c => c.confirm_select().await)
    }

    /// A server close of the channel (or connection) as an error, answered.
    pub fn check_close(&mut self, ch: u16, m: &AMQPClass) -> io::Result<()> {
        each!(self, c => c.check_close(ch, m))
    }

    /// Marks the link lost.
    pub fn lost(&mut self, why: &io::Error) {
        each!(self, c => c.lost(why))
    }

    /// One attempt to get the link back (the caller redoes its setup).
    pub async fn try_reconnect(&mut self) -> Result<(), DriverError> {
        each!(self, c => c.try_reconnect().await)
    }

    /// Closes politely.
    pub async fn close(&mut self) {
        each!(self, c => c.close().await)
    }
}

/// What the topology is declared through: a client's [`Link`], or a held session, which
/// counts the deliveries that arrive while it waits for an answer.
pub trait Caller {
    /// One synchronous method on the client's channel; its answer.
    fn call(&mut self, method: AMQPClass) -> impl Future<Output = io::Result<AMQPClass>> + Send;
}

impl Caller for Link {
    fn call(&mut self, method: AMQPClass) -> impl Future<Output = io::Result<AMQPClass>> + Send {
        Link::call(self, method)
    }
}
