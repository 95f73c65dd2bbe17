//! Echo mode (`--echo`, `[ws] echo = true`): the target sends every message back on the
//! connection it came on, the way most WebSocket servers are first benchmarked. A producer
//! then keeps what it sent and not yet had back ([`Echoes`]), and every message the server
//! returns that carries one of them is that message's response: an ack to the runner, which
//! times it from the send (publish latency) and from the intended send time (the response
//! time, as for HTTP requests).
//!
//! An echo is recognised by its stamp (run, producer, stream and sequence number), not by its
//! place: a server that sends something else too (a greeting, a heartbeat of its own, another
//! client's messages when it broadcasts) does not shift which message is answered, and one
//! that drops a message leaves exactly that one unanswered, to be counted at the ack time-out.
//! Messages that carry no stamp of a message in flight are not responses and are dropped, as
//! in the producer's ordinary mode.

use crate::codec::Frame;
use crate::conn::Message;
use msgbench_core::driver::Ack;
use msgbench_core::stamp::Stamp;
use std::collections::VecDeque;

/// A producer's messages awaiting their echo, and the acks found but not yet handed over.
#[derive(Debug, Default)]
pub struct Echoes {
    /// `(stream, seq, token)` of every message sent and not echoed, oldest first: an echo is
    /// nearly always the first.
    pending: VecDeque<(u32, u64, u64)>,
    /// Acks read from the connection, handed to the runner one per `poll_ack`.
    ready: VecDeque<Ack>,
    /// A fragmented message being put together.
    message: Message,
    /// The run and producer this producer's stamps carry (from its first message).
    source: Option<(u32, u32)>,
}

impl Echoes {
    /// A message sent with `token`: its stamp is what its echo will be known by. A payload
    /// without a readable stamp (none of msgbench's own) can never be matched and is not kept.
    pub fn sent(&mut self, stream: u32, token: u64, payload: &[u8]) {
        if let Ok(s) = Stamp::find(payload) {
            self.source.get_or_insert((s.run_id, s.producer));
            self.pending.push_back((stream, s.seq, token));
        }
    }

    /// One data frame from the server: a whole message that echoes one in flight becomes an
    /// ack.
    pub fn received(&mut self, f: Frame) {
        let Some(m) = self.message.feed(f) else {
            return;
        };
        let Ok(s) = Stamp::find(&m) else { return };
        if self.source != Some((s.run_id, s.producer)) {
            return;
        }
        let key = (s.stream, s.seq);
        if let Some(at) = self
            .pending
            .iter()
            .position(|&(stream, seq, _)| (stream, seq) == key)
        {
            let (_, _, token) = self.pending.remove(at).expect("found above");
            self.ready.push_back(Ack::One { token, ok: true });
        }
    }

    /// The connection is gone: what it carried will not come back, and is in doubt (the
    /// server may have had it). A fragment begun on it is dropped.
    pub fn lost(&mut self) {
        self.message = Message::default();
        // Tokens are sent in increasing order: the newest is the highest.
        if let Some(&(_, _, up_to)) = self.pending.back() {
            self.pending.clear();
            self.ready.push_back(Ack::InDoubt { up_to });
        }
    }

    /// The next ack to hand over.
    pub fn next_ack(&mut self) -> Option<Ack> {
        self.ready.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn stamped(stream: u32, seq: u64, len: usize) -> Vec<u8> {
        from(0, stream, seq, len)
    }

    fn from(producer: u32, stream: u32, seq: u64, len: usize) -> Vec<u8> {
        let mut b = vec![7u8; len];
        Stamp {
            run_id: 1,
            producer,
            stream,
            seq,
            intended_ns: 5,
            sent_ns: 6,
        }
        .write(&mut b);
        b
    }

    fn frame(payload: &[u8], fin: bool, opcode: u8) -> Frame {
        Frame {
            fin,
            opcode,
            payload: Bytes::copy_from_slice(payload),
        }
    }

    #[test]
    fn echoes_are_matched_by_their_stamp_not_their_place() {
        let mut e = Echoes::default();
        for (token, seq) in [(10, 0), (11, 1), (12, 2)] {
            e.sent(0, token, &stamped(0, seq, 64));
        }
        // A greeting of the server's own, then the second message's echo, then the first's
        // in two fragments.
        e.received(frame(b"{\"hello\":1}", true, crate::codec::OP_TEXT));
        e.received(frame(&stamped(0, 1, 64), true, crate::codec::OP_BINARY));
        let first = stamped(0, 0, 64);
        e.received(frame(&first[..30], false, crate::codec::OP_BINARY));
        assert_eq!(
            e.next_ack(),
            Some(Ack::One {
                token: 11,
                ok: true
            })
        );
        assert_eq!(e.next_ack(), None);
        e.received(frame(&first[30..], true, crate::codec::OP_CONT));
        assert_eq!(
            e.next_ack(),
            Some(Ack::One {
                token: 10,
                ok: true
            })
        );
        // An echo of something not in flight (sent twice by the server) is no ack.
        e.received(frame(&first, true, crate::codec::OP_BINARY));
        assert_eq!(e.next_ack(), None);
        // The connection goes: the third is in doubt, once.
        e.lost();
        assert_eq!(e.next_ack(), Some(Ack::InDoubt { up_to: 12 }));
        e.lost();
        assert_eq!(e.next_ack(), None);
    }

    #[test]
    fn the_same_sequence_elsewhere_is_another_message() {
        let mut e = Echoes::default();
        e.sent(0, 1, &stamped(0, 0, 48));
        e.sent(1, 2, &stamped(1, 0, 48));
        // Another producer's message of the same stream and sequence (a server that
        // broadcasts) answers nothing.
        e.received(frame(&from(3, 1, 0, 48), true, crate::codec::OP_BINARY));
        assert_eq!(e.next_ack(), None);
        e.received(frame(&stamped(1, 0, 48), true, crate::codec::OP_BINARY));
        assert_eq!(e.next_ack(), Some(Ack::One { token: 2, ok: true }));
    }
}
