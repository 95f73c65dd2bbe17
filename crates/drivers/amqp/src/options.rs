//! `[amqp]` and the AMQP 0-9-1 flags of `msgbench run`: how a run is laid out on the broker,
//! as written ([`AmqpSection`]), resolved ([`AmqpPlan`]) and given on the command line
//! ([`AmqpArgs`]).

use clap::Args;
use msgbench_core::registration::CommonFlags;
use msgbench_core::scenario::{DriverSection, PlanError};
use serde::{Deserialize, Serialize};

/// `[amqp]`: how AMQP 0-9-1 runs are laid out on the broker.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmqpSection {
    /// Exchange producers publish to (topics are routing keys); `""` is the default exchange
    /// (topics are then queue names).
    pub exchange: Option<String>,
    /// `direct`, `fanout`, `topic` or `headers`.
    pub exchange_type: Option<String>,
    /// Publisher confirms (publish latency = publish → confirm).
    pub confirm: Option<bool>,
    /// Persistent messages (delivery mode 2).
    pub persistent: Option<bool>,
    /// Mandatory flag on publishes.
    pub mandatory: Option<bool>,
    /// Consumer prefetch (basic.qos); 0 = unlimited.
    pub prefetch: Option<u16>,
    /// Consumers ack automatically (no_ack) instead of explicitly.
    pub auto_ack: Option<bool>,
    /// Manual acks: one `multiple` ack every this many deliveries.
    pub ack_every: Option<u32>,
    /// Durable exchange and queues.
    pub durable: Option<bool>,
    /// `classic`, `quorum` or `stream`.
    pub queue_type: Option<String>,
    /// `x-max-length` of the queues.
    pub max_length: Option<u64>,
    /// `x-max-length-bytes` of the queues (a stream's retention).
    pub max_length_bytes: Option<u64>,
    /// Purge the queues before the run.
    pub purge: Option<bool>,
    /// Channels per connection: producers (and, separately, consumers) share connections, this
    /// many to each, one channel apiece (default 1: a connection per client).
    pub channels_per_connection: Option<u16>,
}

/// AMQP 0-9-1 topology and delivery settings (used by the `amqp://` driver only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmqpPlan {
    /// Exchange producers publish to; `""` = the default exchange.
    pub exchange: String,
    /// Exchange type.
    pub exchange_type: String,
    /// Publisher confirms.
    pub confirm: bool,
    /// Delivery mode 2.
    pub persistent: bool,
    /// Mandatory publishes.
    pub mandatory: bool,
    /// Consumer prefetch; 0 = unlimited.
    pub prefetch: u16,
    /// Consumers use no_ack.
    pub auto_ack: bool,
    /// Manual acks: one multiple-ack every this many deliveries.
    pub ack_every: u32,
    /// Durable exchange and queues.
    pub durable: bool,
    /// `classic`, `quorum` or `stream` (RabbitMQ 3.9+: an append-only log that every
    /// consumer reads whole from where it starts, `x-stream-offset` `next`; see [`STREAM`]).
    pub queue_type: String,
    /// `x-max-length`.
    pub max_length: Option<u64>,
    /// `x-max-length-bytes` (for a stream, its retention: [`STREAM_RETENTION`] unless set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length_bytes: Option<u64>,
    /// Purge queues before the run.
    pub purge: bool,
    /// Clients per connection, each on its own channel (1 = a connection per client).
    pub channels_per_connection: u16,
}

/// The queue type of a RabbitMQ stream (`x-queue-type`).
pub const STREAM: &str = "stream";

/// A stream's retention (`x-max-length-bytes`) when none is given: a benchmark appends fast,
/// and a stream keeps everything by default, so without a bound repeated runs would fill the
/// broker's disk. RabbitMQ drops whole segments, so the segments are made 100 MB
/// ([`STREAM_SEGMENT`]) instead of 500 MB, to keep the disk use near the bound.
pub const STREAM_RETENTION: u64 = 1 << 30;

/// `x-stream-max-segment-size-bytes` with [`STREAM_RETENTION`].
pub const STREAM_SEGMENT: u64 = 100_000_000;

/// What a RabbitMQ stream refuses, refused before connecting, with what to do instead (the
/// broker would close the channel or the whole connection: 406 or 540).
fn stream_fits(a: &AmqpSection) -> Result<(), PlanError> {
    if a.auto_ack == Some(true) {
        return Err(err(
            "amqp.auto_ack",
            "a stream takes no automatic acknowledgement (RabbitMQ answers 540 NOT_IMPLEMENTED): drop --auto-ack; consumers ack every --ack-every deliveries",
        ));
    }
    if a.prefetch == Some(0) {
        return Err(err(
            "amqp.prefetch",
            "a stream's consumers need a prefetch (RabbitMQ answers 406 without one): give --prefetch above 0",
        ));
    }
    if a.max_length.is_some() {
        return Err(err(
            "amqp.max_length",
            "a stream takes no x-max-length: its retention is in bytes (--max-length-bytes)",
        ));
    }
    if a.durable == Some(false) {
        return Err(err("amqp.durable", "a stream is always durable"));
    }
    if a.purge == Some(true) {
        return Err(err(
            "amqp.purge",
            "a stream cannot be purged (RabbitMQ answers 540 NOT_IMPLEMENTED); nothing it held before is read anyway: its consumers start at its end",
        ));
    }
    Ok(())
}

fn err(setting: &'static str, message: impl Into<String>) -> PlanError {
    PlanError {
        setting,
        message: message.into(),
    }
}

impl DriverSection for AmqpSection {
    const NAME: &'static str = "amqp";
    type Plan = AmqpPlan;

    fn resolve(&self) -> Result<AmqpPlan, PlanError> {
        let a = self;
        let exchange_type = a.exchange_type.clone().unwrap_or_else(|| "direct".into());
        if !["direct", "fanout", "topic", "headers"].contains(&exchange_type.as_str()) {
            return Err(err(
                "amqp.exchange_type",
                format!("`{exchange_type}`: use direct, fanout, topic or headers"),
            ));
        }
        let queue_type = a.queue_type.clone().unwrap_or_else(|| "classic".into());
        if !["classic", "quorum", STREAM].contains(&queue_type.as_str()) {
            return Err(err(
                "amqp.queue_type",
                format!("`{queue_type}`: use classic, quorum or stream"),
            ));
        }
        if queue_type == STREAM {
            stream_fits(a)?;
        }
        let durable = a.durable.unwrap_or(queue_type != "classic");
        // Redeclaring an exchange with other flags fails (406), so durable runs get their own.
        // Neither is named like the default topic (`msgbench`): Qpid Broker-J resolves a name
        // to an exchange before a queue, and an AMQP 1.0 run's queue `msgbench` (or a default
        // exchange publish to it) then went to the exchange, unbound: all lost.
        let exchange = a.exchange.clone().unwrap_or_else(|| {
            if durable {
                "msgbench.durable".into()
            } else {
                "msgbench.exchange".into()
            }
        });
        if exchange.is_empty() && exchange_type != "direct" {
            return Err(err(
                "amqp.exchange",
                "the default exchange (\"\") is a direct exchange; name an exchange for other types",
            ));
        }
        let ack_every = a.ack_every.unwrap_or(1);
        if ack_every == 0 {
            return Err(err("amqp.ack_every", "must be at least 1 (--ack-every)"));
        }
        let channels_per_connection = a.channels_per_connection.unwrap_or(1);
        if !(1..=2047).contains(&channels_per_connection) {
            return Err(err(
                "amqp.channels_per_connection",
                "must be between 1 and 2047 (RabbitMQ's default channel_max)",
            ));
        }
        Ok(AmqpPlan {
            exchange,
            exchange_type,
            confirm: a.confirm.unwrap_or(false),
            persistent: a.persistent.unwrap_or(false),
            mandatory: a.mandatory.unwrap_or(false),
            prefetch: a.prefetch.unwrap_or(1000),
            auto_ack: a.auto_ack.unwrap_or(false),
            ack_every,
            durable,
            queue_type,
            max_length: a.max_length,
            max_length_bytes: a.max_length_bytes,
            purge: a.purge.unwrap_or(false),
            channels_per_connection,
        })
    }
}

/// The AMQP 0-9-1 flags.
#[derive(Debug, Args, Default, Clone, PartialEq, Eq)]
#[command(next_help_heading = "AMQP 0-9-1")]
pub struct AmqpArgs {
    /// Exchange producers publish to (default msgbench.exchange, msgbench.durable with
    /// --durable; "" = the default exchange).
    #[arg(long)]
    pub exchange: Option<String>,
    /// Exchange type: direct (default), fanout, topic, headers.
    #[arg(long)]
    pub exchange_type: Option<String>,
    /// Publisher confirms: publish latency is publish -> confirm (window: --max-in-flight).
    #[arg(long)]
    pub confirm: bool,
    /// Set the mandatory flag on publishes.
    #[arg(long)]
    pub mandatory: bool,
    /// Consumer prefetch (basic.qos; default 1000, 0 = unlimited).
    #[arg(long)]
    pub prefetch: Option<u16>,
    /// Consumers do not ack (no_ack).
    #[arg(long)]
    pub auto_ack: bool,
    /// Durable exchange and queues.
    #[arg(long)]
    pub durable: bool,
    /// Queue type of shared queues: classic (default), quorum, or stream (RabbitMQ 3.9+: one
    /// stream per topic that every consumer reads whole from its end; durable, manual acks,
    /// no --queue-group).
    #[arg(long)]
    pub queue_type: Option<String>,
    /// x-max-length of shared queues.
    #[arg(long)]
    pub max_length: Option<u64>,
    /// x-max-length-bytes of shared queues; a stream's retention (default for streams 1 GiB,
    /// in 100 MB segments).
    #[arg(long, value_name = "BYTES", value_parser = msgbench_core::units::parse_size)]
    pub max_length_bytes: Option<u64>,
    /// Purge shared queues before the run.
    #[arg(long)]
    pub purge: bool,
    /// Channels per connection: N producers (and, apart, N consumers) share one connection,
    /// a channel each (default 1).
    #[arg(long, value_name = "N")]
    pub channels: Option<u16>,
}

impl AmqpArgs {
    /// The `[amqp]` section these flags stand for (unset flags leave the file's values).
    pub fn section(&self, common: &CommonFlags) -> AmqpSection {
        AmqpSection {
            exchange: self.exchange.clone(),
            exchange_type: self.exchange_type.clone(),
            confirm: self.confirm.then_some(true),
            persistent: common.persistent.then_some(true),
            mandatory: self.mandatory.then_some(true),
            prefetch: self.prefetch,
            auto_ack: self.auto_ack.then_some(true),
            ack_every: common.ack_every,
            durable: self.durable.then_some(true),
            queue_type: self.queue_type.clone(),
            max_length: self.max_length,
            max_length_bytes: self.max_length_bytes,
            purge: self.purge.then_some(true),
            channels_per_connection: self.channels,
        }
    }
}
