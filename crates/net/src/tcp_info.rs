//! A socket's TCP counters, from the kernel (`getsockopt(TCP_INFO)`).
//!
//! The counters used sit past the part of `struct tcp_info` that the `libc` crate describes
//! (segment counts arrived in Linux 4.2, data-segment counts in 4.6), so the answer is read as
//! bytes at the offsets of `include/uapi/linux/tcp.h`; a kernel too old to fill them is asked
//! nothing more.

use msgbench_metrics::TcpSummary;
use std::os::fd::RawFd;

/// Offsets into `struct tcp_info` (all `__u32`).
#[cfg(target_os = "linux")]
mod offset {
    pub const TOTAL_RETRANS: usize = 100;
    pub const SEGS_OUT: usize = 136;
    pub const SEGS_IN: usize = 140;
    pub const DATA_SEGS_IN: usize = 152;
    pub const DATA_SEGS_OUT: usize = 156;
    /// Bytes the kernel must fill for all of the above.
    pub const NEEDED: usize = 160;
}

/// One connection's counters, or `None` if the kernel cannot say (not TCP, not Linux, or a
/// kernel without these counters).
#[cfg(target_os = "linux")]
pub(crate) fn read(fd: RawFd) -> Option<TcpSummary> {
    let mut buf = [0u8; 256];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is writable for `len` bytes and the kernel writes at most `len`, reporting
    // how many in `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 || (len as usize) < offset::NEEDED {
        return None;
    }
    let u32_at = |o: usize| u32::from_ne_bytes(buf[o..o + 4].try_into().unwrap()) as u64;
    Some(TcpSummary {
        connections: 1,
        segs_out: u32_at(offset::SEGS_OUT),
        segs_in: u32_at(offset::SEGS_IN),
        data_segs_out: u32_at(offset::DATA_SEGS_OUT),
        data_segs_in: u32_at(offset::DATA_SEGS_IN),
        retransmitted: u32_at(offset::TOTAL_RETRANS),
        batched: 0,
    })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn read(_fd: RawFd) -> Option<TcpSummary> {
    None
}

/// Adds a closing socket's counters to the run's tally ([`msgbench_core::tcp_tally`]), and
/// whether its I/O was batched on a ring.
pub(crate) fn tally(fd: RawFd, batched: bool) {
    if let Some(mut c) = read(fd) {
        c.batched = u64::from(batched);
        msgbench_core::tcp_tally::add(&c);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    #[test]
    fn counts_segments_both_ways() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        c.set_nodelay(true).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut b = [0u8; 8];
        for _ in 0..5 {
            c.write_all(b"ping").unwrap();
            s.read_exact(&mut b[..4]).unwrap();
            s.write_all(b"pong").unwrap();
            c.read_exact(&mut b[..4]).unwrap();
        }
        let t = super::read(c.as_raw_fd()).unwrap();
        assert_eq!(t.connections, 1);
        assert_eq!((t.data_segs_out, t.data_segs_in), (5, 5));
        // The handshake's SYN and ACK are segments without data.
        assert!(t.segs_out >= t.data_segs_out + 2, "{t:?}");
        assert!(t.segs_in > t.data_segs_in, "{t:?}");
        assert_eq!(t.retransmitted, 0);
        assert!(super::read(l.as_raw_fd()).is_some_and(|t| t.segs_out == 0));
    }
}
