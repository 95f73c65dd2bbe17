//! Plain counters kept by every task and summed exactly when snapshots merge.

use serde::{Deserialize, Serialize};

/// Why an operation failed, as a small closed set so that counting an error on the hot path is an
/// array increment rather than a formatted string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Could not connect, or a connection was refused.
    Connect,
    /// The client refused or failed to send a message.
    Send,
    /// The broker negatively acknowledged a message, or an ack failed.
    Nack,
    /// Receiving failed (the subscription broke, the client reported an error).
    Receive,
    /// An operation or acknowledgement timed out, or an ack can no longer come (its connection
    /// is gone): the message is in doubt.
    Timeout,
    /// The connection dropped.
    Disconnect,
    /// The peer broke the protocol, or sent something we could not use.
    Protocol,
}

impl ErrorKind {
    /// Every kind, in the order of [`ErrorCounts`]' fields.
    pub const ALL: [ErrorKind; 7] = [
        ErrorKind::Connect,
        ErrorKind::Send,
        ErrorKind::Nack,
        ErrorKind::Receive,
        ErrorKind::Timeout,
        ErrorKind::Disconnect,
        ErrorKind::Protocol,
    ];
}

/// Why a connection attempt failed, so connection-scale runs can say which limit was hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectFailure {
    /// Nothing listens there (connection refused).
    Refused,
    /// No answer (TCP or handshake) within the connect timeout.
    Timeout,
    /// The peer reset or closed the connection during the handshake.
    Reset,
    /// This process ran out of file descriptors (`ulimit -n`).
    NoFds,
    /// No local port left for this destination (add source addresses or widen the range).
    NoPorts,
    /// The TLS handshake failed (certificate, protocol).
    Tls,
    /// The server refused the protocol handshake (authentication, limits, client id).
    Rejected,
    /// Anything else.
    Other,
}

impl ConnectFailure {
    /// Every cause, in the order of [`ConnectFailures`]' fields.
    pub const ALL: [ConnectFailure; 8] = [
        ConnectFailure::Refused,
        ConnectFailure::Timeout,
        ConnectFailure::Reset,
        ConnectFailure::NoFds,
        ConnectFailure::NoPorts,
        ConnectFailure::Tls,
        ConnectFailure::Rejected,
        ConnectFailure::Other,
    ];

    /// The snake_case name used in the results file.
    pub fn name(self) -> &'static str {
        match self {
            ConnectFailure::Refused => "refused",
            ConnectFailure::Timeout => "timeout",
            ConnectFailure::Reset => "reset",
            ConnectFailure::NoFds => "no_fds",
            ConnectFailure::NoPorts => "no_ports",
            ConnectFailure::Tls => "tls",
            ConnectFailure::Rejected => "rejected",
            ConnectFailure::Other => "other",
        }
    }
}

/// Failed connection attempts by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectFailures {
    /// See [`ConnectFailure::Refused`].
    pub refused: u64,
    /// See [`ConnectFailure::Timeout`].
    pub timeout: u64,
    /// See [`ConnectFailure::Reset`].
    pub reset: u64,
    /// See [`ConnectFailure::NoFds`].
    pub no_fds: u64,
    /// See [`ConnectFailure::NoPorts`].
    pub no_ports: u64,
    /// See [`ConnectFailure::Tls`].
    pub tls: u64,
    /// See [`ConnectFailure::Rejected`].
    pub rejected: u64,
    /// See [`ConnectFailure::Other`].
    pub other: u64,
}

impl ConnectFailures {
    fn slot(&mut self, c: ConnectFailure) -> &mut u64 {
        match c {
            ConnectFailure::Refused => &mut self.refused,
            ConnectFailure::Timeout => &mut self.timeout,
            ConnectFailure::Reset => &mut self.reset,
            ConnectFailure::NoFds => &mut self.no_fds,
            ConnectFailure::NoPorts => &mut self.no_ports,
            ConnectFailure::Tls => &mut self.tls,
            ConnectFailure::Rejected => &mut self.rejected,
            ConnectFailure::Other => &mut self.other,
        }
    }

    /// Counts one failure.
    pub fn add(&mut self, c: ConnectFailure, n: u64) {
        *self.slot(c) += n;
    }

    /// The count for one cause.
    pub fn get(&self, c: ConnectFailure) -> u64 {
        let mut me = *self;
        *me.slot(c)
    }

    /// All failures.
    pub fn total(&self) -> u64 {
        ConnectFailure::ALL.iter().map(|c| self.get(*c)).sum()
    }

    /// Adds another set of counts into this one.
    pub fn merge(&mut self, o: &ConnectFailures) {
        for c in ConnectFailure::ALL {
            self.add(c, o.get(c));
        }
    }

    fn is_zero(&self) -> bool {
        self.total() == 0
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Error counts by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorCounts {
    /// See [`ErrorKind::Connect`].
    pub connect: u64,
    /// See [`ErrorKind::Send`].
    pub send: u64,
    /// See [`ErrorKind::Nack`].
    pub nack: u64,
    /// See [`ErrorKind::Receive`].
    pub receive: u64,
    /// See [`ErrorKind::Timeout`].
    pub timeout: u64,
    /// See [`ErrorKind::Disconnect`].
    pub disconnect: u64,
    /// See [`ErrorKind::Protocol`].
    pub protocol: u64,
}

impl ErrorCounts {
    /// Counts one error of `kind`.
    #[inline]
    pub fn add(&mut self, kind: ErrorKind, n: u64) {
        let slot = match kind {
            ErrorKind::Connect => &mut self.connect,
            ErrorKind::Send => &mut self.send,
            ErrorKind::Nack => &mut self.nack,
            ErrorKind::Receive => &mut self.receive,
            ErrorKind::Timeout => &mut self.timeout,
            ErrorKind::Disconnect => &mut self.disconnect,
            ErrorKind::Protocol => &mut self.protocol,
        };
        *slot += n;
    }

    /// The count for one kind.
    pub fn get(&self, kind: ErrorKind) -> u64 {
        match kind {
            ErrorKind::Connect => self.connect,
            ErrorKind::Send => self.send,
            ErrorKind::Nack => self.nack,
            ErrorKind::Receive => self.receive,
            ErrorKind::Timeout => self.timeout,
            ErrorKind::Disconnect => self.disconnect,
            ErrorKind::Protocol => self.protocol,
        }
    }

    /// All errors of every kind.
    pub fn total(&self) -> u64 {
        ErrorKind::ALL.iter().map(|k| self.get(*k)).sum()
    }

    /// Adds another set of counts into this one.
    pub fn merge(&mut self, other: &ErrorCounts) {
        for k in ErrorKind::ALL {
            self.add(k, other.get(k));
        }
    }
}

/// Counts kept by one task for one interval. Every field is a plain sum, so merging snapshots is
/// exact whatever the order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counters {
    /// Messages handed to the client.
    pub sent: u64,
    /// Payload bytes handed to the client.
    pub sent_bytes: u64,
    /// Messages the system confirmed (broker ack, reply received).
    pub acked: u64,
    /// Messages the system refused, or whose ack failed.
    pub nacked: u64,
    /// Sends that went out more than the late threshold after their intended time: the generator
    /// (or backpressure) could not keep the schedule.
    pub late_sends: u64,
    /// Deliveries of our own stamped messages (duplicates included).
    pub received: u64,
    /// Payload bytes of those deliveries.
    pub received_bytes: u64,
    /// Deliveries that were not ours: no stamp, a truncated stamp, or another run's stamp.
    pub foreign: u64,
    /// Sequence numbers skipped over at a consumer (may be filled later by a reordered arrival).
    pub gaps_opened: u64,
    /// Gaps filled by a late (reordered) arrival.
    pub gaps_filled: u64,
    /// Deliveries of a sequence number this consumer had already seen.
    pub duplicated: u64,
    /// Deliveries that arrived after a higher sequence number of the same stream.
    pub reordered: u64,
    /// Deliveries the broker flagged as redelivered.
    pub redelivered: u64,
    /// Reconnections of a client to the system under test.
    pub reconnects: u64,
    /// Errors, by kind.
    pub errors: ErrorCounts,
    /// Connections opened (TCP, TLS and protocol handshake done). Connection workloads only.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub connects: u64,
    /// Connections closed by msgbench.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub closes: u64,
    /// Held connections the server or the network dropped.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: u64,
    /// Messages the system handed back as unroutable (AMQP basic.return of a mandatory publish):
    /// accepted from the client, but no queue took them, so no consumer will see them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub returned: u64,
    /// Failed connection attempts, by cause.
    #[serde(default, skip_serializing_if = "ConnectFailures::is_zero")]
    pub connect_failures: ConnectFailures,
}

impl Counters {
    /// Adds another task's counts into these.
    pub fn merge(&mut self, o: &Counters) {
        self.sent += o.sent;
        self.sent_bytes += o.sent_bytes;
        self.acked += o.acked;
        self.nacked += o.nacked;
        self.late_sends += o.late_sends;
        self.received += o.received;
        self.received_bytes += o.received_bytes;
        self.foreign += o.foreign;
        self.gaps_opened += o.gaps_opened;
        self.gaps_filled += o.gaps_filled;
        self.duplicated += o.duplicated;
        self.reordered += o.reordered;
        self.redelivered += o.redelivered;
        self.reconnects += o.reconnects;
        self.errors.merge(&o.errors);
        self.connects += o.connects;
        self.closes += o.closes;
        self.dropped += o.dropped;
        self.returned += o.returned;
        self.connect_failures.merge(&o.connect_failures);
    }

    /// Distinct deliveries (every delivery except duplicates).
    pub fn distinct_received(&self) -> u64 {
        self.received.saturating_sub(self.duplicated)
    }

    /// Gaps still open: sequence numbers skipped and not (yet) filled. Live "lost" figure for
    /// fan-out subscriptions; the final loss comes from [`crate::aggregate::Integrity`].
    pub fn open_gaps(&self) -> u64 {
        self.gaps_opened.saturating_sub(self.gaps_filled)
    }
}
