//! A virtual user of a journey workload (`[connections] mode = "journey"`): its own task, running
//! the plan's steps ([`crate::scenario::journey`]) `repeat` times, then saying it is done.
//!
//! It reports the way held connections do: each `connect` through [`attempt`] (the connect
//! latency, or the failure by cause), the rest through [`Levels`]' atomics (held, closed,
//! dropped, published, received). A failed `connect` abandons the pass and waits a second
//! before the next (a refused server would otherwise be hammered in a loop), as does a refused
//! `subscribe` (the session is closed politely and the refusal counted); a session that fails
//! while publishing or waiting is counted as dropped and the pass is abandoned likewise. What
//! the session's subscriptions deliver is counted after every step. A request's reply is
//! reported to the coordinator ([`Attempt::Replied`]), which records its round trip (from the
//! send, and from the intended send time of a paced step); a request unanswered within the
//! ack time-out is counted as timed out and the step goes on. The close
//! signal (the run's drain) ends the journey where it is, closing an open session politely.

use super::{Attempt, Levels, attempt};
use crate::clock::now_ns;
use crate::driver::{Driver, Session, SessionSpec};
use crate::rng::Rng;
use crate::scenario::journey::{Publish, Step};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// What a virtual user needs besides its driver.
pub(super) struct JourneyTask {
    pub levels: Arc<Levels>,
    pub close: watch::Receiver<bool>,
    pub steps: Arc<[Step]>,
    /// Passes to run (0: until the close signal).
    pub repeat: u32,
    pub payload: Arc<[u8]>,
    /// Draws exponential think times; seeded by the user's id.
    pub rng: Rng,
    /// How long a request waits for its reply.
    pub request_timeout: Duration,
}

/// How a wait or a step ended.
enum Flow {
    /// On to the next step.
    Go,
    /// The session failed (counted as dropped): the pass is abandoned.
    Lost,
    /// The close signal: the journey ends.
    Closed,
}

/// Runs one virtual user's journey to its end (or the close signal), then answers
/// [`Attempt::JourneyDone`].
pub(super) async fn run_journey<D: Driver>(
    d: Arc<D>,
    spec: SessionSpec,
    timeout: Duration,
    tx: mpsc::UnboundedSender<Attempt>,
    mut t: JourneyTask,
) {
    let mut session: Option<D::Session> = None;
    let mut pass = 0u32;
    let own_topic = spec.topic.clone();
    'passes: while t.repeat == 0 || pass < t.repeat {
        pass += 1;
        for step in t.steps.clone().iter() {
            if *t.close.borrow() {
                break 'passes;
            }
            let flow = match step {
                Step::Connect => {
                    session = attempt(&*d, &spec, timeout, &tx, None, &t.levels).await;
                    if session.is_none() {
                        // Refused: wait before the next pass rather than hammer the server.
                        match t.wait(&mut session, Instant::now() + RETRY).await {
                            Flow::Closed => break 'passes,
                            _ => continue 'passes,
                        }
                    }
                    Flow::Go
                }
                Step::Disconnect => {
                    t.close_session(&mut session).await;
                    Flow::Go
                }
                Step::Subscribe(topic) => {
                    let topic = topic.as_deref().unwrap_or(&own_topic);
                    match t.subscribe(&mut session, topic).await {
                        Flow::Lost => match t.wait(&mut session, Instant::now() + RETRY).await {
                            Flow::Closed => break 'passes,
                            _ => continue 'passes,
                        },
                        other => other,
                    }
                }
                Step::Publish(p) => t.send(&mut session, p, None).await,
                Step::Request(p) => t.send(&mut session, p, Some(&tx)).await,
                Step::Sleep { mean, exponential } => {
                    let d = if *exponential {
                        mean.mul_f64(-t.rng.next_f64_open0().ln())
                    } else {
                        *mean
                    };
                    t.wait(&mut session, Instant::now() + d).await
                }
            };
            t.count_received(&mut session);
            match flow {
                Flow::Go => {}
                Flow::Lost => continue 'passes,
                Flow::Closed => break 'passes,
            }
        }
    }
    // A journey that ends connected holds its session until the close signal.
    if session.is_some() && !*t.close.borrow() {
        let _ = t
            .wait(
                &mut session,
                Instant::now() + Duration::from_secs(365 * 86_400),
            )
            .await;
    }
    t.close_session(&mut session).await;
    let _ = tx.send(Attempt::JourneyDone);
}

/// The wait after a failed connect.
const RETRY: Duration = Duration::from_secs(1);

impl JourneyTask {
    /// Adds what the session's subscriptions delivered since the last count.
    fn count_received<S: Session>(&self, session: &mut Option<S>) {
        if let Some(s) = session.as_mut() {
            let (n, bytes) = s.take_received();
            if n > 0 {
                self.levels.received.fetch_add(n, Relaxed);
                self.levels.received_bytes.fetch_add(bytes, Relaxed);
            }
        }
    }

    /// A subscribe step; a refusal is counted, and the session closed politely (the pass is
    /// abandoned: it was built on the subscription).
    async fn subscribe<S: Session>(&mut self, session: &mut Option<S>, topic: &str) -> Flow {
        let Some(s) = session.as_mut() else {
            return Flow::Lost;
        };
        let r = tokio::select! {
            r = s.subscribe(topic) => r,
            // The run's drain: the journey ends here (the caller closes the session).
            _ = self.close.changed() => return Flow::Closed,
        };
        match r {
            Ok(()) => Flow::Go,
            Err(_) => {
                self.levels.subscribe_errors.fetch_add(1, Relaxed);
                self.close_session(session).await;
                Flow::Lost
            }
        }
    }

    /// Closes the open session, if any, the polite way (counted as closed).
    async fn close_session<S: Session>(&self, session: &mut Option<S>) {
        self.count_received(session);
        if let Some(s) = session.take() {
            let _ = s.close().await;
            self.levels.held.fetch_sub(1, Relaxed);
            self.levels.closed.fetch_add(1, Relaxed);
        }
    }

    /// The open session failed: gone, counted as dropped; the pass is abandoned.
    fn lose_session<S: Session>(&self, session: &mut Option<S>) -> Flow {
        self.count_received(session);
        *session = None;
        self.levels.held.fetch_sub(1, Relaxed);
        self.levels.dropped.fetch_add(1, Relaxed);
        Flow::Lost
    }

    /// Waits until `until`, keeping an open session alive (heartbeats, the server's pings);
    /// ends early at the close signal or when the session fails (then dropped and counted).
    async fn wait<S: Session>(&mut self, session: &mut Option<S>, until: Instant) -> Flow {
        if *self.close.borrow() {
            return Flow::Closed;
        }
        let sleep = tokio::time::sleep_until(until);
        match session.as_mut() {
            Some(s) => tokio::select! {
                _ = sleep => Flow::Go,
                _ = self.close.changed() => Flow::Closed,
                _ = s.keep_alive() => self.lose_session(session),
            },
            None => tokio::select! {
                _ = sleep => Flow::Go,
                _ = self.close.changed() => Flow::Closed,
            },
        }
    }

    /// A publish step, or a request step (`replies`: where answered requests are reported):
    /// its messages, paced from the step's start when it has a rate.
    async fn send<S: Session>(
        &mut self,
        session: &mut Option<S>,
        p: &Publish,
        replies: Option<&mpsc::UnboundedSender<Attempt>>,
    ) -> Flow {
        let (count, gap) = match *p {
            Publish::Count { count, rate } => (count, rate.map(|r| 1.0 / r)),
            Publish::For { duration, rate } => (
                (duration.as_secs_f64() * rate).ceil() as u64,
                Some(1.0 / rate),
            ),
        };
        let start = Instant::now();
        let start_ns = now_ns();
        // The drain began while a request waited: its account is kept, then the step stops.
        let mut stop_after = false;
        for i in 0..count {
            let offset = gap.map(|g| Duration::from_secs_f64(i as f64 * g));
            if let Some(off) = offset.filter(|_| i > 0) {
                match self.wait(session, start + off).await {
                    Flow::Go => {}
                    other => return other,
                }
            } else if *self.close.borrow() {
                return Flow::Closed;
            }
            let Some(s) = session.as_mut() else {
                return Flow::Lost;
            };
            let l = &self.levels;
            let sent_ns = now_ns();
            let r = match replies {
                None => s.publish(&self.payload).await.map(|()| true),
                Some(_) => {
                    let wait = tokio::time::timeout(self.request_timeout, s.request(&self.payload));
                    tokio::pin!(wait);
                    let r = tokio::select! {
                        r = &mut wait => r,
                        // The run's drain began: this request's reply is still waited for (the
                        // time-out or the drain's end bounds it), then the journey stops.
                        _ = self.close.changed() => {
                            stop_after = true;
                            wait.await
                        }
                    };
                    match r {
                        Ok(r) => r.map(|()| true),
                        Err(_) => Ok(false),
                    }
                }
            };
            match r {
                Ok(answered) => {
                    l.published.fetch_add(1, Relaxed);
                    l.published_bytes
                        .fetch_add(self.payload.len() as u64, Relaxed);
                    match replies {
                        Some(tx) if answered => {
                            let intended_ns =
                                offset.map_or(sent_ns, |o| start_ns + o.as_nanos() as u64);
                            let _ = tx.send(Attempt::Replied {
                                sent_ns,
                                intended_ns: intended_ns.min(sent_ns),
                                at_ns: now_ns(),
                            });
                        }
                        Some(_) => {
                            l.request_timeouts.fetch_add(1, Relaxed);
                        }
                        None => {}
                    }
                }
                Err(_) => {
                    l.publish_errors.fetch_add(1, Relaxed);
                    return self.lose_session(session);
                }
            }
            if stop_after {
                return Flow::Closed;
            }
        }
        Flow::Go
    }
}
