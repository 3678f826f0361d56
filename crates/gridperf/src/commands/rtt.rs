//! `gridperf rtt`: round-trip time per protocol and message size.

use super::{echo_measure, lab_valid, Output, Place};
use crate::engines::rtt::{self, RttOptions};
use crate::error::{Error, Result};
use crate::store::StoreChoice;
use gridperf_core::model::Measure;

/// What `gridperf rtt` runs, checked.
#[derive(Debug, Clone)]
pub struct Opts {
    pub place: Place,
    pub rtt: RttOptions,
    pub store: StoreChoice,
    /// Every warning listed, not summarised.
    pub verbose: bool,
}

pub fn run(o: Opts, out: &mut Output) -> Result<()> {
    let settings = serde_json::to_value(rtt::settings(&o.rtt)).unwrap_or_default();
    let r = echo_measure(
        &o.place,
        Measure::Rtt,
        settings,
        &o.store,
        out,
        |prepared, progress, on_point| {
            let mut opts = o.rtt.clone();
            opts.echo.notes.extend(prepared.notes.iter().cloned());
            rtt::run_with(&prepared.target, &opts, progress, &|_, _| false, on_point)
        },
        |r| &r.env,
    )?;
    out.render(&r)?;
    out.warnings(&r.warnings, r.points.len(), o.verbose);
    lab_valid(&r.env)?;
    if r.points.iter().any(|p| p.summary.is_none()) {
        return Err(Error::measurement("some points have no sample: every message was lost"));
    }
    Ok(())
}
