//! The Kafka flags of `msgbench run` (`[kafka]` in a scenario file): kept apart from the other
//! protocols' flags so the argument list stays readable.

use clap::Args;
use msgbench_core::scenario::KafkaSection;

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
        }
    }
}
