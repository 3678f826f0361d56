//! `gridperf report`: stored runs drawn into one self-contained HTML file
//! (and, if asked, every plot as an SVG file).

use super::Output;
use crate::error::{Error, Result};
use crate::render;
use crate::store::{PointRow, RunFilter, RunRow, Store};
use std::path::PathBuf;

/// What `gridperf report` draws, checked.
#[derive(Debug, Clone)]
pub struct Opts {
    pub db: PathBuf,
    /// These runs; none: the survey's, or the latest survey's.
    pub runs: Vec<i64>,
    pub survey: Option<i64>,
    /// This sweep's figures (stream --sweep).
    pub sweep: Option<i64>,
    /// The pScheduler results the archive holds (its pscheduler_results table).
    pub pscheduler: bool,
    pub output: PathBuf,
    pub svg_dir: Option<PathBuf>,
}

/// Runs with their points, oldest first: the report follows the order they were measured in.
pub fn load(store: &Store, runs: &[RunRow]) -> Result<Vec<(RunRow, Vec<PointRow>)>> {
    let mut out = Vec::new();
    for r in runs.iter().rev() {
        out.push((r.clone(), store.points(r.id)?));
    }
    Ok(out)
}

pub fn run(o: Opts, out: &mut Output) -> Result<()> {
    let store = Store::open_existing(&o.db)?;
    if o.pscheduler {
        let rows: Vec<_> = store
            .pscheduler_results(None)?
            .iter()
            .map(|(id, received, doc)| render::pscheduler::read(*id, *received, doc))
            .collect();
        if rows.is_empty() {
            return Err(Error::usage(format!(
                "nothing to draw: {} holds no pScheduler results (point pScheduler's postgresql archiver at its \
                 pscheduler_results table, column document)",
                store.shown()
            )));
        }
        let (html, svgs) = render::pscheduler::html(&rows, &store.shown());
        write(&o, &html, &svgs)?;
        out.note(&format!(
            "gridperf report: {} pScheduler results, {} plots -> {}",
            rows.len(),
            svgs.len(),
            o.output.display()
        ));
        return Ok(());
    }
    // a sweep asked for, or (nothing asked for) the latest sweep when it is newer than the latest survey
    let sweep = match (o.sweep, o.runs.is_empty() && o.survey.is_none()) {
        (Some(id), _) => Some(id),
        (None, true) => match (store.latest_sweep()?, store.latest_survey_started()?) {
            (Some((id, swept)), survey) if survey.is_none_or(|s| swept > s) => Some(id),
            _ => None,
        },
        (None, false) => None,
    };
    if let Some(id) = sweep {
        let row = store.sweep(id)?;
        let (html, svgs) = render::sweep::html(&row);
        write(&o, &html, &svgs)?;
        out.note(&format!(
            "gridperf report: sweep {id}, {} points, {} plots -> {}",
            row.points.len(),
            svgs.len(),
            o.output.display()
        ));
        return Ok(());
    }
    let rows: Vec<RunRow> = if !o.runs.is_empty() {
        o.runs.iter().rev().map(|&id| store.run(id)).collect::<Result<_>>()?
    } else {
        let survey = match o.survey {
            Some(s) => Some(s),
            None => store.latest_survey()?,
        };
        match survey {
            Some(s) => store.runs(&RunFilter { survey: Some(s), ..Default::default() })?,
            None => Vec::new(),
        }
    };
    if rows.is_empty() {
        return Err(Error::usage(format!(
            "nothing to draw: no runs{} in {} (gridperf runs list shows what is there)",
            o.survey.map(|s| format!(" in survey {s}")).unwrap_or_default(),
            store.shown()
        )));
    }
    let runs = load(&store, &rows)?;
    let (html, svgs) = render::html::render(&runs);
    write(&o, &html, &svgs)?;
    out.note(&format!("gridperf report: {} runs, {} plots -> {}", runs.len(), svgs.len(), o.output.display()));
    // the conclusions the report draws, on the terminal as the survey printed them
    let analysis = render::survey::analyse(&runs);
    if !analysis.is_empty() {
        out.print(&format!(
            "{}\n{}",
            render::survey::best_table_text(&analysis),
            render::survey::thresholds_text(&analysis)
        ))?;
    }
    Ok(())
}

/// Writes the report, and every plot as an SVG file with --svg-dir.
fn write(o: &Opts, html: &str, svgs: &[(String, String)]) -> Result<()> {
    std::fs::write(&o.output, html).map_err(|e| Error::usage(format!("-o {}: {e}", o.output.display())))?;
    crate::host::give_back(&o.output);
    if let Some(dir) = &o.svg_dir {
        std::fs::create_dir_all(dir).map_err(|e| Error::usage(format!("--svg-dir {}: {e}", dir.display())))?;
        for (name, svg) in svgs {
            std::fs::write(dir.join(name), svg)
                .map_err(|e| Error::usage(format!("--svg-dir {}: {e}", dir.display())))?;
        }
    }
    Ok(())
}
