//! Entry point for the fuzz targets (`fuzz/`, `crates/fuzz-targets`): the sink's protocol state
//! (`proto::Conn`, frames parsed with amq-protocol) is private, so [`sink_reads`] feeds it a byte
//! stream the way a connection's task does. Hidden from the documentation; not an API.

use super::proto::{Conn, Phase};
use super::{Shared, SinkStats, frame};
use bytes::BytesMut;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// Feeds `wire` to one sink connection as what a client sends, `piece` bytes per read (0: all
/// at once), with the sink's default limits; `header`: the AMQP 0-9-1 protocol header is sent
/// first (most inputs would otherwise stop at it). Returns how many bytes the sink answered.
/// Any byte string is a valid argument: this returns for all of them.
pub fn sink_reads(wire: &[u8], piece: usize, header: bool) -> usize {
    let (frame_max, channel_max) = (131_072, 2047);
    let shared = Arc::new(Shared {
        start: frame::start_frame(),
        tune: frame::tune_frame(channel_max, frame_max, 60),
        heartbeat_frame: frame::heartbeat(),
        frame_max,
        channel_max,
        stats: Arc::new(SinkStats::default()),
        name_seed: 1,
        names: AtomicU64::new(0),
    });
    let mut conn = Conn::new(shared);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut answered = 0;
    if header {
        buf.extend_from_slice(&frame::protocol_header());
    }
    let piece = if piece == 0 { wire.len().max(1) } else { piece };
    for chunk in wire.chunks(piece) {
        buf.extend_from_slice(chunk);
        conn.feed(&mut buf, &mut out);
        conn.flush_stats();
        answered += out.len();
        out.clear();
        if conn.phase == Phase::Done {
            break;
        }
    }
    conn.shutdown(&mut out);
    answered + out.len()
}
