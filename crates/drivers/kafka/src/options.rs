//! `[kafka]` and the Kafka flags of `msgbench run`: producer, consumer and topic settings, as
//! written ([`KafkaSection`]), resolved ([`KafkaPlan`]) and given on the command line
//! ([`KafkaArgs`]). Used by the `kafka://` driver only; every field maps to one
//! librdkafka setting or to one decision of the driver (partitioning, start offsets, commits,
//! topic creation), so a run says exactly what it measured.

use clap::Args;
use msgbench_core::scenario::{DriverSection, PlanError};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[kafka]` as written (every field optional; see [`KafkaPlan`] for the defaults).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSection {
    /// Broker acknowledgements producers wait for: `0`, `1` or `all`.
    pub acks: Option<String>,
    /// Idempotent producers (no duplicates on retry; needs acks = all).
    pub idempotence: Option<bool>,
    /// How long a producer waits to fill a batch (`"5ms"`).
    pub linger: Option<String>,
    /// Largest batch per partition, in bytes.
    pub batch_size: Option<u32>,
    /// `none`, `gzip`, `lz4`, `zstd` or `snappy`.
    pub compression: Option<String>,
    /// `round-robin` (one partition after the other), `keyed` (a key per message, hashed by
    /// the murmur2 partitioner as Java clients do) or `sticky` (no key: librdkafka's default).
    pub partitioner: Option<String>,
    /// Distinct keys cycled through by `keyed` partitioning.
    pub keys: Option<u32>,
    /// Partitions of topics msgbench creates.
    pub partitions: Option<u32>,
    /// Replication factor of topics msgbench creates.
    pub replication_factor: Option<u16>,
    /// Create missing topics (default true); false: the topic must exist.
    pub create_topics: Option<bool>,
    /// Where consumers start: `latest` or `earliest`.
    pub start: Option<String>,
    /// Offset commits: `auto` (periodic, librdkafka), `async` or `sync` (after every message),
    /// `none`.
    pub commit: Option<String>,
    /// Bytes a consumer prefetches ahead of what it read (`"256MiB"`).
    pub fetch_buffer: Option<String>,
}

/// Broker acknowledgements a producer waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KafkaAcks {
    /// None: confirmed once written to the socket.
    Zero,
    /// The partition leader's.
    One,
    /// Every in-sync replica's.
    All,
}

/// How producers choose partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KafkaPartitioner {
    /// Each message to the next partition.
    RoundRobin,
    /// A key per message (cycling through `keys` keys), hashed to a partition.
    Keyed,
    /// No key, no partition: librdkafka's sticky partitioner.
    Sticky,
}

/// Where consumers start reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KafkaStart {
    /// Messages produced after the consumer is ready.
    Latest,
    /// Everything the partitions hold.
    Earliest,
}

/// How consumers commit offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KafkaCommit {
    /// librdkafka commits periodically in the background.
    Auto,
    /// An asynchronous commit after every message.
    Async,
    /// A synchronous commit after every message.
    Sync,
    /// Never.
    None,
}

/// Resolved Kafka settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaPlan {
    /// `acks`.
    pub acks: KafkaAcks,
    /// `enable.idempotence`.
    pub idempotence: bool,
    /// `linger.ms`.
    #[serde(with = "msgbench_core::units::serde_duration")]
    pub linger: Duration,
    /// `batch.size`.
    pub batch_size: u32,
    /// `compression.codec`.
    pub compression: String,
    /// Partition choice.
    pub partitioner: KafkaPartitioner,
    /// Keys cycled through by keyed partitioning.
    pub keys: u32,
    /// Partitions of created topics.
    pub partitions: u32,
    /// The partitions were asked for (`--partitions`), not defaulted: an existing topic with
    /// another count is then worth a warning.
    pub partitions_asked: bool,
    /// Replication factor of created topics.
    pub replication_factor: u16,
    /// Create missing topics.
    pub create_topics: bool,
    /// Consumer start.
    pub start: KafkaStart,
    /// Commit mode.
    pub commit: KafkaCommit,
    /// `queued.max.messages.kbytes`, in bytes: how far a consumer fetches ahead (a full
    /// buffer pauses its fetches for 10 ms).
    pub fetch_buffer: u64,
}

impl Default for KafkaPlan {
    fn default() -> Self {
        KafkaPlan {
            acks: KafkaAcks::All,
            idempotence: false,
            linger: Duration::from_millis(5),
            batch_size: 1_000_000,
            compression: "none".into(),
            partitioner: KafkaPartitioner::RoundRobin,
            keys: 1024,
            partitions: 1,
            partitions_asked: false,
            replication_factor: 1,
            create_topics: true,
            start: KafkaStart::Latest,
            commit: KafkaCommit::Auto,
            fetch_buffer: 256 << 20,
        }
    }
}

fn bad(setting: &'static str, message: String) -> PlanError {
    PlanError { setting, message }
}

/// Resolves `[kafka]`, rejecting values librdkafka would refuse later (or misread).
pub fn resolve_kafka(k: &KafkaSection) -> Result<KafkaPlan, PlanError> {
    let d = KafkaPlan::default();
    let acks = match k.acks.as_deref() {
        None => d.acks,
        Some("0") => KafkaAcks::Zero,
        Some("1") => KafkaAcks::One,
        Some("all" | "-1") => KafkaAcks::All,
        Some(o) => return Err(bad("kafka.acks", format!("`{o}`: use 0, 1 or all"))),
    };
    let idempotence = k.idempotence.unwrap_or(d.idempotence);
    if idempotence && acks != KafkaAcks::All {
        return Err(bad(
            "kafka.idempotence",
            "idempotent producers need acks = all".into(),
        ));
    }
    let linger = match &k.linger {
        None => d.linger,
        Some(s) => msgbench_core::units::parse_duration(s)
            .map_err(|e| bad("kafka.linger", format!("`{s}`: {e}")))?,
    };
    if linger > Duration::from_secs(900) {
        return Err(bad("kafka.linger", "at most 900s".into()));
    }
    let batch_size = k.batch_size.unwrap_or(d.batch_size);
    if batch_size == 0 || batch_size > 2_147_483_647 {
        return Err(bad(
            "kafka.batch_size",
            "between 1 and 2147483647 bytes".into(),
        ));
    }
    let compression = k.compression.clone().unwrap_or(d.compression);
    if !["none", "gzip", "lz4", "zstd", "snappy"].contains(&compression.as_str()) {
        return Err(bad(
            "kafka.compression",
            format!("`{compression}`: use none, gzip, lz4, zstd or snappy"),
        ));
    }
    let partitioner = match k.partitioner.as_deref() {
        None => d.partitioner,
        Some("round-robin" | "roundrobin" | "rr") => KafkaPartitioner::RoundRobin,
        Some("keyed" | "key") => KafkaPartitioner::Keyed,
        Some("sticky") => KafkaPartitioner::Sticky,
        Some(o) => {
            return Err(bad(
                "kafka.partitioner",
                format!("`{o}`: use round-robin, keyed or sticky"),
            ));
        }
    };
    let keys = k.keys.unwrap_or(d.keys);
    let partitions = k.partitions.unwrap_or(d.partitions);
    let replication_factor = k.replication_factor.unwrap_or(d.replication_factor);
    if keys == 0 || partitions == 0 || replication_factor == 0 {
        return Err(bad(
            "kafka.partitions",
            "keys, partitions and replication factor must be at least 1".into(),
        ));
    }
    let start = match k.start.as_deref() {
        None => d.start,
        Some("latest") => KafkaStart::Latest,
        Some("earliest") => KafkaStart::Earliest,
        Some(o) => return Err(bad("kafka.start", format!("`{o}`: use latest or earliest"))),
    };
    let commit = match k.commit.as_deref() {
        None => d.commit,
        Some("auto") => KafkaCommit::Auto,
        Some("async") => KafkaCommit::Async,
        Some("sync") => KafkaCommit::Sync,
        Some("none") => KafkaCommit::None,
        Some(o) => {
            return Err(bad(
                "kafka.commit",
                format!("`{o}`: use auto, async, sync or none"),
            ));
        }
    };
    let fetch_buffer = match &k.fetch_buffer {
        None => d.fetch_buffer,
        Some(s) => msgbench_core::units::parse_size(s).map_err(|e| bad("kafka.fetch_buffer", e))?,
    };
    // librdkafka's range: 1 KiB to 2097151 KiB.
    if !(1024..=2_097_151 << 10).contains(&fetch_buffer) {
        return Err(bad("kafka.fetch_buffer", "between 1KiB and 2047MiB".into()));
    }
    Ok(KafkaPlan {
        acks,
        idempotence,
        linger,
        batch_size,
        compression,
        partitioner,
        keys,
        partitions,
        partitions_asked: k.partitions.is_some(),
        replication_factor,
        create_topics: k.create_topics.unwrap_or(d.create_topics),
        start,
        commit,
        fetch_buffer,
    })
}

impl DriverSection for KafkaSection {
    const NAME: &'static str = "kafka";
    type Plan = KafkaPlan;

    fn resolve(&self) -> Result<KafkaPlan, PlanError> {
        resolve_kafka(self)
    }
}

/// Kafka producer, consumer and topic flags.
#[derive(Debug, Args, Default, Clone, PartialEq, Eq)]
#[command(next_help_heading = "Kafka")]
pub struct KafkaArgs {
    /// Acknowledgements producers wait for: 0, 1 or all (default all).
    #[arg(long, value_name = "0|1|all")]
    pub acks: Option<String>,
    /// Idempotent producers (needs --acks all).
    #[arg(long)]
    pub idempotence: bool,
    /// How long producers wait to fill a batch (default 5ms).
    #[arg(long, value_name = "DURATION")]
    pub linger: Option<String>,
    /// Largest batch per partition in bytes (default 1000000).
    #[arg(long, value_name = "BYTES")]
    pub batch_size: Option<u32>,
    /// none (default), gzip, lz4, zstd or snappy.
    #[arg(long, value_name = "CODEC")]
    pub compression: Option<String>,
    /// round-robin (default), keyed (--keys distinct keys, murmur2 hash) or sticky.
    #[arg(long, value_name = "HOW")]
    pub partitioner: Option<String>,
    /// Distinct keys of --partitioner keyed (default 1024).
    #[arg(long, value_name = "N")]
    pub keys: Option<u32>,
    /// Partitions of the topics msgbench creates (default 1).
    #[arg(long, value_name = "N")]
    pub partitions: Option<u32>,
    /// Replication factor of the topics msgbench creates (default 1).
    #[arg(long, value_name = "N")]
    pub replication_factor: Option<u16>,
    /// Use existing topics only: fail when one is missing instead of creating it.
    #[arg(long)]
    pub no_create_topics: bool,
    /// Where consumers start: latest (default) or earliest.
    #[arg(long, value_name = "WHERE")]
    pub offset: Option<String>,
    /// Offset commits: auto (default, periodic), async or sync (after every message), none.
    #[arg(long, value_name = "MODE")]
    pub commit: Option<String>,
    /// How far each consumer fetches ahead of what it read (default 256MiB). librdkafka
    /// before 2.2 pauses a consumer's fetching for a second whenever this fills, so reading a
    /// backlog runs at most about this many bytes per second per consumer.
    #[arg(long, value_name = "SIZE")]
    pub fetch_buffer: Option<String>,
}

impl KafkaArgs {
    /// The `[kafka]` section these flags stand for (unset flags leave the file's values).
    pub fn section(&self) -> KafkaSection {
        KafkaSection {
            acks: self.acks.clone(),
            idempotence: self.idempotence.then_some(true),
            linger: self.linger.clone(),
            batch_size: self.batch_size,
            compression: self.compression.clone(),
            partitioner: self.partitioner.clone(),
            keys: self.keys,
            partitions: self.partitions,
            replication_factor: self.replication_factor,
            create_topics: self.no_create_topics.then_some(false),
            start: self.offset.clone(),
            commit: self.commit.clone(),
            fetch_buffer: self.fetch_buffer.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_choices() {
        assert_eq!(
            resolve_kafka(&KafkaSection::default()).unwrap(),
            KafkaPlan::default()
        );
        let p = resolve_kafka(&KafkaSection {
            acks: Some("1".into()),
            compression: Some("zstd".into()),
            partitioner: Some("keyed".into()),
            start: Some("earliest".into()),
            commit: Some("sync".into()),
            linger: Some("20ms".into()),
            fetch_buffer: Some("64MiB".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.fetch_buffer, 64 << 20);
        assert_eq!(p.acks, KafkaAcks::One);
        assert_eq!(p.partitioner, KafkaPartitioner::Keyed);
        assert_eq!(p.start, KafkaStart::Earliest);
        assert_eq!(p.commit, KafkaCommit::Sync);
        assert_eq!(p.linger, Duration::from_millis(20));
    }

    #[test]
    fn bad_values_name_the_setting() {
        for (s, setting) in [
            (
                KafkaSection {
                    acks: Some("2".into()),
                    ..Default::default()
                },
                "kafka.acks",
            ),
            (
                KafkaSection {
                    compression: Some("brotli".into()),
                    ..Default::default()
                },
                "kafka.compression",
            ),
            (
                KafkaSection {
                    acks: Some("1".into()),
                    idempotence: Some(true),
                    ..Default::default()
                },
                "kafka.idempotence",
            ),
            (
                KafkaSection {
                    partitions: Some(0),
                    ..Default::default()
                },
                "kafka.partitions",
            ),
            (
                KafkaSection {
                    fetch_buffer: Some("4GiB".into()),
                    ..Default::default()
                },
                "kafka.fetch_buffer",
            ),
        ] {
            assert_eq!(resolve_kafka(&s).unwrap_err().setting, setting);
        }
    }
}
