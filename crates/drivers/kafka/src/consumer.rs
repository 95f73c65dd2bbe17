//! The Kafka consumer: a thread per consumer polls librdkafka (so group rebalances are served
//! whenever the group needs them, not only while the runner reads) and hands each message,
//! with its partition, over a bounded channel to [`KafkaConsumer::recv`].
//!
//! Start offsets are applied in the rebalance callback, on that thread: on a consumer's first
//! assignment every partition starts at the plan's start (latest: the high watermark looked up
//! right then; earliest: the beginning) whatever the group committed before, so a run starts
//! where it says; on later assignments (another member joined or left) committed offsets are
//! kept and only partitions without one get the plan's start. Unless the plan commits nothing,
//! the first assignment's start offsets are committed at once, so a consumer that rejoins
//! before its first commit (its broker restarted) resumes from them. The consumer is handed to the
//! runner only after its first assignment, so messages sent afterwards are never skipped by a
//! lazily resolved "latest".

use crate::options::KafkaPlan;
use crate::options::{KafkaCommit, KafkaStart};
use crate::reach::Reach;
use bytes::Bytes;
use msgbench_core::driver::{
    Consumer, ConsumerSpec, Delivery, DriverError, DriverEventKind, EventSink,
};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientConfig, ClientContext, client::NativeClient};
use rdkafka_sys as rdsys;
use std::ffi::CString;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Messages waiting between the polling thread and the runner.
const CHANNEL: usize = 8192;
/// How long one poll waits (bounds how late the thread sees a stop).
const POLL: Duration = Duration::from_millis(100);
/// How long one poll waits while the runner's channel is full (how soon room is seen).
const PAUSED_POLL: Duration = Duration::from_millis(5);
/// Timeout of the look-ups made while assigning partitions.
const LOOKUP_MS: i32 = 5000;

/// Rebalance handling and error reporting of one consumer.
pub struct GroupContext {
    start: KafkaStart,
    /// Assignments so far (the first ignores committed offsets).
    assignments: AtomicU32,
    /// Told once, after the first assignment.
    assigned: std::sync::Mutex<Option<oneshot::Sender<()>>>,
    events: EventSink,
    client: String,
    reach: Reach,
    /// Whether the plan commits offsets at all (`commit = "none"` does not).
    commits: bool,
    /// The runner paused fetching ([`Consumer::set_fetching`]): the polling thread, which
    /// pauses and resumes for its own reasons, leaves such a pause alone.
    held_back: AtomicBool,
}

impl ClientContext for GroupContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.reach.error(&error, reason);
    }
}

impl GroupContext {
    /// The offset the plan starts `partition` of `topic` at.
    fn start_offset(&self, client: &NativeClient, topic: &str, partition: i32) -> Offset {
        match self.start {
            KafkaStart::Earliest => Offset::Beginning,
            KafkaStart::Latest => {
                let (mut low, mut high) = (-1i64, -1i64);
                let Ok(t) = CString::new(topic) else {
                    return Offset::End;
                };
                // SAFETY: a live client handle, a NUL-terminated topic, two out-parameters.
                let err = unsafe {
                    rdsys::rd_kafka_query_watermark_offsets(
                        client.ptr(),
                        t.as_ptr(),
                        partition,
                        &mut low,
                        &mut high,
                        LOOKUP_MS,
                    )
                };
                if err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0 {
                    Offset::Offset(high)
                } else {
                    Offset::End
                }
            }
        }
    }

    /// Sets the start offsets of a new assignment (see the module docs); whether it is the
    /// first.
    fn place(&self, client: &NativeClient, tpl: &mut TopicPartitionList) -> bool {
        let first = self.assignments.fetch_add(1, Ordering::AcqRel) == 0;
        if tpl.count() == 0 {
            // More members than partitions: nothing for this one (and rdkafka's `elements`
            // must not see an empty list's null array).
            return first;
        }
        let committed = tpl.clone();
        if !first {
            // SAFETY: a live client handle and a list this function owns.
            unsafe { rdsys::rd_kafka_committed(client.ptr(), committed.ptr(), LOOKUP_MS) };
        }
        for e in committed.elements() {
            let keep = !first && matches!(e.offset(), Offset::Offset(o) if o >= 0);
            let offset = if keep {
                e.offset()
            } else {
                self.start_offset(client, e.topic(), e.partition())
            };
            let _ = tpl.set_partition_offset(e.topic(), e.partition(), offset);
        }
        first
    }

    /// Commits the start offsets of the first assignment, so that the group has a position
    /// from the start of the run: a consumer that rejoins before its first periodic commit (a
    /// broker restarted early in the run) resumes there, not at the then latest offset, which
    /// would skip everything sent in between.
    fn commit_start(&self, client: &NativeClient, tpl: &TopicPartitionList) {
        let mut start = TopicPartitionList::new();
        if tpl.count() > 0 {
            for e in tpl.elements() {
                if let Offset::Offset(o) = e.offset() {
                    let _ = start.add_partition_offset(e.topic(), e.partition(), Offset::Offset(o));
                }
            }
        }
        if start.count() > 0 {
            // SAFETY: a live client handle and a list that outlives the call (an asynchronous
            // commit copies it).
            unsafe { rdsys::rd_kafka_commit(client.ptr(), start.ptr(), 1) };
        }
    }
}

impl ConsumerContext for GroupContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<GroupContext>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let native_client = consumer.client().native_client();
        // SAFETY (both calls): a live client handle; the list outlives the call.
        unsafe {
            match err {
                RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                    let first = self.place(native_client, tpl);
                    rdsys::rd_kafka_assign(native_client.ptr(), tpl.ptr());
                    if first && self.commits {
                        self.commit_start(native_client, tpl);
                    }
                    if let Some(tx) = self.assigned.lock().expect("assigned lock").take() {
                        let _ = tx.send(());
                    }
                }
                RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                    rdsys::rd_kafka_assign(native_client.ptr(), std::ptr::null());
                }
                e => {
                    self.events.emit(
                        DriverEventKind::Error,
                        format!("{}: rebalance failed: {e:?}", self.client),
                    );
                    rdsys::rd_kafka_assign(native_client.ptr(), std::ptr::null());
                }
            }
        }
    }
}

/// A Kafka consumer: the receiving end of its polling thread.
pub struct KafkaConsumer {
    /// Shared with the polling thread, for pausing fetches ([`Consumer::set_fetching`]).
    consumer: Arc<BaseConsumer<GroupContext>>,
    rx: mpsc::Receiver<(Delivery, u32)>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    lane: Option<u32>,
}

impl KafkaConsumer {
    /// Creates the consumer, subscribes and waits (up to `timeout`) for its first assignment.
    pub(crate) async fn start(
        base: &ClientConfig,
        plan: &KafkaPlan,
        spec: &ConsumerSpec,
        group: String,
        events: EventSink,
        servers: &str,
        timeout: Duration,
    ) -> Result<Self, DriverError> {
        let mut cfg = base.clone();
        let reset = match plan.start {
            KafkaStart::Latest => "latest",
            KafkaStart::Earliest => "earliest",
        };
        cfg.set("client.id", format!("msgbench-consumer-{}", spec.id))
            .set("group.id", &group)
            .set("auto.offset.reset", reset)
            .set(
                "enable.auto.commit",
                (plan.commit == KafkaCommit::Auto).to_string(),
            )
            .set("enable.partition.eof", "false")
            // How long the broker holds a fetch that finds nothing new: data arriving answers
            // it at once (fetch.min.bytes is 1), so this only sets how often an idle consumer
            // asks (10 ms cost an idle consumer 0.5 CPU-s per 20 s).
            .set("fetch.wait.max.ms", "100")
            .set(
                "queued.max.messages.kbytes",
                (plan.fetch_buffer / 1024).to_string(),
            )
            // The buffer's bytes bound it, not a count (100,000 by default, which small
            // messages reach long before the bytes).
            .set("queued.min.messages", "10000000")
            // Kafka's own default since 3.0. Shorter, a coordinator moved by a broker's death
            // (KRaft takes ~9 s) outlived the session: each consumer lost its member id and
            // joined anew, after the old members' sessions ran out, stalling the group ~20 s.
            .set("session.timeout.ms", "45000")
            .set("heartbeat.interval.ms", "3000")
            // A full buffer pauses fetching this long (librdkafka's default is a second).
            .set("fetch.queue.backoff.ms", "10");
        let (tx_assigned, rx_assigned) = oneshot::channel();
        let ctx = GroupContext {
            start: plan.start,
            assignments: AtomicU32::new(0),
            assigned: std::sync::Mutex::new(Some(tx_assigned)),
            events: events.clone(),
            client: format!("consumer {}", spec.id),
            reach: Reach::new(events.clone(), format!("consumer {}", spec.id), servers),
            commits: plan.commit != KafkaCommit::None,
            held_back: AtomicBool::new(false),
        };
        let c: BaseConsumer<GroupContext> = cfg
            .create_with_context(ctx)
            .map_err(|e| DriverError::Config(format!("kafka consumer: {e}")))?;
        c.subscribe(&[spec.topic.as_str()])
            .map_err(|e| DriverError::Subscribe(format!("topic `{}`: {e}", spec.topic)))?;
        let c = Arc::new(c);
        let (tx, rx) = mpsc::channel(CHANNEL);
        let stop = Arc::new(AtomicBool::new(false));
        let commit = plan.commit;
        let thread = {
            let c = c.clone();
            let stop = stop.clone();
            let client = format!("consumer {}", spec.id);
            std::thread::Builder::new()
                .name(format!("kafka-consumer-{}", spec.id))
                .spawn(move || poll_loop(c, tx, &stop, commit, &events, &client))
                .map_err(|e| DriverError::Config(format!("consumer thread: {e}")))?
        };
        let mut me = KafkaConsumer {
            consumer: c,
            rx,
            stop,
            thread: Some(thread),
            lane: None,
        };
        match tokio::time::timeout(timeout.max(Duration::from_secs(10)), rx_assigned).await {
            Ok(Ok(())) => Ok(me),
            _ => {
                me.shutdown().await;
                Err(DriverError::Timeout(format!(
                    "consumer {} got no partitions of `{}` from group `{group}`",
                    spec.id, spec.topic
                )))
            }
        }
    }

    async fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.rx.close();
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}

/// The polling thread: until stopped or the runner's end is gone.
fn poll_loop(
    c: Arc<BaseConsumer<GroupContext>>,
    tx: mpsc::Sender<(Delivery, u32)>,
    stop: &AtomicBool,
    commit: KafkaCommit,
    events: &EventSink,
    client: &str,
) {
    // Deliveries polled and not yet taken by the runner, oldest first. While the runner takes
    // nothing (it reads no consumer until every one has joined, and a backlog read from the
    // earliest offset fills the channel at once) the assigned partitions are paused and the
    // thread goes on polling: a poll serves the group's rebalances, and a thread blocked on a
    // full channel held up the next consumer's join (the group waited for it for 30 s).
    let mut held: std::collections::VecDeque<(Delivery, u32)> = Default::default();
    let mut paused = false;
    'run: while !stop.load(Ordering::Acquire) {
        while let Some(item) = held.pop_front() {
            match tx.try_send(item) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(item)) => {
                    held.push_front(item);
                    break;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => break 'run,
            }
        }
        if paused == held.is_empty() {
            // Paused messages are fetched again from where the consumer is on resuming. A
            // pause of the runner's own stays.
            if let Ok(assigned) = c.assignment() {
                let _ = if !paused {
                    c.pause(&assigned)
                } else if !c.context().held_back.load(Ordering::Acquire) {
                    c.resume(&assigned)
                } else {
                    Ok(())
                };
            }
            paused = !paused;
        }
        let wait = if paused { PAUSED_POLL } else { POLL };
        let Some(r) = c.poll(wait) else { continue };
        let m = match r {
            Ok(m) => {
                c.context().reach.alive();
                m
            }
            Err(e) => {
                events.emit(DriverEventKind::Error, format!("{client}: {e}"));
                continue;
            }
        };
        let d = Delivery {
            payload: Bytes::copy_from_slice(m.payload().unwrap_or(&[])),
            redelivered: false,
            meta: None,
        };
        let partition = m.partition() as u32;
        let committed = match commit {
            KafkaCommit::Async => c.commit_message(&m, CommitMode::Async),
            KafkaCommit::Sync => c.commit_message(&m, CommitMode::Sync),
            KafkaCommit::Auto | KafkaCommit::None => Ok(()),
        };
        if let Err(e) = committed {
            events.emit(DriverEventKind::Error, format!("{client}: commit: {e}"));
        }
        drop(m);
        held.push_back((d, partition));
    }
    c.unsubscribe();
}

impl Consumer for KafkaConsumer {
    async fn recv(&mut self) -> Result<Option<Delivery>, DriverError> {
        match self.rx.recv().await {
            Some((d, partition)) => {
                self.lane = Some(partition);
                Ok(Some(d))
            }
            None => Ok(None),
        }
    }

    fn lane(&self) -> Option<u32> {
        self.lane
    }

    /// Pauses or resumes fetching on the partitions assigned now: librdkafka prefetches up to
    /// 64 MB per consumer whether or not anything is polled, which would move a held-back
    /// backlog into the client. (Runs are connected, and their group settled, before any
    /// backlog is built; a later rebalance while paused would assign its new partitions
    /// unpaused.)
    fn set_fetching(&mut self, on: bool) {
        self.consumer
            .context()
            .held_back
            .store(!on, Ordering::Release);
        let Ok(tpl) = self.consumer.assignment() else {
            return;
        };
        let _ = if on {
            self.consumer.resume(&tpl)
        } else {
            self.consumer.pause(&tpl)
        };
    }

    async fn close(mut self) -> Result<(), DriverError> {
        self.shutdown().await;
        Ok(())
    }
}

impl Drop for KafkaConsumer {
    fn drop(&mut self) {
        // Close without waiting: the thread sees the flag within one poll.
        self.stop.store(true, Ordering::Release);
    }
}
