//! The host's figures per interval, for the results file: CPU busy share, memory in use,
//! network bytes and packets moved, load average. Read from `/proc` once per interval (never on
//! the hot path) by a [`HostSampler`] that keeps the previous counters, so CPU and network are
//! what happened in the interval. They say whether the machine itself (the system under test on
//! the same host, another tenant) was saturated while the figures were taken.
//!
//! Network counters sum every interface, loopback included: on one machine the load goes over
//! loopback. On a system without `/proc` there are no figures (`None`), never an error.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The host over one interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostStats {
    /// Share of all CPUs' time spent busy (not idle or waiting for I/O), 0 to 1.
    pub cpu_busy: f64,
    /// Memory in use at the end (`MemTotal - MemAvailable`), bytes.
    pub mem_used_bytes: u64,
    /// `MemTotal`, bytes.
    pub mem_total_bytes: u64,
    /// Bytes received on every interface in the interval.
    pub net_rx_bytes: u64,
    /// Bytes sent on every interface in the interval.
    pub net_tx_bytes: u64,
    /// Packets received on every interface in the interval.
    pub net_rx_packets: u64,
    /// Packets sent on every interface in the interval.
    pub net_tx_packets: u64,
    /// One-minute load average at the end.
    pub load1: f64,
}

/// `(total, idle)` clock ticks of the aggregate `cpu` line of `/proc/stat`.
fn cpu_ticks(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if v.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal (guest time is already in user and nice)
    Some((
        v.iter().take(8).sum(),
        v[3] + v.get(4).copied().unwrap_or(0),
    ))
}

/// `[rx bytes, rx packets, tx bytes, tx packets]` summed over the interfaces of `/proc/net/dev`.
fn net_totals(dev: &str) -> Option<[u64; 4]> {
    let mut t = [0u64; 4];
    let mut any = false;
    for line in dev.lines().skip(2) {
        let Some((_, counters)) = line.split_once(':') else {
            continue;
        };
        let v: Vec<u64> = counters
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if v.len() < 10 {
            continue;
        }
        for (slot, i) in t.iter_mut().zip([0, 1, 8, 9]) {
            *slot += v[i];
        }
        any = true;
    }
    any.then_some(t)
}

/// `NAME:   1234 kB` of `/proc/meminfo`, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kib| kib * 1024)
}

/// Reads [`HostStats`] once per interval, keeping the counters of the previous reading.
#[derive(Debug)]
pub struct HostSampler {
    root: PathBuf,
    cpu: Option<(u64, u64)>,
    net: Option<[u64; 4]>,
}

impl Default for HostSampler {
    fn default() -> Self {
        Self::new()
    }
}

impl HostSampler {
    /// A sampler of this machine's `/proc`; the first [`sample`](Self::sample) sets the
    /// baseline.
    pub fn new() -> Self {
        Self::with_root("/proc")
    }

    /// A sampler of the `/proc`-like tree at `root` (tests).
    pub fn with_root(root: impl AsRef<Path>) -> Self {
        let mut s = HostSampler {
            root: root.as_ref().to_path_buf(),
            cpu: None,
            net: None,
        };
        s.cpu = s.read("stat").as_deref().and_then(cpu_ticks);
        s.net = s.read("net/dev").as_deref().and_then(net_totals);
        s
    }

    fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(name)).ok()
    }

    /// The host since the previous call (or since the sampler was made); `None` without
    /// `/proc`.
    pub fn sample(&mut self) -> Option<HostStats> {
        let cpu = self.read("stat").as_deref().and_then(cpu_ticks)?;
        let cpu_busy = match self.cpu.replace(cpu) {
            Some((t0, i0)) if cpu.0 > t0 => {
                let (dt, di) = (cpu.0 - t0, cpu.1.saturating_sub(i0));
                (dt.saturating_sub(di)) as f64 / dt as f64
            }
            _ => 0.0,
        };
        let net = self.read("net/dev").as_deref().and_then(net_totals);
        let moved = match (net, std::mem::replace(&mut self.net, net)) {
            (Some(n), Some(p)) => std::array::from_fn(|i| n[i].saturating_sub(p[i])),
            _ => [0; 4],
        };
        let meminfo = self.read("meminfo").unwrap_or_default();
        let total = kib_field(&meminfo, "MemTotal:").unwrap_or(0);
        let available = kib_field(&meminfo, "MemAvailable:").unwrap_or(0);
        let load1 = self
            .read("loadavg")
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        Some(HostStats {
            cpu_busy,
            mem_used_bytes: total.saturating_sub(available),
            mem_total_bytes: total,
            net_rx_bytes: moved[0],
            net_rx_packets: moved[1],
            net_tx_bytes: moved[2],
            net_tx_packets: moved[3],
            load1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, cpu: (u64, u64), net: (u64, u64)) {
        std::fs::create_dir_all(root.join("net")).unwrap();
        std::fs::write(
            root.join("stat"),
            format!("cpu  {} 0 0 {} 0 0 0 0 0 0\ncpu0 1 2 3 4\n", cpu.0, cpu.1),
        )
        .unwrap();
        std::fs::write(
            root.join("net/dev"),
            format!(
                "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets\n    lo: {0} {1} 0 0 0 0 0 0 {0} {1} 0 0 0 0 0 0\n  eth0: 100 1 0 0 0 0 0 0 200 2 0 0 0 0 0 0\n",
                net.0, net.1
            ),
        )
        .unwrap();
        std::fs::write(
            root.join("meminfo"),
            "MemTotal:       1000 kB\nMemFree: 10 kB\nMemAvailable:    250 kB\n",
        )
        .unwrap();
        std::fs::write(root.join("loadavg"), "1.50 0.80 0.40 2/300 12345\n").unwrap();
    }

    #[test]
    fn intervals_are_deltas() {
        let root = std::env::temp_dir().join(format!("msgbench-host-{}", std::process::id()));
        write(&root, (100, 100), (1000, 10));
        let mut s = HostSampler::with_root(&root);
        // 300 more busy ticks and 100 more idle: 75% busy; loopback moved 500 bytes, 5 packets.
        write(&root, (400, 200), (1500, 15));
        let h = s.sample().unwrap();
        assert!((h.cpu_busy - 0.75).abs() < 1e-9, "{h:?}");
        assert_eq!(
            (
                h.net_rx_bytes,
                h.net_rx_packets,
                h.net_tx_bytes,
                h.net_tx_packets
            ),
            (500, 5, 500, 5)
        );
        assert_eq!(
            (h.mem_used_bytes, h.mem_total_bytes),
            (750 * 1024, 1000 * 1024)
        );
        assert_eq!(h.load1, 1.5);
        let _ = std::fs::remove_dir_all(&root);
        assert!(
            HostSampler::with_root(&root).sample().is_none(),
            "no /proc: no figures"
        );
    }
}
