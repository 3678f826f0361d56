//! `gridperf transfer`: the first document's Table 1, the time to move a total in messages of each size.

use super::{lab_valid, Format, Output, Place};
use crate::engines::transfer::{self, TransferOptions};
use crate::error::{Error, Result};
use crate::render;
use crate::store::{NewRun, Recorder, StoreChoice};
use gridperf_core::model::Measure;
use gridperf_core::units::fmt_bytes;

/// What `gridperf transfer` runs, checked.
#[derive(Debug, Clone)]
pub struct Opts {
    pub place: Place,
    pub transfer: TransferOptions,
    pub store: StoreChoice,
    pub format: Format,
}

pub fn run(mut o: Opts, out: &mut Output) -> Result<()> {
    let prepared = o.place.prepare("run")?;
    o.transfer.echo.notes.extend(prepared.notes.iter().cloned());
    let (network, target) = (o.place.network.name(), o.place.network.target());
    let mut rec = Recorder::open(
        &o.store,
        &NewRun {
            survey_id: None,
            kind: Measure::Transfer,
            network: &network,
            target: &target,
            settings: serde_json::to_value(transfer::settings(&o.transfer)).unwrap_or_default(),
            lab_profile: o.place.network.lab_profile(),
            mtu: None,
        },
    )?;
    let bar = out.bar();
    let result = transfer::run_with(
        &prepared.target,
        &o.transfer,
        &mut |p| {
            bar.set_length(p.total as u64);
            bar.set_position(p.done as u64);
            bar.set_message(format!("{} {}", p.proto, fmt_bytes(p.size)));
        },
        &|_, _| false,
        &mut |p| rec.point(p),
    );
    bar.finish_and_clear();
    if let Some(where_) = rec.finish(result.as_ref().map(|r| &r.env))? {
        out.note(&format!("gridperf: {where_}"));
    }
    let r = result?;
    match out.format {
        Format::Json => out.json(&r)?,
        Format::Csv => out.print(&render::transfer::csv(&r))?,
        Format::Table => out.print(&render::transfer::table(&r))?,
    }
    out.warnings(&r.warnings);
    lab_valid(&r.env)?;
    if r.points.iter().any(|p| p.time.is_none()) {
        return Err(Error::measurement("some points completed no run"));
    }
    Ok(())
}
