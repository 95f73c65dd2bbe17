//! Keep-alive of a receiving connection: a ping after a keep-alive period in which the server
//! sent nothing, and the connection failed after a second such period.
//!
//! A WebSocket client that only listens writes nothing for as long as its feed is quiet, and
//! the proxies and load balancers in front of real gateways close connections idle for a
//! minute or so (nginx's `proxy_read_timeout`, 60 s; AWS ALB, 60 s), while a server that died
//! without a FIN leaves such a client waiting for ever. So a connection that heard nothing
//! for `--keep-alive` sends a ping (RFC 6455 §5.5.2; every server must answer it with a
//! pong), and one that heard nothing — not even that pong — for another period is failed
//! and reconnected, as the MQTT and AMQP drivers do with their own heartbeats.
//!
//! The cost is one timer per connection, reset once per period (not per frame: a frame only
//! sets a flag that the timer reads when it fires), so a receiver at full rate pays a store
//! per frame.

use std::pin::Pin;
use std::task::Context;
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// What the keep-alive asks of its connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Tick {
    /// Nothing to do now (the timer is armed).
    Wait,
    /// Send a ping.
    Ping,
    /// Nothing came for two periods: fail the connection.
    Dead,
}

/// One connection's keep-alive timer.
#[derive(Debug)]
pub struct KeepAlive {
    period: Duration,
    /// Boxed: the connection lives in every receiving task, and most of them wait here.
    sleep: Pin<Box<Sleep>>,
    /// A frame arrived since the timer was last armed.
    heard: bool,
    /// A ping went out when the timer was last armed, and nothing came since.
    pinged: bool,
}

impl KeepAlive {
    /// A keep-alive of `period`, starting now.
    pub fn new(period: Duration) -> KeepAlive {
        KeepAlive {
            period,
            sleep: Box::pin(tokio::time::sleep(period)),
            heard: false,
            pinged: false,
        }
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// A frame arrived.
    #[inline]
    pub fn heard(&mut self) {
        self.heard = true;
    }

    /// A new connection: a full period before the first ping.
    pub fn restart(&mut self) {
        (self.heard, self.pinged) = (false, false);
        self.sleep.as_mut().reset(Instant::now() + self.period);
    }

    /// Polls the timer (its waker registered whenever the answer is `Wait`).
    pub fn poll(&mut self, cx: &mut Context<'_>) -> Tick {
        let mut tick = Tick::Wait;
        while self.sleep.as_mut().poll(cx).is_ready() {
            if self.heard {
                (self.heard, self.pinged) = (false, false);
            } else if !self.pinged {
                self.pinged = true;
                tick = Tick::Ping;
            } else {
                return Tick::Dead;
            }
            self.sleep.as_mut().reset(Instant::now() + self.period);
        }
        tick
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::task::Poll;

    async fn next(ka: &mut KeepAlive) -> Tick {
        poll_fn(|cx| match ka.poll(cx) {
            Tick::Wait => Poll::Pending,
            t => Poll::Ready(t),
        })
        .await
    }

    #[tokio::test(start_paused = true)]
    async fn quiet_pings_then_dies_and_hearing_keeps_it_alive() {
        let t0 = Instant::now();
        let mut ka = KeepAlive::new(Duration::from_secs(30));
        assert_eq!(next(&mut ka).await, Tick::Ping);
        assert_eq!(t0.elapsed(), Duration::from_secs(30));
        assert_eq!(next(&mut ka).await, Tick::Dead);
        assert_eq!(t0.elapsed(), Duration::from_secs(60));

        // Frames in every period: never a ping.
        ka.restart();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(29)).await;
            ka.heard();
            assert_eq!(ka.poll(&mut cx), Tick::Wait);
        }
        // Quiet again: a ping within two periods; its pong heard keeps the connection alive
        // (the next quiet period pings again instead of failing it).
        let t1 = Instant::now();
        assert_eq!(next(&mut ka).await, Tick::Ping);
        assert!(
            t1.elapsed() <= Duration::from_secs(60),
            "{:?}",
            t1.elapsed()
        );
        ka.heard();
        assert_eq!(next(&mut ka).await, Tick::Ping);
        assert_eq!(next(&mut ka).await, Tick::Dead);
    }
}
