//! The Kafka producer: messages go to librdkafka with `rd_kafka_producev` directly (the
//! `rdkafka` crate's `send` builds a C string of the topic for every message; ours are built
//! once), the runner's token as the message's opaque value. librdkafka's delivery reports,
//! served by the `ThreadedProducer`'s polling thread, come back as [`Ack`]s over an unbounded
//! channel (lock-free; it allocates once per block of 32 acks, not per message).

use crate::options::KafkaPlan;
use crate::options::{KafkaAcks, KafkaPartitioner};
use crate::reach::Reach;
use msgbench_core::driver::{Ack, DriverError, EventSink, Outbound, Producer, ProducerSpec};
use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, Producer as _, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka_sys as rdsys;
use std::ffi::{CString, c_void};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

/// How long `close` waits for outstanding messages to be acknowledged.
const CLOSE_FLUSH: Duration = Duration::from_secs(10);

/// Turns delivery reports into acks.
pub struct AckContext {
    acks: mpsc::UnboundedSender<Ack>,
    reach: Reach,
    /// Where the first refusal's reason is said (the refusals are counted as nacks).
    events: EventSink,
    label: String,
    refusal_told: std::sync::atomic::AtomicBool,
}

impl ClientContext for AckContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.reach.error(&error, reason);
    }
}

impl ProducerContext for AckContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, token: usize) {
        let ok = result.is_ok();
        if ok {
            self.reach.alive();
        } else if let Err((e, _)) = result
            && !self
                .refusal_told
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            // Once: a record over the topic's size limit, a keyless record on a compacted
            // topic, a delivery time-out; each refused record is counted as nacked.
            self.events.emit(
                msgbench_core::driver::DriverEventKind::Error,
                format!(
                    "{}: a record was not delivered: {e} (further ones are counted as nacked, not told)",
                    self.label
                ),
            );
        }
        let _ = self.acks.send(Ack::One {
            token: token as u64,
            ok,
        });
    }
}

/// One topic a producer sends to.
struct Topic {
    name: CString,
    partitions: i32,
}

/// A Kafka producer (one librdkafka producer instance).
pub struct KafkaProducer {
    inner: ThreadedProducer<AckContext>,
    topics: Vec<Topic>,
    acks: mpsc::UnboundedReceiver<Ack>,
    partitioner: KafkaPartitioner,
    keys: u64,
    /// Messages sent so far: picks round-robin partitions and keys.
    n: u64,
}

impl KafkaProducer {
    /// Creates the librdkafka producer for `spec` with the plan's settings; `topics` pairs each
    /// of `spec.topics` with its partition count.
    pub(crate) fn new(
        base: &ClientConfig,
        plan: &KafkaPlan,
        spec: &ProducerSpec,
        topics: Vec<(String, i32)>,
        events: EventSink,
        servers: &str,
    ) -> Result<Self, DriverError> {
        let mut cfg = base.clone();
        let acks = match plan.acks {
            KafkaAcks::Zero => "0",
            KafkaAcks::One => "1",
            KafkaAcks::All => "all",
        };
        // The runner bounds what is in flight; librdkafka's own queue must hold at least that.
        let queue = spec.max_in_flight.clamp(100_000, 10_000_000);
        cfg.set("client.id", format!("msgbench-producer-{}", spec.id))
            .set("acks", acks)
            .set("enable.idempotence", plan.idempotence.to_string())
            .set("linger.ms", format!("{}", plan.linger.as_secs_f64() * 1e3))
            .set("batch.size", plan.batch_size.to_string())
            .set("compression.codec", &plan.compression)
            .set("partitioner", "murmur2_random")
            .set("queue.buffering.max.messages", queue.to_string())
            .set("message.timeout.ms", "30000");
        let (tx, rx) = mpsc::unbounded_channel();
        let ctx = AckContext {
            acks: tx,
            reach: Reach::new(events.clone(), format!("producer {}", spec.id), servers),
            events,
            label: format!("producer {}", spec.id),
            refusal_told: Default::default(),
        };
        let inner: ThreadedProducer<AckContext> = cfg
            .create_with_context(ctx)
            .map_err(|e| DriverError::Config(format!("kafka producer: {e}")))?;
        let topics = topics
            .into_iter()
            .map(|(t, partitions)| {
                Ok(Topic {
                    name: CString::new(t.clone())
                        .map_err(|_| DriverError::Config(format!("topic `{t}` contains NUL")))?,
                    partitions: partitions.max(1),
                })
            })
            .collect::<Result<_, DriverError>>()?;
        Ok(Self {
            inner,
            topics,
            acks: rx,
            partitioner: plan.partitioner,
            keys: plan.keys as u64,
            n: 0,
        })
    }

    /// One `rd_kafka_producev` call; the error code as librdkafka gives it.
    fn produce(&mut self, msg: &Outbound<'_>) -> RDKafkaRespErr {
        let t = &self.topics[msg.stream as usize];
        let n = self.n;
        let mut key_buf = [0u8; 20];
        let (partition, key): (i32, &[u8]) = match self.partitioner {
            KafkaPartitioner::RoundRobin => ((n % t.partitions as u64) as i32, &[]),
            KafkaPartitioner::Keyed => (-1, decimal(n % self.keys, &mut key_buf)),
            KafkaPartitioner::Sticky => (-1, &[]),
        };
        let key_ptr = if key.is_empty() {
            std::ptr::null_mut()
        } else {
            key.as_ptr() as *mut c_void
        };
        // SAFETY: the producer handle lives as long as `self`; librdkafka copies payload and key
        // (RD_KAFKA_MSG_F_COPY) before returning; the argument list is terminated by
        // RD_KAFKA_VTYPE_END and each tag is followed by the types its documentation names.
        // The opaque is a plain integer that `AckContext::delivery` gets back (`usize`'s
        // `IntoOpaque` is a cast), never dereferenced.
        unsafe {
            rdsys::rd_kafka_producev(
                self.inner.client().native_ptr(),
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_TOPIC,
                t.name.as_ptr(),
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_PARTITION,
                partition,
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_MSGFLAGS,
                rdsys::RD_KAFKA_MSG_F_COPY,
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_VALUE,
                msg.payload.as_ptr() as *mut c_void,
                msg.payload.len(),
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_KEY,
                key_ptr,
                key.len(),
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_OPAQUE,
                msg.token as usize as *mut c_void,
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_END,
            )
        }
    }
}

/// `v` in decimal, in `buf` (keys without an allocation).
fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

impl Producer for KafkaProducer {
    async fn send(&mut self, msg: Outbound<'_>) -> Result<(), DriverError> {
        loop {
            match self.produce(&msg) {
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR => {
                    self.n += 1;
                    return Ok(());
                }
                // librdkafka's queue is full: wait for it to drain (backpressure).
                RDKafkaRespErr::RD_KAFKA_RESP_ERR__QUEUE_FULL => {
                    tokio::time::sleep(Duration::from_millis(1)).await
                }
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE => {
                    return Err(DriverError::Config(format!(
                        "a {}-byte message is larger than the producer's message.max.bytes",
                        msg.payload.len()
                    )));
                }
                e => {
                    return Err(DriverError::Send(
                        rdkafka::error::RDKafkaErrorCode::from(e).to_string(),
                    ));
                }
            }
        }
    }

    /// librdkafka sends on its own thread after `linger`: nothing is held back here.
    async fn flush(&mut self) -> Result<(), DriverError> {
        Ok(())
    }

    fn poll_ack(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ack>> {
        self.acks.poll_recv(cx)
    }

    async fn close(self) -> Result<(), DriverError> {
        let inner = self.inner;
        tokio::task::spawn_blocking(move || inner.flush(CLOSE_FLUSH))
            .await
            .map_err(|e| DriverError::Send(format!("flush task: {e}")))?
            .map_err(|e| DriverError::Timeout(format!("flushing the producer: {e}")))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn decimal_keys() {
        let mut b = [0u8; 20];
        assert_eq!(super::decimal(0, &mut b), b"0");
        assert_eq!(super::decimal(1023, &mut b), b"1023");
        assert_eq!(super::decimal(u64::MAX, &mut b), b"18446744073709551615");
    }
}
