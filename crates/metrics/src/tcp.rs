//! What the kernel's TCP stack did for the generator's own connections.
//!
//! The generator's CPU and the broker's latency both depend on how many TCP segments a message
//! costs: a broker that writes every message as its own segment wakes its subscribers once per
//! message, and every small segment a socket reads unanswered makes the kernel send a bare ACK.
//! Retransmitted segments mean something was lost or acknowledged late, and each one is a wait
//! that shows up in the latency tail. None of this is visible from the messages themselves, so
//! the drivers' sockets read their counters from the kernel (`TCP_INFO`) as they close, and the
//! run reports the sum.

use serde::{Deserialize, Serialize};

/// Summed kernel counters of the TCP connections a run closed (plain and TLS; connections held
/// in io_uring tables have no descriptor to ask and are not included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpSummary {
    /// Connections whose counters are included.
    pub connections: u64,
    /// Segments sent, including bare ACKs and retransmissions.
    pub segs_out: u64,
    /// Segments received.
    pub segs_in: u64,
    /// Segments sent that carried data.
    pub data_segs_out: u64,
    /// Segments received that carried data.
    pub data_segs_in: u64,
    /// Segments sent again (the kernel's `tcpi_total_retrans`): lost ones, and also tail loss
    /// probes and timeouts when an acknowledgement was merely late (on loopback, a descheduled
    /// receiver).
    pub retransmitted: u64,
    /// Of [`connections`](Self::connections), those whose I/O went through a worker's
    /// io_uring (`--io batched`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub batched: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TcpSummary {
    /// Adds another set of connections (merging results files, or one more closed socket).
    pub fn add(&mut self, o: &TcpSummary) {
        self.connections += o.connections;
        self.segs_out += o.segs_out;
        self.segs_in += o.segs_in;
        self.data_segs_out += o.data_segs_out;
        self.data_segs_in += o.data_segs_in;
        self.retransmitted += o.retransmitted;
        self.batched += o.batched;
    }

    /// What was added since `earlier` (process-wide totals taken before and after a run).
    pub fn since(&self, earlier: &TcpSummary) -> TcpSummary {
        TcpSummary {
            connections: self.connections.saturating_sub(earlier.connections),
            segs_out: self.segs_out.saturating_sub(earlier.segs_out),
            segs_in: self.segs_in.saturating_sub(earlier.segs_in),
            data_segs_out: self.data_segs_out.saturating_sub(earlier.data_segs_out),
            data_segs_in: self.data_segs_in.saturating_sub(earlier.data_segs_in),
            retransmitted: self.retransmitted.saturating_sub(earlier.retransmitted),
            batched: self.batched.saturating_sub(earlier.batched),
        }
    }

    /// Segments sent that carried no data: in a data run almost all of them bare ACKs for small
    /// segments the generator read without answering (plus each connection's SYN and FIN).
    pub fn bare_out(&self) -> u64 {
        self.segs_out.saturating_sub(self.data_segs_out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_and_subtracts() {
        let a = TcpSummary {
            connections: 2,
            segs_out: 10,
            segs_in: 20,
            data_segs_out: 4,
            data_segs_in: 19,
            retransmitted: 1,
            batched: 1,
        };
        let mut b = a;
        b.add(&a);
        assert_eq!(b.connections, 4);
        assert_eq!(b.bare_out(), 12);
        assert_eq!(b.since(&a), a);
        assert_eq!(a.since(&b), TcpSummary::default());
    }
}
