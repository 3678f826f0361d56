//! `gridperf rtt`: round-trip time per protocol and message size.

use super::{lab_valid, Format, Output, Place};
use crate::engines::rtt::{self, RttOptions};
use crate::error::{Error, Result};
use crate::render;
use crate::store::{NewRun, Recorder, StoreChoice};
use gridperf_core::model::Measure;
use gridperf_core::units::fmt_bytes;

/// What `gridperf rtt` runs, checked.
#[derive(Debug, Clone)]
pub struct Opts {
    pub place: Place,
    pub rtt: RttOptions,
    pub store: StoreChoice,
    pub format: Format,
}

pub fn run(mut o: Opts, out: &mut Output) -> Result<()> {
    let prepared = o.place.prepare("run")?;
    o.rtt.echo.notes.extend(prepared.notes.iter().cloned());
    let (network, target) = (o.place.network.name(), o.place.network.target());
    let mut rec = Recorder::open(
        &o.store,
        &NewRun {
            survey_id: None,
            kind: Measure::Rtt,
            network: &network,
            target: &target,
            settings: serde_json::to_value(rtt::settings(&o.rtt)).unwrap_or_default(),
            lab_profile: o.place.network.lab_profile(),
            mtu: None,
        },
    )?;
    let bar = out.bar();
    let result = rtt::run_with(
        &prepared.target,
        &o.rtt,
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
        Format::Csv => out.print(&render::rtt::csv(&r, o.rtt.keep_samples))?,
        Format::Table => out.print(&render::rtt::table(&r))?,
    }
    out.warnings(&r.warnings);
    lab_valid(&r.env)?;
    if r.points.iter().any(|p| p.summary.is_none()) {
        return Err(Error::measurement("some points have no sample: every message was lost"));
    }
    Ok(())
}
