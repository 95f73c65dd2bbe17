//! Number formatting shared by the TUI and the progress line: counts with thousands separators,
//! rates with SI suffixes, latencies and durations in the most readable unit. Pure functions, so
//! what the screen shows is testable as text.

/// `1234567` → `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate or level as a rounded count with separators (`12,345`); negative and non-finite values
/// show as 0.
pub fn rate(v: f64) -> String {
    count(if v.is_finite() && v > 0.0 {
        v.round() as u64
    } else {
        0
    })
}

/// A short SI form for axis labels: `950`, `12.5k`, `1.20M`.
pub fn si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// A latency in nanoseconds in the most readable unit, as the plain table shows it.
pub use msgbench_report::live::latency;

/// An axis label for 10^`k` nanoseconds: `100ns`, `1us`, `10ms`, `100s`.
pub fn decade(k: i32) -> String {
    let k = k.clamp(0, 12);
    let (unit, base) = match k {
        0..=2 => ("ns", 0),
        3..=5 => ("us", 3),
        6..=8 => ("ms", 6),
        _ => ("s", 9),
    };
    format!("{}{unit}", 10u64.pow((k - base) as u32))
}

/// A duration in seconds for humans: `0.4s`, `42s`, `3m 05s`, `2h 01m`.
pub fn duration(s: f64) -> String {
    let s = if s.is_finite() { s.max(0.0) } else { 0.0 };
    if s < 10.0 {
        return format!("{s:.1}s");
    }
    let whole = s.round() as u64;
    if whole < 60 {
        format!("{whole}s")
    } else if whole < 3600 {
        format!("{}m {:02}s", whole / 60, whole % 60)
    } else {
        format!("{}h {:02}m", whole / 3600, whole / 60 % 60)
    }
}

/// Truncates `s` to at most `width` characters, marking the cut with `…`.
pub fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_get_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(rate(12345.6), "12,346");
        assert_eq!(rate(f64::NAN), "0");
    }

    #[test]
    fn si_and_latency_units() {
        assert_eq!(si(950.0), "950");
        assert_eq!(si(1500.0), "1.5k");
        assert_eq!(si(12_500.0), "12k");
        assert_eq!(si(1_200_000.0), "1.20M");
        assert_eq!(latency(870), "870ns");
        assert_eq!(latency(12_345), "12.3us");
        assert_eq!(latency(4_560_000), "4.56ms");
        assert_eq!(latency(1_200_000_000), "1.20s");
        assert_eq!(decade(2), "100ns");
        assert_eq!(decade(3), "1us");
        assert_eq!(decade(7), "10ms");
        assert_eq!(decade(11), "100s");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(0.42), "0.4s");
        assert_eq!(duration(42.2), "42s");
        assert_eq!(duration(185.0), "3m 05s");
        assert_eq!(duration(7260.0), "2h 01m");
        assert_eq!(duration(-3.0), "0.0s");
    }

    #[test]
    fn fit_cuts_with_an_ellipsis() {
        assert_eq!(fit("abcdef", 10), "abcdef");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abcdef", 0), "");
    }
}
