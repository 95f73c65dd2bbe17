//! The account of a backlog run (`--backlog`): consumers held back while producers build a
//! backlog, then released; how big it got, how long it took to build, and how fast the
//! consumers cleared it (OpenMessaging Benchmark's `consumerBacklogSizeGB`).

use serde::{Deserialize, Serialize};

/// One backlog, built and (perhaps) drained; written in the `end` record.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BacklogSummary {
    /// Messages sent before the consumers were released (the backlog).
    pub messages: u64,
    /// Their bytes, stamps included.
    pub bytes: u64,
    /// Seconds from the start of the load to the release of the consumers.
    pub build_s: f64,
    /// Seconds from the release until the consumers had taken as many deliveries as the
    /// backlog held (every backlog message times its receivers); absent when the run ended
    /// first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_s: Option<f64>,
    /// Deliveries per second over `drain_s` (messages sent during the drain that arrived in it
    /// included: producers go on at their rate while the backlog clears).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_rate: Option<f64>,
}
