//! `gridperf transfer`: the first document's Table 1. A total (by default
//! 1024 x 1000 bytes) is moved in messages of msg_size, each sent and
//! received back; the whole loop is timed, per size and protocol, over
//! several runs.

use super::echo::{start, EchoOptions, Outcome, Progress};
use crate::error::Result;
use crate::lab::emulator::over_share;
use crate::runner::Target;
use gridperf_core::analysis::stats::{self, Summary, Warning};
use gridperf_core::model::plan::interleave;
use gridperf_core::model::{Settings, StepFigures, TransferPoint, TransferReport, TRANSFER_SCHEMA};

/// The first document's total: 1024 x 1000 bytes.
pub const PAPER_TOTAL: u64 = 1024 * 1000;

#[derive(Debug, Clone)]
pub struct TransferOptions {
    pub echo: EchoOptions,
    /// Bytes to move per run (one way).
    pub total: u64,
    /// Timed runs per point.
    pub repeat: u32,
    /// Untimed runs before them.
    pub warmup_runs: u32,
}

/// Messages per run: the Table 1 loop sends whole messages until at least
/// `total` bytes have gone, so the last one may overshoot.
pub fn messages_per_run(total: u64, size: u64) -> u64 {
    total.div_ceil(size.max(1))
}

pub fn settings(o: &TransferOptions) -> Settings {
    Settings { warmup: o.warmup_runs as u64, total_bytes: Some(o.total), repeat: Some(o.repeat), ..o.echo.settings() }
}

pub fn run(target: &Target, opts: &TransferOptions, progress: &mut dyn FnMut(Progress)) -> Result<TransferReport> {
    run_with(target, opts, progress, &|_, _| false, &mut |_| Ok(()))
}

/// As [`run`], leaving out the points `skip` names and handing each point to
/// `on_point` as soon as it is measured.
pub fn run_with(
    target: &Target,
    opts: &TransferOptions,
    progress: &mut dyn FnMut(Progress),
    skip: &dyn Fn(gridperf_core::model::plan::Proto, u64) -> bool,
    on_point: &mut dyn FnMut(&TransferPoint) -> Result<()>,
) -> Result<TransferReport> {
    let mut r = start(gridperf_core::model::Measure::Transfer, target, &opts.echo)?;
    let points: Vec<_> =
        interleave(&opts.echo.protos, &opts.echo.sizes).into_iter().filter(|p| !skip(p.proto, p.size)).collect();
    let mut out = Vec::with_capacity(points.len());
    let mut warnings = Vec::new();
    // across a lab, each point is judged run by run, while the emulator's
    // late windows can be read: a run the emulator was late across for
    // more than a whole run may be is not the path's (`over_share`).
    // Kept runs stay a fair draw while few are left out (a longer run
    // meets a window more often; past 1 in LEFT_OUT_PER the run is
    // INVALID, and under that the odds differ by a few percent across a
    // point's spread)
    let mut judged = r.opened.lab_watch().is_some().then(crate::lab::RoundTrips::transfer_runs);
    for (i, pt) in points.iter().enumerate() {
        progress(Progress { done: i, total: points.len(), proto: pt.proto, size: pt.size });
        let idx = r.index(pt.proto)?;
        let size = pt.size as usize;
        let messages = messages_per_run(opts.total, pt.size);
        let runs = opts.warmup_runs as u64 + opts.repeat as u64;
        if !out.iter().any(|p: &TransferPoint| p.proto == pt.proto) {
            r.preheat(idx, pt.proto, pt.size, opts.echo.warmup_time)?;
        }
        let by_agent = pt.proto.is_stream();
        // each timed run: its time, its span (CLOCK_MONOTONIC), its losses and its start (Unix ns)
        let mut timed: Vec<(u64, [u64; 2], u64, u64)> = Vec::with_capacity(opts.repeat as usize);
        let mut figures = StepFigures::default();
        let (mut batch, mut warmup) = (runs, opts.warmup_runs as u64);
        let (mut extra, mut in_a_row) = (0u64, 0u64);
        let mut kept: Vec<(u64, [u64; 2], u64, u64)>;
        loop {
            r.step(pt.proto, pt.size, by_agent.then_some(batch * messages))?;
            for run in 0..batch {
                let t0 = gridperf_sys::monotonic_ns();
                let started = crate::host::unix_now_ns();
                let mut run_lost = 0;
                for m in 0..messages {
                    match r.pingers[idx].exchange(size) {
                        Ok(Outcome::Rtt(_)) => in_a_row = 0,
                        Ok(Outcome::Lost) => {
                            run_lost += 1;
                            in_a_row += 1;
                            r.lost_in_a_row(pt.proto, pt.size, in_a_row)?;
                        }
                        Err(e) => return Err(r.fail(pt.proto, pt.size, run * messages + m + 1, e)),
                    }
                }
                let t1 = gridperf_sys::monotonic_ns();
                if run >= warmup {
                    timed.push((t1.saturating_sub(t0), [t0, t1], run_lost, started));
                }
            }
            figures.add(&r.end_step(idx, by_agent)?);
            // across a lab, a run its emulator was late across is not the
            // path's: left out, and measured again while the extra runs
            // last (a repeat's worth at most)
            let spans: Vec<[u64; 2]> = timed.iter().map(|t| t.1).collect();
            let late = match judged.as_ref() {
                None => vec![0; spans.len()],
                Some(_) => match r.opened.lab_watch().and_then(|w| w.late_windows(gridperf_sys::monotonic_ns())) {
                    Some(windows) => crate::lab::emulator::late_within(&spans, &windows),
                    // not known: the run is judged as a whole
                    None => {
                        judged = None;
                        vec![0; spans.len()]
                    }
                },
            };
            kept = timed.iter().zip(&late).filter(|(t, &l)| !over_share(l, t.0)).map(|(t, _)| *t).collect();
            let missing = (opts.repeat as u64).saturating_sub(kept.len() as u64);
            if missing == 0 || extra >= opts.repeat as u64 {
                break;
            }
            batch = missing.min(opts.repeat as u64 - extra);
            extra += batch;
            warmup = 0;
        }
        let left_out = (timed.len() - kept.len()) as u64;
        if let Some(j) = judged.as_mut() {
            j.count_point(&format!("{} {} B", pt.proto, pt.size), timed.len() as u64, left_out);
        }
        let times: Vec<u64> = kept.iter().map(|t| t.0).collect();
        let started: Vec<u64> = kept.iter().map(|t| t.3).collect();
        let lost: u64 = kept.iter().map(|t| t.2).sum();
        let time = Summary::from_samples(&times);
        let bytes_per_run = messages * pt.size;
        let rate_bps = time.as_ref().map(|t| bytes_per_run as f64 * 8.0 / (t.median_ns / 1e9));
        let label = format!("{} {} B", pt.proto, pt.size);
        if let Some(t) = &time {
            // few runs are the norm here: only the spread matters
            warnings.extend(stats::check(&label, t).into_iter().filter(|w| !matches!(w, Warning::FewSamples { .. })));
        }
        if lost > 0 {
            warnings.push(Warning::Lost { point: label, lost, sent: messages * times.len() as u64 });
        }
        out.push(TransferPoint {
            proto: pt.proto,
            size_bytes: pt.size,
            messages,
            bytes_per_run,
            time,
            rate_bps,
            run_times_ns: times,
            run_started_unix_ns: started,
            lost,
            server: Some(figures),
            left_out,
        });
        if let Some(p) = out.last() {
            on_point(p)?;
        }
    }
    let env = r.close_judged(judged, points.len(), progress, &mut warnings)?;
    Ok(TransferReport { schema: TRANSFER_SCHEMA.into(), settings: settings(opts), env, points: out, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_left_out_when_the_emulator_was_late_for_over_1_in_100_of_it() {
        assert!(!over_share(0, 200_000_000));
        assert!(!over_share(2_000_000, 200_000_000));
        assert!(over_share(2_000_001, 200_000_000));
        assert!(over_share(40_000_000, 240_000_000));
    }

    #[test]
    fn table1_message_count() {
        assert_eq!(messages_per_run(PAPER_TOTAL, 1), 1_024_000);
        assert_eq!(messages_per_run(PAPER_TOTAL, 1000), 1024);
        assert_eq!(messages_per_run(PAPER_TOTAL, 1024), 1000);
        // 1 024 000 / 1460 = 701.37: the loop sends 702 messages
        assert_eq!(messages_per_run(PAPER_TOTAL, 1460), 702);
        assert_eq!(messages_per_run(PAPER_TOTAL, 2_000_000), 1);
    }
}
