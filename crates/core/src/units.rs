//! Human units used in flags and scenario files: durations (`30s`, `1m30s`, `250ms`), sizes
//! (`1KiB`, `64`, `1MB`) and rates (`50k`, `1.5M`, `20000`).

use std::time::Duration;

/// Parses a duration such as `30s`, `5m`, `1h`, `250ms`, `100us`, `1m30s` or a bare number of
/// seconds (`2.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = t.parse::<f64>() {
        return secs_to_duration(secs, s);
    }
    let mut total = 0f64;
    let mut rest = t;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_end == 0 {
            return Err(format!(
                "invalid duration `{s}`: expected a number, e.g. 30s, 5m, 250ms"
            ));
        }
        let n: f64 = rest[..num_end]
            .parse()
            .map_err(|_| format!("invalid number in duration `{s}`"))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" | "sec" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            other => {
                return Err(format!(
                    "invalid duration unit `{other}` in `{s}` (use ns, us, ms, s, m, h)"
                ));
            }
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    secs_to_duration(total, s)
}

fn secs_to_duration(secs: f64, s: &str) -> Result<Duration, String> {
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!(
            "invalid duration `{s}`: must be a non-negative time"
        ));
    }
    // Not `from_secs_f64`, which panics on what no `Duration` holds (`1e30s`).
    Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("invalid duration `{s}`: longer than any clock counts"))
}

/// Formats a duration compactly for display and for round-tripping through [`parse_duration`].
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        "0s".into()
    } else if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

/// Parses a byte size: `64`, `1KiB` (1024), `1KB` or `1k` (1000), `2MiB`, `1MB`, `1GiB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid size `{s}`: expected e.g. 64, 1KiB, 2MB"))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1048576.0,
        "g" | "gb" => 1e9,
        "gib" => 1073741824.0,
        other => {
            return Err(format!(
                "invalid size unit `{other}` in `{s}` (use B, KB, KiB, MB, MiB, GB, GiB)"
            ));
        }
    };
    let v = n * scale;
    if !v.is_finite() || v < 0.0 || v.fract() != 0.0 {
        return Err(format!(
            "invalid size `{s}`: must be a whole number of bytes"
        ));
    }
    Ok(v as u64)
}

/// Parses a count or rate with an optional SI suffix: `20000`, `50k`, `1.5M`, `2G`.
pub fn parse_count(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches("/s");
    let (num, scale) = match t.chars().last() {
        Some('k') | Some('K') => (&t[..t.len() - 1], 1e3),
        Some('M') | Some('m') => (&t[..t.len() - 1], 1e6),
        Some('G') | Some('g') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("invalid number `{s}`: expected e.g. 50000, 50k, 1.5M"))?;
    if !n.is_finite() || n < 0.0 {
        return Err(format!("invalid number `{s}`: must be non-negative"));
    }
    Ok(n * scale)
}

/// Parses `--source-addrs`: a comma-separated list of addresses and IPv4 ranges
/// (`127.0.0.1-127.0.0.50`).
pub fn parse_source_addrs(spec: &str) -> Result<Vec<std::net::IpAddr>, String> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            let a: std::net::Ipv4Addr = a
                .trim()
                .parse()
                .map_err(|_| format!("`{a}` is not an IPv4 address (ranges are IPv4 only)"))?;
            let b: std::net::Ipv4Addr = b
                .trim()
                .parse()
                .map_err(|_| format!("`{b}` is not an IPv4 address"))?;
            let (a, b) = (u32::from(a), u32::from(b));
            if b < a {
                return Err(format!("`{part}`: the range ends before it starts"));
            }
            if b - a >= 65_536 {
                return Err(format!("`{part}`: more than 65,536 addresses"));
            }
            out.extend((a..=b).map(|x| std::net::IpAddr::from(std::net::Ipv4Addr::from(x))));
        } else {
            out.push(
                part.parse()
                    .map_err(|_| format!("`{part}` is not an IP address"))?,
            );
        }
    }
    if out.is_empty() {
        return Err("no source address given".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2.5").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1s").is_err());
        for d in ["1s", "250ms", "3us", "7ns"] {
            assert_eq!(format_duration(parse_duration(d).unwrap()), d);
        }
    }

    /// Fuzzing (fuzz target scenario) found `duration = "3666…6660s"` (130 digits) panicking
    /// the scenario parser, and with it `--duration`.
    #[test]
    fn fuzz_a_duration_beyond_any_clock_is_an_error() {
        let long = format!("3{}0s", "6".repeat(128));
        for d in [long.as_str(), "1e30", "99999999999999999999h", "1e300ms"] {
            assert!(parse_duration(d).is_err(), "{d}");
        }
        assert!(parse_duration("100000h").is_ok());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64").unwrap(), 64);
        assert_eq!(parse_size("1KiB").unwrap(), 1024);
        assert_eq!(parse_size("1KB").unwrap(), 1000);
        assert_eq!(parse_size("2MiB").unwrap(), 2 * 1048576);
        assert!(parse_size("1.5").is_err());
        assert!(parse_size("12 apples").is_err());
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("50k").unwrap(), 50_000.0);
        assert_eq!(parse_count("1.5M").unwrap(), 1_500_000.0);
        assert_eq!(parse_count("20000/s").unwrap(), 20_000.0);
        assert!(parse_count("fast").is_err());
    }
    #[test]
    fn source_address_lists() {
        let v = parse_source_addrs("127.0.0.1-127.0.0.3, ::1").unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v[2].to_string(), "127.0.0.3");
        assert!(parse_source_addrs("127.0.0.5-127.0.0.1").is_err());
        assert!(parse_source_addrs("nope").is_err());
    }
}

/// `#[serde(with = "...")]` support: a `Duration` written as a human string (`"30s"`), read from
/// a string or a number of seconds.
pub mod serde_duration {
    use super::*;
    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Secs(f64),
    }

    /// Writes `d` as a human string.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }

    /// Reads a human string or a number of seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        match Raw::deserialize(d)? {
            Raw::Text(t) => parse_duration(&t).map_err(serde::de::Error::custom),
            Raw::Secs(n) => secs_to_duration(n, &n.to_string()).map_err(serde::de::Error::custom),
        }
    }
}

/// `#[serde(with = "...")]` support for `Option<Duration>` (absent or null = `None`).
pub mod serde_opt_duration {
    use super::*;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `Some(d)` as a human string, `None` as null.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    /// Reads a human string, or null.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(t) => parse_duration(&t)
                .map(Some)
                .map_err(serde::de::Error::custom),
            None => Ok(None),
        }
    }
}
