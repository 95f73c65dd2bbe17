//! [`Liveness`]: noticing a silent peer (a blackholed route, a frozen or vanished server whose
//! connection was never closed), which TCP alone reports only after many minutes.
//!
//! The contract: a connection on which nothing has been heard for two keep-alive periods in a
//! row, with a protocol probe (NATS or Redis PING, MQTT PINGREQ) sent after the first, is dead,
//! and its owner reconnects. For protocols without a probe that is answered (AMQP 0-9-1, AMQP
//! 1.0), the server's own heartbeats, which the client asked for at the keep-alive period, are
//! what should be heard. Only bytes read count: writes that the kernel takes prove nothing (a
//! blackhole takes megabytes into socket buffers), and a server that neither reads our probe nor
//! sends its heartbeats for two periods is as good as gone.
//!
//! Cost: the owner sets a flag per successful read (not per message) and polls the timer only
//! when its I/O would block; the timer itself is re-armed once per period.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// A keep-alive watch over one connection (see the module docs).
pub struct Liveness {
    every: Duration,
    probe: &'static [u8],
    timer: Pin<Box<Sleep>>,
    /// The waker the timer was last polled with: while the same task polls and the timer has
    /// not fired, polling it again would only register that waker again.
    armed_for: Option<std::task::Waker>,
    heard: bool,
    silent: u8,
}

/// What the owner of a watched connection must do.
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    /// Queue [`Liveness::probe`] (at a frame boundary of its write buffer) and write it.
    Probe,
    /// The peer has been silent too long: drop the connection.
    Dead,
}

impl Liveness {
    /// Watches with period `every` (0: never fires); `probe` is the protocol's ping, answered
    /// by the peer (empty when the peer's own heartbeats are to be heard instead).
    pub fn new(every: Duration, probe: &'static [u8]) -> Liveness {
        Liveness {
            every,
            probe,
            timer: Box::pin(tokio::time::sleep(every)),
            armed_for: None,
            heard: false,
            silent: 0,
        }
    }

    /// The bytes to queue on [`Check::Probe`].
    pub fn probe(&self) -> &'static [u8] {
        self.probe
    }

    /// The peer was heard from (bytes read).
    #[inline]
    pub fn heard(&mut self) {
        self.heard = true;
    }

    /// A fresh connection: a full period of grace from now.
    pub fn restart(&mut self) {
        self.heard = false;
        self.silent = 0;
        if !self.every.is_zero() {
            self.timer.as_mut().reset(Instant::now() + self.every);
            self.armed_for = None;
        }
    }

    /// Called when the owner's I/O would block: `Ready` when it must act.
    pub fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Check> {
        if self.every.is_zero() {
            return Poll::Pending;
        }
        // Polled on every wait of a busy connection: skip the timer when it would only be
        // armed again for the same task (the timer wakes that task when it fires).
        if !self.timer.is_elapsed()
            && self
                .armed_for
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
        {
            return Poll::Pending;
        }
        self.armed_for = None;
        while self.timer.as_mut().poll(cx).is_ready() {
            // From now: a period counts as silent only while the owner waits on the peer (an
            // idle producer polls nothing, and its first wait after a pause gets a period).
            let next = Instant::now() + self.every;
            self.timer.as_mut().reset(next);
            if std::mem::take(&mut self.heard) {
                self.silent = 0;
                continue;
            }
            self.silent = self.silent.saturating_add(1);
            if self.silent >= 2 {
                return Poll::Ready(Check::Dead);
            }
            if !self.probe.is_empty() {
                return Poll::Ready(Check::Probe);
            }
        }
        self.armed_for = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The error a dead connection is dropped with.
    pub fn dead_error(&self) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "nothing heard from the server for {:?} (2 keep-alive periods): connection dropped",
                self.every * 2
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    #[tokio::test(start_paused = true)]
    async fn probes_then_declares_a_silent_peer_dead() {
        let mut l = Liveness::new(Duration::from_secs(1), b"PING\r\n");
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(l.poll(&mut cx), Poll::Pending);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(l.poll(&mut cx), Poll::Ready(Check::Probe));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(l.poll(&mut cx), Poll::Ready(Check::Dead));
        // Heard from: silence counts again from zero.
        l.restart();
        tokio::time::sleep(Duration::from_millis(1100)).await;
        l.heard();
        assert_eq!(l.poll(&mut cx), Poll::Pending);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(l.poll(&mut cx), Poll::Ready(Check::Probe));
        l.heard();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(l.poll(&mut cx), Poll::Pending);
        // No probe (the peer's heartbeats are heard instead): dead after two silent periods.
        let mut l = Liveness::new(Duration::from_secs(1), b"");
        tokio::time::sleep(Duration::from_millis(5100)).await;
        assert_eq!(l.poll(&mut cx), Poll::Pending);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(l.poll(&mut cx), Poll::Ready(Check::Dead));
        // Period 0: off.
        let mut l = Liveness::new(Duration::ZERO, b"");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(l.poll(&mut cx), Poll::Pending);
    }
}
