//! The window of sent-but-unacknowledged messages of one producer, as a ring indexed by token,
//! so an ack finds its send time in O(1) without allocating.
//!
//! A message whose ack timed out is counted in doubt once, at its timeout, and its place is
//! free again; its slot remembers the token, though, so an ack that still comes later (a broker
//! back from a restart confirms what it had) is known for what it is and not counted a second
//! time, as confirmed: every message sent has exactly one outcome.

/// Marks a slot whose message expired (its token + 1 is kept in the other bits).
const EXPIRED: u64 = 1 << 63;

/// What an ack found in the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// The message was outstanding: its (sent, intended) times.
    Outstanding(u64, u64),
    /// Its ack timed out before: it was counted in doubt then, and stays so.
    Expired,
    /// Not in the window (never sent, acked before, or overwritten while outstanding).
    Unknown,
}

/// Send times (actual and intended) of outstanding messages, keyed by the token given to the
/// driver.
#[derive(Debug)]
pub struct InFlight {
    /// `(token + 1, sent_ns, intended_ns)`; token 0 stored as 1 so that 0 marks an empty slot.
    slots: Vec<(u64, u64, u64)>,
    mask: u64,
    len: usize,
    /// Lowest token that may still be outstanding (for cumulative acks).
    oldest: u64,
    /// Next token to be issued.
    next: u64,
    /// Outstanding entries overwritten before their ack arrived (their latency is not known).
    pub untracked: u64,
}

impl InFlight {
    /// A window that tracks up to `window` outstanding messages exactly.
    pub fn new(window: usize) -> Self {
        let cap = (window.max(1) * 2).next_power_of_two();
        Self {
            slots: vec![(0, 0, 0); cap],
            mask: cap as u64 - 1,
            len: 0,
            oldest: 0,
            next: 0,
            untracked: 0,
        }
    }

    /// Size of the ring (a power of two): tokens map to `token % capacity`.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Outstanding messages.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is outstanding.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `token` can be sent without overwriting an outstanding one. The producer waits for
    /// acks until it is: the window slides over token numbers, like TCP's, so a message whose ack
    /// is slow holds the window rather than losing track of its latency.
    #[inline]
    pub fn slot_free(&self, token: u64) -> bool {
        let t = self.slots[(token & self.mask) as usize].0;
        t == 0 || t & EXPIRED != 0
    }

    /// Drops every outstanding message sent before `deadline_ns`, returning how many (their acks
    /// timed out; the caller counts them as errors).
    pub fn expire(&mut self, deadline_ns: u64) -> u64 {
        let mut n = 0;
        for slot in self.slots.iter_mut() {
            if slot.0 != 0 && slot.0 & EXPIRED == 0 && slot.1 < deadline_ns {
                slot.0 |= EXPIRED;
                n += 1;
            }
        }
        self.len -= n as usize;
        n
    }

    /// Records that `token` was sent at `sent_ns`, meant for `intended_ns`. Tokens must be
    /// issued in increasing order.
    #[inline]
    pub fn push(&mut self, token: u64, sent_ns: u64, intended_ns: u64) {
        let slot = &mut self.slots[(token & self.mask) as usize];
        if slot.0 != 0 && slot.0 & EXPIRED == 0 {
            self.untracked += 1;
            self.len -= 1;
        }
        *slot = (token + 1, sent_ns, intended_ns);
        self.len += 1;
        self.next = token + 1;
    }

    /// Removes `token`, saying what it was.
    #[inline]
    pub fn take(&mut self, token: u64) -> Taken {
        let slot = &mut self.slots[(token & self.mask) as usize];
        if slot.0 == token + 1 {
            slot.0 = 0;
            self.len -= 1;
            Taken::Outstanding(slot.1, slot.2)
        } else if slot.0 == (token + 1) | EXPIRED {
            slot.0 = 0;
            Taken::Expired
        } else {
            Taken::Unknown
        }
    }

    /// Removes `token`, returning its (sent, intended) times if it was outstanding.
    #[inline]
    pub fn ack_one(&mut self, token: u64) -> Option<(u64, u64)> {
        match self.take(token) {
            Taken::Outstanding(sent, intended) => Some((sent, intended)),
            Taken::Expired | Taken::Unknown => None,
        }
    }

    /// Removes every outstanding token up to and including `token`, calling
    /// `f((sent_ns, intended_ns))` for each.
    pub fn ack_up_to(&mut self, token: u64, mut f: impl FnMut((u64, u64))) {
        let end = token.saturating_add(1).min(self.next);
        // Tokens older than the ring were already overwritten; skip them.
        let start = self
            .oldest
            .max(self.next.saturating_sub(self.slots.len() as u64));
        for t in start..end {
            if let Some(sent) = self.ack_one(t) {
                f(sent);
            }
        }
        self.oldest = self.oldest.max(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_and_cumulative_acks() {
        let mut w = InFlight::new(4);
        for t in 0..4 {
            w.push(t, 100 + t, 0);
        }
        assert_eq!(w.ack_one(2), Some((102, 0)));
        assert_eq!(w.ack_one(2), None, "an ack counts once");
        let mut seen = vec![];
        w.ack_up_to(3, |(s, _)| seen.push(s));
        assert_eq!(seen, vec![100, 101, 103]);
        assert!(w.is_empty());
    }

    #[test]
    fn slots_free_up_and_expire() {
        let mut w = InFlight::new(2); // capacity 4
        for t in 0..4 {
            assert!(w.slot_free(t));
            w.push(t, 100 + t, 0);
        }
        assert!(
            !w.slot_free(4),
            "token 4 would overwrite outstanding token 0"
        );
        assert_eq!(w.ack_one(0), Some((100, 0)));
        assert!(w.slot_free(4));
        assert_eq!(w.expire(102), 1, "token 1 (sent at 101) expired");
        assert_eq!(w.len(), 2);
        assert_eq!(w.ack_one(1), None);
    }

    #[test]
    fn a_late_ack_of_an_expired_message_is_known_as_such() {
        let mut w = InFlight::new(2); // capacity 4
        for t in 0..4 {
            w.push(t, 100 + t, 0);
        }
        assert_eq!(w.expire(102), 2, "tokens 0 and 1 expired");
        assert!(w.slot_free(4), "an expired message's place is free again");
        assert_eq!(w.take(0), Taken::Expired, "its ack came after all");
        assert_eq!(w.take(0), Taken::Unknown, "and counts once");
        assert_eq!(w.take(2), Taken::Outstanding(102, 0));
        w.push(5, 105, 0); // over expired token 1: counted at its timeout, not untracked
        assert_eq!(w.untracked, 0);
        assert_eq!(w.take(1), Taken::Unknown, "its slot went to token 5");
        assert_eq!(w.expire(1_000), 2, "tokens 3 and 5");
        assert_eq!(w.expire(1_000), 0, "an expired message expires once");
        assert!(w.is_empty());
    }

    #[test]
    fn overwrite_is_counted_not_misattributed() {
        let mut w = InFlight::new(1); // capacity 2
        w.push(0, 10, 0);
        w.push(1, 11, 0);
        w.push(2, 12, 0); // overwrites token 0's slot
        assert_eq!(w.untracked, 1);
        assert_eq!(w.ack_one(0), None);
        assert_eq!(w.ack_one(2), Some((12, 0)));
        assert_eq!(w.len(), 1);
    }
}
