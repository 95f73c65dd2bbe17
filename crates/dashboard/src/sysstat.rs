//! Host and generator resource figures for the live view, read from `/proc` once per interval:
//! host CPU from `/proc/stat` (busy jiffies between two samples), host memory from
//! `/proc/meminfo` (`MemTotal - MemAvailable`), the generator's resident memory from
//! `/proc/self/status` (`VmRSS`). The generator's CPU comes from the interval record itself.
//!
//! These figures are not in the results file: they describe the machine while the live page
//! watched it. On systems without `/proc` every figure is absent (`None`), never an error.

use std::path::{Path, PathBuf};

/// Host CPU counters from the first (`cpu`) line of `/proc/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTimes {
    /// Every tick counted.
    pub total: u64,
    /// Idle and I/O-wait ticks.
    pub idle: u64,
}

/// Parses the aggregate `cpu` line of `/proc/stat`.
pub fn parse_cpu_times(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if v.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    let total = v.iter().take(8).sum();
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    Some(CpuTimes { total, idle })
}

/// Bytes in use on the host (`MemTotal - MemAvailable`) and `MemTotal`, from `/proc/meminfo`.
pub fn parse_meminfo(meminfo: &str) -> Option<(u64, u64)> {
    let total = kib_field(meminfo, "MemTotal:")?;
    let available = kib_field(meminfo, "MemAvailable:")?;
    Some((total.saturating_sub(available), total))
}

/// Resident memory in bytes (`VmRSS`) from a `/proc/<pid>/status` file.
pub fn parse_rss(status: &str) -> Option<u64> {
    kib_field(status, "VmRSS:")
}

/// The `NAME:   1234 kB` line of a /proc file, in bytes.
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

/// One sample of the host and the generator.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// CPUs the host kept busy since the previous sample (0..number of CPUs); `None` on the
    /// first sample.
    pub host_cpu_cores: Option<f64>,
    /// Host memory in use, bytes.
    pub host_mem_used: Option<u64>,
    /// Host memory, bytes.
    pub host_mem_total: Option<u64>,
    /// Resident memory of this process, bytes.
    pub self_rss: Option<u64>,
}

/// Samples `/proc` (or another directory laid out like it, for tests).
#[derive(Debug)]
pub struct Sampler {
    root: PathBuf,
    cpus: f64,
    last: Option<CpuTimes>,
}

impl Sampler {
    /// Reads the real `/proc`.
    pub fn new() -> Self {
        Self::with_root("/proc")
    }

    /// Reads `root/stat`, `root/meminfo`, `root/self/status`.
    pub fn with_root(root: impl AsRef<Path>) -> Self {
        Sampler {
            root: root.as_ref().to_path_buf(),
            cpus: std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64),
            last: None,
        }
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(rel)).ok()
    }

    /// Takes one sample; CPU use is over the time since the previous call.
    pub fn sample(&mut self) -> Sample {
        let now = self.read("stat").as_deref().and_then(parse_cpu_times);
        let host_cpu_cores = match (self.last, now) {
            (Some(a), Some(b)) if b.total > a.total => {
                let busy = (b.total - a.total).saturating_sub(b.idle.saturating_sub(a.idle));
                Some(busy as f64 / (b.total - a.total) as f64 * self.cpus)
            }
            _ => None,
        };
        if now.is_some() {
            self.last = now;
        }
        let mem = self.read("meminfo").as_deref().and_then(parse_meminfo);
        Sample {
            host_cpu_cores,
            host_mem_used: mem.map(|m| m.0),
            host_mem_total: mem.map(|m| m.1),
            self_rss: self.read("self/status").as_deref().and_then(parse_rss),
        }
    }
}

impl Default for Sampler {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n";
        assert_eq!(
            parse_cpu_times(stat),
            Some(CpuTimes {
                total: 1000,
                idle: 850
            })
        );
        let mem = "MemTotal:       16000 kB\nMemFree:         1000 kB\nMemAvailable:    4000 kB\n";
        assert_eq!(parse_meminfo(mem), Some((12000 * 1024, 16000 * 1024)));
        assert_eq!(
            parse_rss("Name:\tx\nVmRSS:\t   2048 kB\n"),
            Some(2048 * 1024)
        );
        assert_eq!(parse_rss("Name:\tx\n"), None);
    }

    #[test]
    fn host_cpu_is_the_busy_share_between_samples() {
        let dir = std::env::temp_dir().join(format!("msgbench-sysstat-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("self")).unwrap();
        std::fs::write(dir.join("stat"), "cpu  100 0 0 900 0 0 0 0\n").unwrap();
        std::fs::write(
            dir.join("meminfo"),
            "MemTotal: 100 kB\nMemAvailable: 40 kB\n",
        )
        .unwrap();
        std::fs::write(dir.join("self/status"), "VmRSS: 10 kB\n").unwrap();
        let mut s = Sampler::with_root(&dir);
        s.cpus = 4.0;
        let first = s.sample();
        assert_eq!(first.host_cpu_cores, None);
        assert_eq!(first.host_mem_used, Some(60 * 1024));
        assert_eq!(first.self_rss, Some(10 * 1024));
        // 1000 more ticks, 250 of them busy: a quarter of 4 CPUs.
        std::fs::write(dir.join("stat"), "cpu  350 0 0 1650 0 0 0 0\n").unwrap();
        assert_eq!(s.sample().host_cpu_cores, Some(1.0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_proc_gives_no_figures() {
        let mut s = Sampler::with_root("/nonexistent-msgbench-proc");
        assert_eq!(s.sample(), Sample::default());
    }
}
