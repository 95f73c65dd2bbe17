//! A time reference for segmented runs (`msgbench serve time`) and the client that measures a
//! host's clock offset against it.
//!
//! Segments on different hosts compare stamps in wall-clock time, so a cross-host latency is
//! only as good as the two clocks. With `--time-reference HOST:PORT`, each segment measures its
//! offset to one reference NTP-style over UDP and corrects for it; the uncertainty left is half
//! the round trip of the best probe, which the results file records.
//!
//! Wire format (little-endian): a probe is 16 bytes, [`MAGIC`] + 4 reserved bytes + an 8-byte
//! nonce; the answer is 32 bytes, the probe's first 16 bytes followed by the reference's
//! CLOCK_REALTIME nanoseconds when the probe arrived and when the answer left.

use msgbench_core::clock::realtime_ns;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// First bytes of every probe and answer.
pub const MAGIC: [u8; 4] = *b"MBT1";

/// Why the offset could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum TimeError {
    /// A socket operation failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// No probe was answered.
    #[error("no answer from the time reference {0} (is `msgbench serve time` running there?)")]
    NoAnswer(String),
}

/// The reference's socket, bound (for [`crate::server::Server`]: [`serve`] until stopped).
pub struct Reference {
    /// Where probes arrive.
    pub socket: tokio::net::UdpSocket,
}

/// A host's clock measured against the reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offset {
    /// Add to the local wall clock to get the reference's time, ns.
    pub offset_ns: i64,
    /// Round trip of the best probe, ns; the offset is right within half of it.
    pub rtt_ns: u64,
    /// Probes answered.
    pub answered: u32,
}

/// Serves the reference on `socket` until `stop` resolves. Answers every well-formed probe,
/// ignores anything else.
pub async fn serve(
    socket: tokio::net::UdpSocket,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<u64> {
    let mut buf = [0u8; 64];
    let mut answered = 0u64;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            r = socket.recv_from(&mut buf) => {
                let (n, from) = match r {
                    Ok(x) => x,
                    // ICMP errors of earlier answers surface here on Linux: not fatal.
                    Err(_) => continue,
                };
                let t_recv = realtime_ns();
                if n != 16 || buf[..4] != MAGIC {
                    continue;
                }
                let mut out = [0u8; 32];
                out[..16].copy_from_slice(&buf[..16]);
                out[16..24].copy_from_slice(&t_recv.to_le_bytes());
                out[24..32].copy_from_slice(&realtime_ns().to_le_bytes());
                if socket.send_to(&out, from).await.is_ok() {
                    answered += 1;
                }
            }
            _ = &mut stop => return Ok(answered),
        }
    }
}

/// Sends `probes` probes to `reference` (one at a time, each waiting at most `timeout`) and
/// returns the offset from the probe with the shortest round trip (the least queueing).
pub fn measure(reference: &str, probes: u32, timeout: Duration) -> Result<Offset, TimeError> {
    use std::net::ToSocketAddrs;
    let addr: SocketAddr = reference
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| TimeError::NoAnswer(reference.to_string()))?;
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let sock = UdpSocket::bind(bind)?;
    sock.connect(addr)?;
    sock.set_read_timeout(Some(timeout))?;
    let mut best: Option<Offset> = None;
    let mut answered = 0;
    let mut buf = [0u8; 64];
    for nonce in 0..probes as u64 {
        let mut probe = [0u8; 16];
        probe[..4].copy_from_slice(&MAGIC);
        probe[8..16].copy_from_slice(&nonce.to_le_bytes());
        let t1 = realtime_ns();
        if sock.send(&probe).is_err() {
            continue;
        }
        // Read until this probe's answer (a late answer to an earlier probe is skipped).
        let answer = loop {
            match sock.recv(&mut buf) {
                Ok(32) if buf[..16] == probe => break Some(realtime_ns()),
                Ok(_) => continue,
                Err(_) => break None,
            }
        };
        let Some(t4) = answer else { continue };
        answered += 1;
        let t2 = u64::from_le_bytes(buf[16..24].try_into().expect("8 bytes"));
        let t3 = u64::from_le_bytes(buf[24..32].try_into().expect("8 bytes"));
        let (t1, t2, t3, t4) = (t1 as i128, t2 as i128, t3 as i128, t4 as i128);
        let offset = ((t2 - t1) + (t3 - t4)) / 2;
        let rtt = ((t4 - t1) - (t3 - t2)).max(0) as u64;
        if best.is_none_or(|b| rtt < b.rtt_ns) {
            best = Some(Offset {
                offset_ns: offset as i64,
                rtt_ns: rtt,
                answered: 0,
            });
        }
    }
    best.map(|b| Offset { answered, ..b })
        .ok_or_else(|| TimeError::NoAnswer(reference.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn measures_a_local_reference_as_no_offset() {
        let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = sock.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(sock, async {
            let _ = rx.await;
        }));
        let off = tokio::task::spawn_blocking(move || {
            measure(&addr.to_string(), 8, Duration::from_secs(1))
        })
        .await
        .unwrap()
        .unwrap();
        assert_eq!(off.answered, 8);
        // Same host, same clock: the offset is within the round trip.
        assert!(
            off.offset_ns.unsigned_abs() <= off.rtt_ns.max(1_000_000),
            "{off:?}"
        );
        tx.send(()).unwrap();
        assert!(server.await.unwrap().unwrap() >= 8);
    }

    #[test]
    fn a_silent_reference_is_an_error() {
        // A bound socket that never answers.
        let quiet = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = quiet.local_addr().unwrap().to_string();
        let e = measure(&addr, 2, Duration::from_millis(50)).unwrap_err();
        assert!(e.to_string().contains("no answer"), "{e}");
    }
}
