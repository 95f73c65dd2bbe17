//! Message-size distributions: fixed, uniform, normal, log-normal, or an empirical table read
//! from a file. [`SizeSpec`] is what a plan (and the results file) says; [`SizeSampler`] is
//! its prepared form, one per producer, drawing one size per message in a few nanoseconds
//! without allocating: the continuous distributions are drawn in advance ([`DRAWN`] sizes per
//! producer, taken at random), a table by a binary search over its cumulative weights.
//!
//! Every size includes the stamp, so a distribution is clamped: normal and log-normal ones to
//! four standard deviations (four σ factors) around their centre, and never below the 40-byte
//! stamp. The clamp bounds are written in the spec, so reports show the sizes a run could
//! send.

use crate::rng::Rng;
use crate::stamp::STAMP_LEN;
use serde::{Deserialize, Serialize};

/// Largest message msgbench sends.
pub const MAX_SIZE: u64 = 1 << 30;

/// Most entries an empirical size table may have.
pub const MAX_TABLE: usize = 10_000;

/// How large messages are, stamp included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SizeSpec {
    /// Every message has this many bytes.
    Fixed {
        /// Bytes per message.
        bytes: u64,
    },
    /// Uniformly distributed sizes in `min..=max` bytes.
    Range {
        /// Smallest message.
        min: u64,
        /// Largest message.
        max: u64,
    },
    /// Normally distributed around `mean` with standard deviation `sd`, clamped to
    /// `min..=max`.
    Normal {
        /// Mean size.
        mean: u64,
        /// Standard deviation.
        sd: u64,
        /// Clamp floor: mean − 4 sd, at least the stamp.
        min: u64,
        /// Clamp ceiling: mean + 4 sd.
        max: u64,
    },
    /// Log-normal: `median` × e^(σZ), Z standard normal, clamped to `min..=max`. The shape
    /// of real message sizes: most small, a long tail of large ones.
    LogNormal {
        /// Median size.
        median: u64,
        /// σ of the size's logarithm (0.5: the middle two thirds within ×0.6..×1.65).
        sigma: f64,
        /// Clamp floor: median × e^(−4σ), at least the stamp.
        min: u64,
        /// Clamp ceiling: median × e^(4σ).
        max: u64,
    },
    /// Sizes drawn from a table of sizes and weights (an empirical histogram, from a file).
    Table {
        /// `[size, weight]` pairs.
        entries: Vec<(u64, u64)>,
    },
}

impl SizeSpec {
    /// The largest message this spec produces.
    pub fn max(&self) -> u64 {
        match self {
            SizeSpec::Fixed { bytes } => *bytes,
            SizeSpec::Range { max, .. }
            | SizeSpec::Normal { max, .. }
            | SizeSpec::LogNormal { max, .. } => *max,
            SizeSpec::Table { entries } => entries.iter().map(|e| e.0).max().unwrap_or(0),
        }
    }

    /// The smallest message this spec produces.
    pub fn min(&self) -> u64 {
        match self {
            SizeSpec::Fixed { bytes } => *bytes,
            SizeSpec::Range { min, .. }
            | SizeSpec::Normal { min, .. }
            | SizeSpec::LogNormal { min, .. } => *min,
            SizeSpec::Table { entries } => entries.iter().map(|e| e.0).min().unwrap_or(0),
        }
    }

    /// The mean message size (before clamping, for the continuous ones), for sizing backlogs.
    pub fn mean(&self) -> u64 {
        match self {
            SizeSpec::Fixed { bytes } => *bytes,
            SizeSpec::Range { min, max } => (min + max) / 2,
            SizeSpec::Normal { mean, .. } => *mean,
            SizeSpec::LogNormal { median, sigma, .. } => {
                (*median as f64 * (sigma * sigma / 2.0).exp()) as u64
            }
            SizeSpec::Table { entries } => {
                let total: u128 = entries.iter().map(|e| e.1 as u128).sum();
                let sum: u128 = entries.iter().map(|e| e.0 as u128 * e.1 as u128).sum();
                sum.checked_div(total).unwrap_or(0) as u64
            }
        }
    }

    /// Parses `1KiB` (fixed), `100..2KiB` (uniform), `normal:MEAN,SD` (`normal:1KiB,200`)
    /// or `lognormal:MEDIAN,SIGMA` (`lognormal:512,0.8`). A table comes from a file
    /// ([`SizeSpec::from_table`]).
    pub fn parse(s: &str) -> Result<Self, String> {
        let size = crate::units::parse_size;
        if let Some(args) = s.strip_prefix("normal:") {
            let (mean, sd) = args
                .split_once(',')
                .ok_or_else(|| format!("`{s}`: expected normal:MEAN,SD (e.g. normal:1KiB,200)"))?;
            let (mean, sd) = (size(mean.trim())?, size(sd.trim())?);
            return Ok(SizeSpec::Normal {
                mean,
                sd,
                min: mean.saturating_sub(4 * sd).max(STAMP_LEN as u64),
                max: mean.saturating_add(4 * sd).min(MAX_SIZE),
            });
        }
        if let Some(args) = s.strip_prefix("lognormal:") {
            let (median, sigma) = args.split_once(',').ok_or_else(|| {
                format!("`{s}`: expected lognormal:MEDIAN,SIGMA (e.g. lognormal:512,0.8)")
            })?;
            let median = size(median.trim())?;
            let sigma: f64 = sigma
                .trim()
                .parse()
                .ok()
                .filter(|g: &f64| g.is_finite() && (0.0..=3.0).contains(g))
                .ok_or_else(|| format!("`{s}`: SIGMA is a number from 0 to 3 (e.g. 0.8)"))?;
            let spread = (4.0 * sigma).exp();
            return Ok(SizeSpec::LogNormal {
                median,
                sigma,
                min: ((median as f64 / spread) as u64).max(STAMP_LEN as u64),
                max: ((median as f64 * spread) as u64).min(MAX_SIZE),
            });
        }
        if let Some((a, b)) = s.split_once("..") {
            let min = size(a)?;
            let max = size(b.trim_start_matches('='))?;
            Ok(SizeSpec::Range { min, max })
        } else {
            Ok(SizeSpec::Fixed { bytes: size(s)? })
        }
    }

    /// An empirical distribution from the text of a size file: one `SIZE [WEIGHT]` per line
    /// (`512 30`, `4KiB 2`; weight 1 when left out, so a file of observed sizes is its own
    /// histogram), `#` comments and blank lines ignored. Errors name the line.
    pub fn from_table(text: &str) -> Result<Self, String> {
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let at = |m: String| format!("line {}: {m}", i + 1);
            let size = crate::units::parse_size(words.next().unwrap_or("")).map_err(at)?;
            let weight = match words.next() {
                None => 1,
                Some(w) => w
                    .parse::<u64>()
                    .map_err(|_| at(format!("weight `{w}` is not a whole number")))?,
            };
            if let Some(extra) = words.next() {
                return Err(at(format!("`{extra}`: expected SIZE [WEIGHT]")));
            }
            entries.push((size, weight));
        }
        entries.sort_unstable();
        entries.dedup_by(|b, a| {
            let same = a.0 == b.0;
            if same {
                a.1 += b.1;
            }
            same
        });
        entries.retain(|e| e.1 > 0);
        if entries.is_empty() {
            return Err("no sizes with a weight above 0".into());
        }
        if entries.len() > MAX_TABLE {
            return Err(format!(
                "{} distinct sizes; at most {MAX_TABLE} (round them into buckets)",
                entries.len()
            ));
        }
        Ok(SizeSpec::Table { entries })
    }

    /// Raises the clamp floor of a normal or log-normal distribution to `floor` (the text
    /// stamp's 58 bytes): their floor is msgbench's choice, not the user's. Fixed sizes, ranges
    /// and tables are left as given (too small a one is the user's to fix).
    pub fn raise_floor(&mut self, floor: u64) {
        if let SizeSpec::Normal { min, max, .. } | SizeSpec::LogNormal { min, max, .. } = self {
            *min = (*min).max(floor).min(*max);
        }
    }

    /// Checks every message can hold a stamp and the bounds are ordered and sane.
    pub fn validate(&self) -> Result<(), String> {
        if self.min() < STAMP_LEN as u64 {
            return Err(format!(
                "message size {} is below the {STAMP_LEN}-byte stamp every message carries; use at least {STAMP_LEN}",
                self.min()
            ));
        }
        if self.min() > self.max() {
            return Err(format!(
                "size range {}..{} is empty (min > max)",
                self.min(),
                self.max()
            ));
        }
        if self.max() > MAX_SIZE {
            return Err(format!(
                "message size {} is above the 1 GiB limit",
                self.max()
            ));
        }
        Ok(())
    }

    /// How `msgbench run` states it: `1024 B`, `100..2048 B`, `normal 1024±200 B`...
    pub fn describe(&self) -> String {
        match self {
            SizeSpec::Fixed { bytes } => format!("{bytes} B"),
            SizeSpec::Range { min, max } => format!("{min}..{max} B"),
            SizeSpec::Normal { mean, sd, min, max } => {
                format!("normal {mean}±{sd} B ({min}..{max})")
            }
            SizeSpec::LogNormal {
                median,
                sigma,
                min,
                max,
            } => format!("log-normal median {median} B σ {sigma} ({min}..{max})"),
            SizeSpec::Table { entries } => format!(
                "{} sizes from a table, {}..{} B, mean {}",
                entries.len(),
                self.min(),
                self.max(),
                self.mean()
            ),
        }
    }
}

/// How many sizes a continuous distribution is drawn into in advance (32 KiB per producer).
pub const DRAWN: usize = 8192;

/// `DRAWN` sizes of a normal (`log` false: `centre + scale·Z`) or log-normal (`centre·e^(scale·Z)`)
/// distribution, clamped to `min..=max`.
fn draw(log: bool, centre: f64, scale: f64, min: u64, max: u64, rng: &mut Rng) -> SizeSampler {
    let sizes = (0..DRAWN)
        .map(|_| {
            // Box–Muller: one standard normal from two uniforms in (0, 1].
            let (u1, u2) = (rng.next_f64_open0(), rng.next_f64_open0());
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            let x = if log {
                centre * (scale * z).exp()
            } else {
                centre + scale * z
            };
            x.round().clamp(min as f64, max as f64) as u32
        })
        .collect();
    SizeSampler::Drawn(sizes)
}

/// A [`SizeSpec`] prepared for drawing: what a producer keeps.
#[derive(Debug, Clone)]
pub enum SizeSampler {
    /// Always this size.
    Fixed(usize),
    /// Uniform in `lo..=hi`.
    Range(u64, u64),
    /// Sizes drawn in advance from a continuous distribution ([`DRAWN`] of them), taken at
    /// random: a draw per message then costs what a uniform one does, not a logarithm, a
    /// square root and a cosine.
    Drawn(Vec<u32>),
    /// Sizes and their cumulative weights (binary search on a uniform draw).
    Table {
        /// Sizes, ascending.
        sizes: Vec<usize>,
        /// Running totals of the weights.
        cumulative: Vec<u64>,
    },
}

impl SizeSampler {
    /// The sampler of `spec`; continuous distributions are drawn in advance from `rng`.
    pub fn new(spec: &SizeSpec, rng: &mut Rng) -> Self {
        match spec {
            SizeSpec::Fixed { bytes } => SizeSampler::Fixed(*bytes as usize),
            SizeSpec::Range { min, max } => SizeSampler::Range(*min, *max),
            SizeSpec::Normal { mean, sd, min, max } => {
                draw(false, *mean as f64, *sd as f64, *min, *max, rng)
            }
            SizeSpec::LogNormal {
                median,
                sigma,
                min,
                max,
            } => draw(true, *median as f64, *sigma, *min, *max, rng),
            SizeSpec::Table { entries } => {
                let mut total = 0;
                SizeSampler::Table {
                    sizes: entries.iter().map(|e| e.0 as usize).collect(),
                    cumulative: entries
                        .iter()
                        .map(|e| {
                            total += e.1;
                            total
                        })
                        .collect(),
                }
            }
        }
    }

    /// The next message's size.
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> usize {
        match self {
            SizeSampler::Fixed(n) => *n,
            SizeSampler::Range(lo, hi) => rng.range(*lo, *hi) as usize,
            SizeSampler::Drawn(sizes) => sizes[(rng.next_u64() % DRAWN as u64) as usize] as usize,
            SizeSampler::Table { sizes, cumulative } => {
                let total = *cumulative.last().unwrap_or(&1);
                let r = rng.next_u64() % total;
                sizes[cumulative.partition_point(|&c| c <= r)]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draw(spec: &SizeSpec, n: usize) -> Vec<usize> {
        let mut rng = Rng::new(9);
        let s = SizeSampler::new(spec, &mut rng);
        (0..n).map(|_| s.next(&mut rng)).collect()
    }

    fn mean(v: &[usize]) -> f64 {
        v.iter().sum::<usize>() as f64 / v.len() as f64
    }

    #[test]
    fn normal_sizes_centre_on_the_mean_within_the_clamp() {
        let spec = SizeSpec::parse("normal:1KiB,100").unwrap();
        assert_eq!(spec.min(), 624);
        assert_eq!(spec.max(), 1424);
        let v = draw(&spec, 100_000);
        assert!((mean(&v) - 1024.0).abs() < 3.0, "{}", mean(&v));
        let within_sd = v.iter().filter(|&&x| x.abs_diff(1024) <= 100).count();
        assert!((66_000..70_500).contains(&within_sd), "{within_sd}"); // 68.3 %
        assert!(v.iter().all(|&x| (624..=1424).contains(&x)));
        // A wide one is clamped at the stamp, the text stamp's when messages carry one.
        let mut wide = SizeSpec::parse("normal:100,50").unwrap();
        assert_eq!(wide.min(), 40);
        wide.raise_floor(58);
        assert_eq!((wide.min(), wide.max()), (58, 300));
        let mut fixed = SizeSpec::Fixed { bytes: 40 };
        fixed.raise_floor(58);
        assert_eq!(fixed.min(), 40, "a size the user gave is theirs to fix");
    }

    #[test]
    fn log_normal_sizes_have_their_median_and_a_long_tail() {
        let spec = SizeSpec::parse("lognormal:512,0.8").unwrap();
        let mut v = draw(&spec, 100_001);
        v.sort_unstable();
        let median = v[50_000];
        assert!((490..=535).contains(&median), "{median}");
        assert!(mean(&v) > 650.0, "the tail pulls the mean up: {}", mean(&v));
        assert!(v[0] >= spec.min() as usize && v[100_000] <= spec.max() as usize);
        assert!(SizeSpec::parse("lognormal:512,-1").is_err());
        assert!(SizeSpec::parse("lognormal:512").is_err());
    }

    #[test]
    fn a_table_draws_by_weight() {
        let spec = SizeSpec::from_table("# sizes seen\n100 3\n1KiB 1\n100\n\n").unwrap();
        assert_eq!(
            spec,
            SizeSpec::Table {
                entries: vec![(100, 4), (1024, 1)]
            }
        );
        assert_eq!(spec.mean(), (400 + 1024) / 5);
        let v = draw(&spec, 50_000);
        let small = v.iter().filter(|&&x| x == 100).count();
        assert!((39_000..41_000).contains(&small), "{small}"); // 80 %
        assert!(v.iter().all(|&x| x == 100 || x == 1024));
        let e = SizeSpec::from_table("100\nbig 2\n").unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
        assert!(SizeSpec::from_table("100 0\n").is_err());
    }
}
