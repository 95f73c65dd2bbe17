//! Connection workloads on Kafka (`--hold`, `--storm`): a session is one librdkafka producer
//! instance, the unit a Kafka application connects with. "Connected" means its bootstrap
//! connection answered a metadata request for the session's topic (so the broker connection
//! is up and the topic known); a publish waits for the broker's acknowledgement; keeping alive
//! asks for metadata every few seconds, so a broker that went away is noticed and counted as a
//! dropped connection. librdkafka runs a few threads per instance: hold hundreds of sessions,
//! not tens of thousands.

use crate::KafkaDriver;
use crate::options::KafkaAcks;
use msgbench_core::driver::{DriverError, Session, SessionSpec};
use msgbench_metrics::ConnectFailure;
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::util::AsyncRuntime;
use std::time::Duration;

/// How often a held session checks that its broker still answers.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(5);

/// rdkafka's futures on tokio (the crate is built without its `tokio` feature; only timers of
/// sends with a queue timeout would use this, and sessions do not make those).
pub struct TokioRuntime;

impl AsyncRuntime for TokioRuntime {
    type Delay = tokio::time::Sleep;

    fn spawn<T>(task: T)
    where
        T: std::future::Future<Output = ()> + Send + 'static,
    {
        tokio::spawn(task);
    }

    fn delay_for(duration: Duration) -> Self::Delay {
        tokio::time::sleep(duration)
    }
}

type Producer = FutureProducer<DefaultClientContext, TokioRuntime>;

/// One librdkafka producer, connected.
pub struct KafkaSession {
    producer: Producer,
    topic: String,
    timeout: Duration,
}

impl KafkaSession {
    /// Creates the producer and waits for its first metadata answer.
    pub(crate) async fn start(d: &KafkaDriver, spec: &SessionSpec) -> Result<Self, DriverError> {
        d.provision(&spec.topic).await?;
        let mut cfg = d.base.clone();
        let acks = match d.plan.acks {
            KafkaAcks::Zero => "0",
            KafkaAcks::One => "1",
            KafkaAcks::All => "all",
        };
        cfg.set("client.id", format!("msgbench-session-{}", spec.id))
            .set("acks", acks)
            .set("linger.ms", "0");
        let producer: Producer = cfg
            .create()
            .map_err(|e| DriverError::Config(format!("kafka producer: {e}")))?;
        let timeout = d.connect_timeout;
        let probe = producer.clone();
        let topic = spec.topic.clone();
        let t = topic.clone();
        tokio::task::spawn_blocking(move || probe.client().fetch_metadata(Some(&t), timeout))
            .await
            .map_err(|e| DriverError::Config(format!("metadata task: {e}")))?
            .map_err(|e| {
                let cause = if e.rdkafka_error_code() == Some(RDKafkaErrorCode::OperationTimedOut) {
                    ConnectFailure::Timeout
                } else {
                    ConnectFailure::Refused
                };
                d.connect_error(format!("no answer to a metadata request: {e}"), cause)
            })?;
        Ok(Self {
            producer,
            topic,
            timeout,
        })
    }
}

impl Session for KafkaSession {
    async fn publish(&mut self, payload: &[u8]) -> Result<(), DriverError> {
        let record: FutureRecord<'_, (), [u8]> = FutureRecord::to(&self.topic).payload(payload);
        let delivery = self
            .producer
            .send_result(record)
            .map_err(|(e, _)| DriverError::Send(format!("kafka: {e}")))?;
        match delivery.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err((e, _))) => Err(DriverError::Send(format!("kafka: {e}"))),
            Err(_) => Err(DriverError::Closed),
        }
    }

    async fn keep_alive(&mut self) -> DriverError {
        loop {
            tokio::time::sleep(KEEP_ALIVE_EVERY).await;
            let probe = self.producer.clone();
            let timeout = self.timeout;
            let r =
                tokio::task::spawn_blocking(move || probe.client().fetch_metadata(None, timeout))
                    .await;
            match r {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return DriverError::Receive(format!("kafka broker: {e}")),
                Err(_) => return DriverError::Closed,
            }
        }
    }

    async fn close(self) -> Result<(), DriverError> {
        let p = self.producer;
        let _ = tokio::task::spawn_blocking(move || p.flush(Duration::from_secs(1))).await;
        Ok(())
    }
}
