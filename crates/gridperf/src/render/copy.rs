//! A copy's table: a row per file (up to a screenful, then the totals say
//! the rest), the totals, each stream, and the verdict.

use gridperf_core::model::CopyReport;
use gridperf_core::units::{fmt_bps, fmt_bytes, fmt_size};
use std::fmt::Write;

/// Files listed one by one at most; more are summed.
const LISTED: usize = 20;

pub fn table(r: &CopyReport) -> String {
    let mut out = String::new();
    let size: u64 = r.files.iter().map(|f| f.size).sum();
    let streams = match r.streams_auto {
        Some((lo, hi)) => format!("-P auto ({lo} to {hi} streams, {} at first)", r.streams),
        None => format!("{} streams", r.streams),
    };
    let _ = writeln!(
        out,
        "gridperf copy ({}): {} -> {}: {} files, {}, {streams}, blocks of {}",
        r.direction,
        r.source,
        r.destination,
        r.files.len(),
        fmt_size(size),
        fmt_bytes(r.block)
    );
    let _ = writeln!(out, "{:<40} {:>11} {:>11} {:>11} {:>6}  blake3", "file", "size", "moved", "kept", "resent");
    for f in r.files.iter().take(LISTED) {
        let hash = match (&f.blake3, &f.error) {
            (_, Some(e)) => format!("NOT IN PLACE: {e}"),
            (Some(h), None) => h.clone(),
            (None, None) => "-".into(),
        };
        let hash = match (&r.checksum, &f.checksum) {
            (Some(algo), Some(sum)) => format!("{hash}  {algo} {sum}"),
            _ => hash,
        };
        let _ = writeln!(
            out,
            "{:<40} {:>11} {:>11} {:>11} {:>6}  {hash}",
            f.path,
            fmt_size(f.size),
            fmt_size(f.moved),
            fmt_size(f.kept),
            f.resent
        );
    }
    if r.files.len() > LISTED {
        let rest = &r.files[LISTED..];
        let bad = rest.iter().filter(|f| f.error.is_some()).count();
        let _ = writeln!(out, "... and {} more files ({bad} not in place; --json lists them all)", rest.len());
    }
    for (path, why) in &r.skipped {
        let _ = writeln!(out, "skipped {path}: {why}");
    }
    let _ = writeln!(
        out,
        "total: moved {} in {:.2} s: {} · kept {} from before · {} blocks sent again",
        fmt_size(r.bytes_moved),
        r.seconds,
        fmt_bps(r.throughput_bps),
        fmt_size(r.bytes_kept),
        r.blocks_resent
    );
    for (k, p) in r.pairs.iter().enumerate() {
        let rate = if p.seconds > 0.0 { fmt_bps(p.bytes as f64 * 8.0 / p.seconds) } else { "-".into() };
        let lost = p.error.as_deref().map(|e| format!("; LOST: {e}")).unwrap_or_default();
        let share = if r.bytes_moved > 0 { 100.0 * p.bytes as f64 / r.bytes_moved as f64 } else { 0.0 };
        let _ = writeln!(
            out,
            "  pair {k}: {} -> {}: {} ({share:.0}%) in {:.2} s: {rate}{lost}",
            p.source,
            p.destination,
            fmt_size(p.bytes),
            p.seconds
        );
    }
    for s in &r.per_stream {
        let retrans = s.retransmits.map(|n| format!(", {n} retransmits")).unwrap_or_default();
        let rtt = s.rtt_us.map(|u| format!(", RTT {:.2} ms", f64::from(u) / 1000.0)).unwrap_or_default();
        let slot = if s.slot != s.index { format!(" (in stream {}'s place)", s.slot) } else { String::new() };
        let tail =
            if s.tail_blocks > 0 { format!(", {} sent again at the tail", s.tail_blocks) } else { String::new() };
        let ended = s.ended.as_deref().map(|e| format!("; ended early: {e}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "  stream {}{}{slot}: {} in {} blocks{retrans}{rtt}{tail}{ended}",
            s.index,
            s.pair.map(|p| format!(" (pair {p})")).unwrap_or_default(),
            fmt_size(s.bytes),
            s.blocks
        );
    }
    let count = |kind: &str| r.events.iter().filter(|e| e.kind == kind).count();
    let (restarts, added, removed) = (count("restart"), count("add"), count("remove"));
    if !r.events.is_empty() {
        let _ = writeln!(
            out,
            "events: {restarts} restarts, {added} additions and {removed} removals by -P auto, {} broken, {} blocks sent again at the tail",
            count("broken"),
            r.tail_blocks
        );
        for e in &r.events {
            let _ = writeln!(out, "  {:>7.1} s  {}{}: {}", e.t_s, e.kind, e.who(), e.why);
        }
    } else if r.tail_blocks > 0 {
        let _ = writeln!(out, "{} blocks sent again at the tail", r.tail_blocks);
    }
    if let Some(e) = &r.encryption {
        let _ = writeln!(out, "encrypted: {e}");
    }
    let _ = writeln!(out, "{}", r.verdict);
    out
}

impl super::Render for CopyReport {
    fn table(&self) -> String {
        table(self)
    }
}
