//! The send time of a producer's messages: one clock reading serves a burst.
//!
//! A send's time is its intended time (the pacer's, or for an unpaced run the moment the
//! window let it go) and the moment it was handed to the client. Within a burst of unpaced
//! sends that nothing held up (no wait for the ack window, the stage gate or the socket),
//! every message was due at the same instant, the one the burst began: the window opened
//! then. Reading the clock once for up to [`BURST`] such sends measures exactly that, and on
//! pipelined protocols saves a reading that costs about as much as the rest of the send's
//! accounting (the vDSO's `clock_gettime`, about 7% of a Redis producer's CPU). A paced send
//! takes the reading its pace took, when that wait ended without another in between.
//!
//! What a reading may be off by is bounded by the burst: at most [`BURST`] sends' own
//! encoding time (microseconds), never a wait, because every wait forgets the reading.

use crate::clock::now_ns;

/// How many unpaced sends one clock reading serves at most.
pub(super) const BURST: u32 = 16;

/// The clock reading that the next send may take instead of its own.
#[derive(Debug, Default)]
pub(super) struct SendClock {
    at: u64,
    /// Sends that may still take `at`.
    uses_left: u32,
}

impl SendClock {
    /// The next send's time: the held reading while it may still serve, else a new one that
    /// serves `then` sends after this one.
    #[inline]
    pub fn read(&mut self, then: u32) -> u64 {
        if self.uses_left > 0 {
            self.uses_left -= 1;
            return self.at;
        }
        self.at = now_ns();
        self.uses_left = then;
        self.at
    }

    /// `at` (just read by a wait that ended now) serves the next send only.
    #[inline]
    pub fn hold_once(&mut self, at: u64) {
        self.at = at;
        self.uses_left = 1;
    }

    /// Something waited: the next send reads the clock.
    #[inline]
    pub fn forget(&mut self) {
        self.uses_left = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_reading_serves_a_burst_then_a_new_one_is_taken() {
        let mut c = SendClock::default();
        let first = c.read(3);
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_eq!([c.read(3), c.read(3), c.read(3)], [first; 3]);
        let next = c.read(3);
        assert!(next >= first + 2_000_000, "{first} {next}");
    }

    #[test]
    fn a_wait_forgets_the_reading() {
        let mut c = SendClock::default();
        let first = c.read(BURST);
        std::thread::sleep(std::time::Duration::from_millis(2));
        c.forget();
        assert!(c.read(BURST) > first);
        // A reading held once serves one send.
        c.hold_once(7);
        assert_eq!(c.read(0), 7);
        assert_ne!(c.read(0), 7);
    }
}
