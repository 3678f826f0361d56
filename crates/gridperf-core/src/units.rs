//! Units people type and read: byte sizes, durations, and the formatting of
//! times and rates in units that fit.
//!
//! Byte sizes follow GNU dd: a bare `k`/`K`, `m`/`M`, `g`/`G` and the IEC
//! forms `KiB`, `MiB`, `GiB` are powers of 1024; `KB`, `MB`, `GB` are powers of
//! 1000. `B` alone means bytes.

use thiserror::Error;

/// What was wrong with a value the user typed, and what is valid.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum UnitError {
    #[error("{what} {input:?} is not a valid byte size: use a whole number with an optional unit, e.g. 1460, 64k, 1KiB (1024), 1KB (1000), 16MiB")]
    BadSize { what: &'static str, input: String },
    #[error("{what} {input:?} is not a valid duration: use a number with a unit, e.g. 500us, 10ms, 2s, 1.5m, 1h, 7d")]
    BadDuration { what: &'static str, input: String },
    #[error("{what} {input:?} is too large")]
    Overflow { what: &'static str, input: String },
}

/// Parses a byte size such as `1460`, `64k`, `1KiB`, `1KB`, `16MiB`.
pub fn parse_bytes(input: &str, what: &'static str) -> Result<u64, UnitError> {
    let s = input.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(UnitError::BadSize { what, input: input.to_string() });
    }
    let mult: u64 = match unit {
        "" | "B" | "b" => 1,
        "k" | "K" | "KiB" | "kiB" => 1 << 10,
        "m" | "M" | "MiB" => 1 << 20,
        "g" | "G" | "GiB" => 1 << 30,
        "KB" | "kB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(UnitError::BadSize { what, input: input.to_string() }),
    };
    let n: u64 = num.parse().map_err(|_| UnitError::Overflow { what, input: input.to_string() })?;
    n.checked_mul(mult).ok_or_else(|| UnitError::Overflow { what, input: input.to_string() })
}

/// Parses a duration such as `250us`, `10ms`, `2s`, `1.5m`, `1h` into nanoseconds.
/// A unit is required: a bare number is ambiguous.
pub fn parse_duration_ns(input: &str, what: &'static str) -> Result<u64, UnitError> {
    let s = input.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let bad = || UnitError::BadDuration { what, input: input.to_string() };
    let value: f64 = num.parse().map_err(|_| bad())?;
    let mult: f64 = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "d" => 86_400e9,
        _ => return Err(bad()),
    };
    let ns = value * mult;
    if !ns.is_finite() || ns > 1e18 {
        return Err(UnitError::Overflow { what, input: input.to_string() });
    }
    Ok(ns.round() as u64)
}

/// A time in nanoseconds in a unit that fits, with 3-4 significant digits:
/// `812ns`, `15.42us`, `44.1ms`, `2.503s`.
pub fn fmt_ns(ns: f64) -> String {
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "us")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    if unit == "ns" {
        format!("{v:.0}{unit}")
    } else if v < 10.0 {
        format!("{v:.3}{unit}")
    } else if v < 100.0 {
        format!("{v:.2}{unit}")
    } else {
        format!("{v:.1}{unit}")
    }
}

/// A byte count in a compact form: `64 B`, `1460 B`, `4 KiB`, `1.5 MiB`.
/// Exact multiples of 1024 are shown in KiB/MiB, anything else in bytes.
pub fn fmt_bytes(n: u64) -> String {
    if n >= 1 << 20 && n % (1 << 20) == 0 {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n % (1 << 10) == 0 {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

/// A size for reading, not for copying: exact binary multiples as
/// [`fmt_bytes`] gives them (`128 KiB`) while under 1024 of their unit,
/// anything else of a KiB or more to one decimal of the largest binary
/// unit (`85.3 KiB`, `23.8 MiB`; `11.5 GiB`, not `12031166 KiB`).
pub fn fmt_size(n: u64) -> String {
    let exact = fmt_bytes(n);
    let small = exact.split(' ').next().and_then(|v| v.parse::<u64>().ok()).is_some_and(|v| v < 1024);
    if n < 1 << 10 || (!exact.ends_with(" B") && small) {
        return exact;
    }
    let (v, unit) = if n >= 1 << 30 {
        (n as f64 / (1u64 << 30) as f64, "GiB")
    } else if n >= 1 << 20 {
        (n as f64 / (1u64 << 20) as f64, "MiB")
    } else {
        (n as f64 / 1024.0, "KiB")
    };
    format!("{v:.1} {unit}")
}

/// `v` with `digits` significant digits (no exponent): 67.1, 6.25, 512, 0.15.
pub fn fmt_sig(v: f64, digits: i32) -> String {
    if !v.is_finite() || v == 0.0 {
        return format!("{v:.0}");
    }
    let mag = v.abs().log10().floor() as i32;
    let mut decimals = (digits - 1 - mag).max(0);
    let round = |d: i32| (v * 10f64.powi(d)).round() / 10f64.powi(d);
    if decimals > 0 && round(decimals).abs() >= 10f64.powi(mag + 1) {
        // Rounding carried into one more integer digit (9.996 -> 10.0).
        decimals -= 1;
    }
    // Round half away from zero first (33.55 -> 33.6, not the 33.5 that
    // formatting the binary 33.5499... would give).
    format!("{:.*}", decimals as usize, round(decimals))
}

/// `v` in the largest of `units` (each 1000 times the previous) that keeps
/// it below 1000, with 3 significant digits.
pub fn fmt_scaled(v: f64, units: &[&str]) -> String {
    let mut v = v;
    let mut i = 0;
    while i + 1 < units.len() && v >= 999.5 {
        v /= 1000.0;
        i += 1;
    }
    format!("{} {}", fmt_sig(v, 3), units[i])
}

/// Bytes with decimal SI units, 3 significant digits: `512 B`, `6.25 MB`, `67.1 MB`
/// (prose, as a verdict says it; tables use [`fmt_bytes`]).
pub fn fmt_bytes_short(n: u64) -> String {
    if n < 1000 {
        return format!("{n} B");
    }
    fmt_scaled(n as f64, &["B", "kB", "MB", "GB", "TB", "PB", "EB"])
}

/// A rate with 3 significant digits: `941 Mbit/s`, `10.0 Gbit/s` (prose, as a
/// verdict says it; tables use [`fmt_bps`], two decimals).
pub fn fmt_bps_short(bps: f64) -> String {
    fmt_scaled(bps, &["bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"])
}

/// A rate in bits per second with decimal SI prefixes, two decimals, for tables: `941.20 Mbit/s`.
pub fn fmt_bps(bps: f64) -> String {
    let (v, unit) = if bps >= 1e9 {
        (bps / 1e9, "Gbit/s")
    } else if bps >= 1e6 {
        (bps / 1e6, "Mbit/s")
    } else if bps >= 1e3 {
        (bps / 1e3, "kbit/s")
    } else {
        (bps, "bit/s")
    };
    format!("{v:.2} {unit}")
}

/// An ISO 8601 duration (as perfSONAR's pScheduler writes them: PnW, PnD, TnH, nM,
/// nS, fractions allowed) in seconds.
pub fn iso_duration_seconds(s: &str) -> Option<f64> {
    let rest = s.strip_prefix('P')?;
    let (date, time) = match rest.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (rest, None),
    };
    let mut total = 0.0;
    let mut take = |part: &str, units: &[(char, f64)]| -> Option<()> {
        let mut num = String::new();
        let mut i = 0;
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                num.push(c);
                continue;
            }
            while i < units.len() && units[i].0 != c {
                i += 1;
            }
            let (_, mult) = units.get(i)?;
            total += num.parse::<f64>().ok()? * mult;
            num.clear();
            i += 1;
        }
        num.is_empty().then_some(())
    };
    take(date, &[('W', 604_800.0), ('D', 86_400.0)])?;
    if let Some(t) = time {
        if t.is_empty() {
            return None;
        }
        take(t, &[('H', 3600.0), ('M', 60.0), ('S', 1.0)])?;
    }
    Some(total)
}

/// Seconds as an ISO 8601 duration: `PT<seconds>S`, never in exponent form.
pub fn iso_duration(seconds: f64) -> String {
    let s = format!("{:.9}", seconds.max(0.0));
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("PT{s}S")
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso_durations_read_and_write() {
        assert_eq!(iso_duration_seconds("PT30S"), Some(30.0));
        assert_eq!(iso_duration_seconds("PT1M30.5S"), Some(90.5));
        assert_eq!(iso_duration_seconds("P1DT2H"), Some(93_600.0));
        assert_eq!(iso_duration_seconds("P1W"), Some(604_800.0));
        for bad in ["30", "PT", "P1H", "PTS", "PT1S2M", "P1X"] {
            assert_eq!(iso_duration_seconds(bad), None, "{bad}");
        }
        assert_eq!(iso_duration(0.000_123_4), "PT0.0001234S");
        assert_eq!(iso_duration(30.0), "PT30S");
        assert_eq!(iso_duration_seconds(&iso_duration(1.5e-7)), Some(1.5e-7));
    }

    #[test]
    fn sizes_for_reading() {
        use super::fmt_size;
        assert_eq!(fmt_size(4096), "4 KiB");
        assert_eq!(fmt_size(12_031_166 * 1024), "11.5 GiB");
        assert_eq!(fmt_size(1 << 40), "1024.0 GiB");
        assert_eq!(fmt_size(33554432), "32 MiB");
        assert_eq!(fmt_size(87380), "85.3 KiB");
        assert_eq!(fmt_size(25_000_000), "23.8 MiB");
        assert_eq!(fmt_size(1000), "1000 B");
        assert_eq!(fmt_size(3 << 30), "3.0 GiB");
    }

    use super::*;

    #[test]
    fn byte_sizes_follow_dd() {
        assert_eq!(parse_bytes("1460", "size"), Ok(1460));
        assert_eq!(parse_bytes("64k", "size"), Ok(65536));
        assert_eq!(parse_bytes("64K", "size"), Ok(65536));
        assert_eq!(parse_bytes("1KiB", "size"), Ok(1024));
        assert_eq!(parse_bytes("1KB", "size"), Ok(1000));
        assert_eq!(parse_bytes("16MiB", "size"), Ok(16 << 20));
        assert_eq!(parse_bytes("2MB", "size"), Ok(2_000_000));
        assert_eq!(parse_bytes("10G", "size"), Ok(10 << 30));
        assert!(matches!(parse_bytes("", "size"), Err(UnitError::BadSize { .. })));
        assert!(matches!(parse_bytes("-1", "size"), Err(UnitError::BadSize { .. })));
        assert!(matches!(parse_bytes("12q", "size"), Err(UnitError::BadSize { .. })));
        assert!(matches!(parse_bytes("1.5k", "size"), Err(UnitError::BadSize { .. })));
        assert!(matches!(parse_bytes("99999999999999999999", "size"), Err(UnitError::Overflow { .. })));
        assert!(matches!(parse_bytes("99999999999G", "size"), Err(UnitError::Overflow { .. })));
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration_ns("250us", "t"), Ok(250_000));
        assert_eq!(parse_duration_ns("10ms", "t"), Ok(10_000_000));
        assert_eq!(parse_duration_ns("1.5s", "t"), Ok(1_500_000_000));
        assert_eq!(parse_duration_ns("2m", "t"), Ok(120_000_000_000));
        assert!(parse_duration_ns("10", "t").is_err());
        assert!(parse_duration_ns("ms", "t").is_err());
        assert!(parse_duration_ns("1e300s", "t").is_err());
    }

    #[test]
    fn formatting_picks_a_unit_that_fits() {
        assert_eq!(fmt_ns(812.0), "812ns");
        assert_eq!(fmt_ns(15_420.0), "15.42us");
        assert_eq!(fmt_ns(1_234.0), "1.234us");
        assert_eq!(fmt_ns(44_100_000.0), "44.10ms");
        assert_eq!(fmt_ns(2_503_000_000.0), "2.503s");
        assert_eq!(fmt_bytes(64), "64 B");
        assert_eq!(fmt_bytes(4096), "4 KiB");
        assert_eq!(fmt_bytes(1460), "1460 B");
        assert_eq!(fmt_bytes(1 << 20), "1 MiB");
        assert_eq!(fmt_bps(941.2e6), "941.20 Mbit/s");
    }
}
