//! Whether a client reaches the cluster, as the runner's `disconnected` / `reconnected` events.
//!
//! librdkafka reconnects on its own and never says that it did: it reports each broker
//! connection it loses as an error, and `AllBrokersDown` once none is left. A client that got
//! `AllBrokersDown` is counted disconnected, once per outage; the first message that goes
//! through afterwards (an acknowledged send, a received message) says it is back. So a broker
//! killed and restarted shows as one disconnection and one reconnection per client, like every
//! other driver's, and the fault matrix can tell that the cut was seen.

use msgbench_core::driver::{DriverEventKind, EventSink};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use std::sync::atomic::{AtomicBool, Ordering};

/// One client's reach (shared by librdkafka's callback thread and the client's own).
pub(crate) struct Reach {
    down: AtomicBool,
    events: EventSink,
    /// `producer 3`, `consumer 0`: how events name the client.
    client: String,
    /// The bootstrap servers, for the `reconnected` event.
    servers: String,
}

impl Reach {
    pub(crate) fn new(events: EventSink, client: String, servers: &str) -> Self {
        Self {
            down: AtomicBool::new(false),
            events,
            client,
            servers: servers.to_string(),
        }
    }

    /// An error librdkafka reported: an `error` event; `AllBrokersDown` is also the
    /// disconnection (once until the client is back).
    pub(crate) fn error(&self, error: &KafkaError, reason: &str) {
        self.events.emit(
            DriverEventKind::Error,
            format!("{}: {error}: {reason}", self.client),
        );
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown)
            && !self.down.swap(true, Ordering::AcqRel)
        {
            self.events
                .connection_lost(&self.client, &"every broker connection is down");
        }
    }

    /// A message went through: after an outage, the reconnection. One relaxed load otherwise
    /// (it runs for every message).
    #[inline]
    pub(crate) fn alive(&self) {
        if self.down.load(Ordering::Relaxed) && self.down.swap(false, Ordering::AcqRel) {
            self.events
                .reconnected(&self.client, &self.servers, " (messages go through again)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use msgbench_core::driver::DriverEvent;
    use rdkafka::types::RDKafkaErrorCode as Code;

    fn kinds(rx: &mut tokio::sync::mpsc::UnboundedReceiver<DriverEvent>) -> Vec<DriverEventKind> {
        let mut v = Vec::new();
        while let Ok(e) = rx.try_recv() {
            v.push(e.kind);
        }
        v
    }

    #[test]
    fn one_disconnection_and_one_reconnection_per_outage() {
        let (sink, mut rx) = EventSink::channel();
        let r = Reach::new(sink, "producer 0".into(), "127.0.0.1:9092");
        r.alive();
        assert!(kinds(&mut rx).is_empty(), "no outage, no event");
        let transport = KafkaError::Global(Code::BrokerTransportFailure);
        r.error(&transport, "disconnected");
        assert_eq!(kinds(&mut rx), [DriverEventKind::Error]);
        let down = KafkaError::Global(Code::AllBrokersDown);
        r.error(&down, "1/1 brokers are down");
        r.error(&down, "1/1 brokers are down");
        assert_eq!(
            kinds(&mut rx),
            [
                DriverEventKind::Error,
                DriverEventKind::Disconnected,
                DriverEventKind::Error
            ]
        );
        r.alive();
        r.alive();
        assert_eq!(kinds(&mut rx), [DriverEventKind::Reconnected]);
        r.error(&down, "again");
        r.alive();
        assert_eq!(
            kinds(&mut rx),
            [
                DriverEventKind::Error,
                DriverEventKind::Disconnected,
                DriverEventKind::Reconnected
            ]
        );
    }
}
