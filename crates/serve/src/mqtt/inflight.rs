//! QoS ≥ 1 deliveries to one client that it has not yet acknowledged: their packet ids, how
//! many there are against the client's receive maximum, and, for a persistent session, the
//! messages themselves, re-sent when the session resumes on a new connection [MQTT-4.4.0-1].
//!
//! The connection's writer claims an id per QoS ≥ 1 PUBLISH; its reader releases it on PUBACK,
//! on PUBCOMP, or on a PUBREC refusing the message (MQTT 5 reason ≥ 0x80). A clean session
//! keeps only the ids (one bit each, atomics shared by the two tasks, nothing locked); a
//! persistent one also keeps each message, in the order sent, behind a lock both tasks take
//! once per message.

use super::session::{Msg, Unacked, lock};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use tokio::sync::Notify;

/// The unacknowledged deliveries of one connection (see the module doc).
pub(crate) struct Inflight {
    /// One bit per packet id, allocated on the first QoS ≥ 1 delivery.
    bits: OnceLock<Box<[AtomicU64]>>,
    /// Ids claimed and not released.
    count: AtomicU32,
    /// The client's receive maximum [MQTT-3.3.4-9]: at most this many at once.
    max: u32,
    /// Woken when an id is released at `max` (the writer may be waiting).
    freed: Notify,
    /// A persistent session's unacknowledged messages, oldest first.
    kept: Option<Mutex<VecDeque<Unacked>>>,
}

impl Inflight {
    /// For a client that accepts `receive_max` unacknowledged messages (65,535 when it did not
    /// say); `persistent`: its session outlives the connection, so the messages are kept.
    pub fn new(receive_max: Option<u16>, persistent: bool) -> Inflight {
        Inflight {
            bits: OnceLock::new(),
            count: AtomicU32::new(0),
            max: u32::from(receive_max.unwrap_or(u16::MAX)),
            freed: Notify::new(),
            kept: persistent.then(|| Mutex::new(VecDeque::new())),
        }
    }

    fn words(&self) -> &[AtomicU64] {
        // Bit 0 (packet id 0) is never free.
        self.bits.get_or_init(|| {
            (0..1024)
                .map(|i| AtomicU64::new(u64::from(i == 0)))
                .collect()
        })
    }

    /// Whether another QoS ≥ 1 message may be sent now.
    pub fn open(&self) -> bool {
        self.count.load(Relaxed) < self.max
    }

    /// Resolves once an id has been released (after [`Inflight::open`] said no).
    pub async fn freed(&self) {
        self.freed.notified().await;
    }

    /// The first free id from `start` on (wrapping), claimed for `m`; `start` itself if every
    /// id is taken, which only a client that acknowledges nothing and announced no receive
    /// maximum causes.
    pub fn claim(&self, start: u16, m: &Msg) -> u16 {
        let words = self.words();
        let mut p = usize::from(start);
        let mut pid = start;
        for _ in 0..=words.len() {
            let i = p / 64;
            let free = !words[i].load(Relaxed) & (!0u64 << (p % 64));
            if free != 0 {
                let bit = free.trailing_zeros();
                words[i].fetch_or(1 << bit, Relaxed);
                pid = (i * 64 + bit as usize) as u16;
                break;
            }
            p = (i + 1) % words.len() * 64;
        }
        self.count.fetch_add(1, Relaxed);
        if let Some(kept) = &self.kept {
            lock(kept).push_back(Unacked::Publish(pid, m.clone()));
        }
        pid
    }

    /// Claims the id of `u`, re-sent on this connection from the session's last one.
    pub fn resume(&self, u: &Unacked) {
        let pid = u.pid();
        self.words()[usize::from(pid / 64)].fetch_or(1 << (pid % 64), Relaxed);
        self.count.fetch_add(1, Relaxed);
        if let Some(kept) = &self.kept {
            lock(kept).push_back(u.clone());
        }
    }

    /// The delivery with id `pid` is done (PUBACK, PUBCOMP, a refusing PUBREC).
    pub fn release(&self, pid: u16) {
        let Some(words) = self.bits.get() else { return };
        if pid == 0 {
            return;
        }
        let bit = 1 << (pid % 64);
        if words[usize::from(pid / 64)].fetch_and(!bit, Relaxed) & bit == 0 {
            // Not ours (a stray acknowledgement): nothing to count.
            return;
        }
        let before = self.count.fetch_sub(1, Relaxed);
        if let Some(kept) = &self.kept {
            let mut kept = lock(kept);
            // Acknowledgements mostly come in order: the oldest is the one.
            if let Some(i) = kept.iter().position(|u| u.pid() == pid) {
                kept.remove(i);
            }
        }
        if before >= self.max {
            // The writer may be waiting for this one.
            self.freed.notify_one();
        }
    }

    /// QoS 2: the client has the message (PUBREC); its PUBREL is what is re-sent from now on.
    pub fn received(&self, pid: u16) {
        if let Some(kept) = &self.kept
            && let Some(u) = lock(kept).iter_mut().find(|u| u.pid() == pid)
        {
            *u = Unacked::Released(pid);
        }
    }

    /// What is still unacknowledged, for the session to keep when the connection ends.
    pub fn take_kept(&self) -> VecDeque<Unacked> {
        self.kept
            .as_ref()
            .map(|k| std::mem::take(&mut *lock(k)))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn msg() -> Msg {
        Msg {
            topic: Bytes::from_static(b"t"),
            payload: Bytes::from_static(b"p"),
            qos: 1,
            retain: false,
            props: None,
        }
    }

    /// Ids are claimed in turn against the receive maximum; releasing frees one, and a
    /// persistent session keeps what is still unacknowledged, QoS 2 ones past PUBREC as their
    /// PUBREL, in the order sent.
    #[test]
    fn ids_count_against_the_receive_maximum_and_unacknowledged_are_kept() {
        let f = Inflight::new(Some(2), true);
        let m = msg();
        assert_eq!((f.claim(1, &m), f.claim(2, &m)), (1, 2));
        assert!(!f.open());
        f.release(1);
        assert!(f.open());
        f.release(1);
        assert_eq!(
            f.count.load(Relaxed),
            1,
            "a stray acknowledgement counts nothing"
        );
        assert_eq!(f.claim(3, &m), 3);
        f.received(2);
        let kept: Vec<_> = f
            .take_kept()
            .iter()
            .map(|u| (u.pid(), u.is_publish()))
            .collect();
        assert_eq!(kept, [(2, false), (3, true)]);
        let clean = Inflight::new(None, false);
        assert_eq!(clean.claim(7, &m), 7);
        assert!(clean.open());
        assert!(clean.take_kept().is_empty());
    }
}
