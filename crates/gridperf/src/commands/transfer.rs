//! `gridperf transfer`: the first document's Table 1, the time to move a total in messages of each size.

use super::{echo_measure, lab_valid, Output, Place};
use crate::engines::transfer::{self, TransferOptions};
use crate::error::{Error, Result};
use crate::store::StoreChoice;
use gridperf_core::model::Measure;

/// What `gridperf transfer` runs, checked.
#[derive(Debug, Clone)]
pub struct Opts {
    pub place: Place,
    pub transfer: TransferOptions,
    pub store: StoreChoice,
    /// Every warning listed, not summarised.
    pub verbose: bool,
}

pub fn run(o: Opts, out: &mut Output) -> Result<()> {
    let settings = serde_json::to_value(transfer::settings(&o.transfer)).unwrap_or_default();
    let r = echo_measure(
        &o.place,
        Measure::Transfer,
        settings,
        &o.store,
        out,
        |prepared, progress, on_point| {
            let mut opts = o.transfer.clone();
            opts.echo.notes.extend(prepared.notes.iter().cloned());
            transfer::run_with(&prepared.target, &opts, progress, &|_, _| false, on_point)
        },
        |r| &r.env,
    )?;
    out.render(&r)?;
    out.warnings(&r.warnings, r.points.len(), o.verbose);
    lab_valid(&r.env)?;
    if r.points.iter().any(|p| p.time.is_none()) {
        return Err(Error::measurement("some points completed no run"));
    }
    Ok(())
}
