//! `gridperf runs`: the stored runs listed, shown, compared, exported, deleted.

use super::{Format, Output};
use crate::error::Result;
use crate::render;
use crate::store::{RunFilter, Store};
use gridperf_core::model::{RUNS_SCHEMA, RUN_SCHEMA};
use serde_json::json;
use std::path::PathBuf;

/// What `gridperf runs` does, checked.
#[derive(Debug, Clone)]
pub enum Opts {
    List { db: PathBuf, filter: RunFilter },
    Show { db: PathBuf, id: i64 },
    Compare { db: PathBuf, a: i64, b: i64 },
    Export { db: PathBuf, id: i64 },
    Delete { db: PathBuf, id: i64 },
}

pub fn run(o: Opts, out: &mut Output) -> Result<()> {
    match o {
        Opts::List { db, filter } => {
            // no store yet is no run yet: an empty list, not an error
            let runs = if Store::exists(&db) { Store::open_existing(&db)?.runs(&filter)? } else { Vec::new() };
            if !Store::exists(&db) {
                out.note(&format!("gridperf runs: no runs stored yet ({} does not exist)", db.display()));
            }
            // each run's points, for its headline figure
            let store = if Store::exists(&db) { Some(Store::open_existing(&db)?) } else { None };
            let mut with_points = Vec::with_capacity(runs.len());
            for r in runs {
                let points = match &store {
                    Some(s) => s.points(r.id)?,
                    None => Vec::new(),
                };
                with_points.push((r, points));
            }
            let runs: Vec<serde_json::Value> = with_points
                .iter()
                .map(|(r, p)| {
                    let mut v = serde_json::to_value(r).unwrap_or_default();
                    v["headline"] = json!(render::runs::headline(r, p));
                    v
                })
                .collect();
            let doc = json!({ "schema": RUNS_SCHEMA, "runs": runs });
            let shown = render::Shown::new(&doc, || render::runs::list(&with_points));
            out.render(&shown)
        }
        Opts::Show { db, id } => {
            let store = Store::open_existing(&db)?;
            let (run, points) = (store.run(id)?, store.points(id)?);
            let doc = json!({ "schema": RUN_SCHEMA, "run": run, "points": points });
            let shown = render::Shown::new(&doc, || render::runs::show(&run, &points));
            out.render(&shown)
        }
        Opts::Compare { db, a, b } => {
            let store = Store::open_existing(&db)?;
            let (ra, rb) = (store.run(a)?, store.run(b)?);
            out.print(&render::runs::compare(&ra, &store.points(a)?, &rb, &store.points(b)?))
        }
        Opts::Export { db, id } => {
            let store = Store::open_existing(&db)?;
            let (run, points) = (store.run(id)?, store.points(id)?);
            match out.format {
                Format::Csv => out.print(&render::runs::csv(&run, &points)),
                _ => out.json(&json!({ "schema": RUN_SCHEMA, "run": run, "points": points })),
            }
        }
        Opts::Delete { db, id } => {
            Store::open_existing(&db)?.delete(id)?;
            out.note(&format!("gridperf runs: run {id} deleted"));
            Ok(())
        }
    }
}
