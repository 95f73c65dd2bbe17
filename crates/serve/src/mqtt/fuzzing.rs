//! Entry point for the fuzz targets (`fuzz/`, `crates/fuzz-targets`): the broker's own readers
//! of what msgbench's codec skips (`wire`: wills, MQTT 5 properties and subscription options)
//! and its filter and topic checks are private, so [`broker_reads`] drives them over a byte
//! stream the way a connection's reader does. Hidden from the documentation; not an API.

use super::conn::connect_level;
use super::router::{parse_filter, valid_topic};
use super::wire::{client_props, complete_packet, parse_will, publish_props, subscribe_options};
use bytes::BytesMut;
use msgbench_driver_mqtt::codec::{self, Packet, Version};

/// The largest packet the reader accepts here (the broker's default is larger; the fuzzer's
/// inputs are smaller than either).
const MAX_PACKET: usize = 1 << 20;

/// Reads `wire` as the bytes a client sends the broker: a CONNECT first (its will and maximum
/// packet size read before the codec consumes it), then packets of the version it asked for,
/// with the MQTT 5 extras peeked at as the reader does; filters and topics are checked as the
/// router checks them. Any byte string is a valid argument: this returns for all of them.
pub fn broker_reads(wire: &[u8]) {
    let mut buf = BytesMut::from(wire);
    if connect_level(&buf).is_some_and(|l| l != 4 && l != 5) {
        return;
    }
    let extras = complete_packet(&buf).map(|n| (parse_will(&buf[..n]), client_props(&buf[..n])));
    let version = match codec::parse(&mut buf, Version::V311, MAX_PACKET) {
        Ok(Some(Packet::Connect(c))) => c.version,
        _ => return,
    };
    if let Some((Ok(Some(will)), _)) = extras {
        assert!(
            valid_topic(&will.topic),
            "a will with an invalid topic was accepted"
        );
        if let Some(p) = will.props() {
            let _ = p.expiry_left();
        }
    }
    loop {
        if version == Version::V5
            && matches!(buf.first().map(|h| h >> 4), Some(3 | 8))
            && let Some(n) = complete_packet(&buf)
        {
            let ok = if buf[0] >> 4 == 3 {
                publish_props(&buf[..n])
                    .map(|p| p.map(|p| p.is_expired()))
                    .is_ok()
            } else {
                subscribe_options(&buf[..n]).is_ok()
            };
            if !ok {
                return;
            }
        }
        match codec::parse(&mut buf, version, MAX_PACKET) {
            Ok(Some(Packet::Publish(p))) => {
                let _ = valid_topic(&p.topic);
            }
            Ok(Some(Packet::Subscribe { filters, .. })) => {
                for (f, _) in &filters {
                    if let Some((_, filter)) = parse_filter(f) {
                        let _ = codec::topic_matches(filter.as_bytes(), b"a/b/c");
                    }
                }
            }
            Ok(Some(Packet::Unsubscribe { filters, .. })) => {
                for f in &filters {
                    let _ = parse_filter(f);
                }
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return,
        }
    }
}
