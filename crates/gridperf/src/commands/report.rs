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
    } else if let Some(s) = o.survey {
        in_document_order(store.runs(&RunFilter { survey: Some(s), ..Default::default() })?)
    } else {
        let all = store.runs(&RunFilter::default())?;
        let (rows, said) = choose(&all, store.latest_survey()?);
        if let Some(said) = said {
            out.note(&said);
        }
        match rows {
            Chosen::Survey(s) => in_document_order(store.runs(&RunFilter { survey: Some(s), ..Default::default() })?),
            Chosen::Latest(rows) => rows,
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

/// A survey's runs with the lab's profiles in their order (loopback,
/// crossover-fe, lan-gige, man, wan, ...), other networks after them, each network's
/// runs in the order stored: a network measured beside the others begins
/// first, and its runs have the first ids.
pub fn in_document_order(mut runs: Vec<crate::store::RunRow>) -> Vec<crate::store::RunRow> {
    // the store lists runs newest first, and `load` draws them oldest
    // first: the profiles' order reversed here comes out right there
    let order: Vec<String> = gridperf_core::lab::cfg::profiles().into_iter().map(|p| p.name.to_string()).collect();
    runs.sort_by_key(|r| std::cmp::Reverse(order.iter().position(|p| *p == r.network).unwrap_or(order.len())));
    runs
}

/// Ad-hoc runs drawn when nothing is named and the store holds no survey.
pub const LATEST_DRAWN: usize = 12;

/// What a report with nothing named draws.
#[derive(Debug, PartialEq)]
enum Chosen {
    /// The latest survey's runs.
    Survey(i64),
    /// The latest runs (newest first), when there is no survey.
    Latest(Vec<RunRow>),
}

/// With nothing named: the latest survey, saying which runs measured after
/// it are left out; with no survey, the latest ad-hoc runs, saying so.
/// `all` is newest first.
fn choose(all: &[RunRow], latest_survey: Option<i64>) -> (Chosen, Option<String>) {
    let ids = |rows: &[&RunRow]| {
        let mut v: Vec<i64> = rows.iter().map(|r| r.id).collect();
        v.sort_unstable();
        v.iter().map(i64::to_string).collect::<Vec<_>>().join(" ")
    };
    match latest_survey {
        Some(s) => {
            let survey_started =
                all.iter().filter(|r| r.survey_id == Some(s)).map(|r| r.started).fold(f64::INFINITY, f64::min);
            let after: Vec<&RunRow> =
                all.iter().filter(|r| r.survey_id.is_none() && r.started > survey_started).take(LATEST_DRAWN).collect();
            let said = (!after.is_empty()).then(|| {
                format!(
                    "gridperf report: drawing survey {s}; {} run(s) measured after it are not drawn: gridperf report {} \
                     draws them",
                    after.len(),
                    ids(&after)
                )
            });
            (Chosen::Survey(s), said)
        }
        None => {
            let latest: Vec<RunRow> = all.iter().take(LATEST_DRAWN).cloned().collect();
            let said = (!latest.is_empty()).then(|| {
                format!(
                    "gridperf report: no survey in the store: drawing the latest {} run(s), {} (name runs to choose: \
                     gridperf report ID...)",
                    latest.len(),
                    ids(&latest.iter().collect::<Vec<_>>())
                )
            });
            (Chosen::Latest(latest), said)
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, survey: Option<i64>, started: f64) -> RunRow {
        RunRow {
            id,
            survey_id: survey,
            sweep_id: None,
            kind: "rtt".into(),
            network: "loopback".into(),
            target: "local".into(),
            command_line: String::new(),
            version: String::new(),
            started,
            finished: None,
            settings: serde_json::Value::Null,
            env: None,
            lab_profile: None,
            mtu: None,
            invalid: None,
            status: "done".into(),
            points: 0,
        }
    }

    /// Regression (issue 32): with 17 ad-hoc runs and no survey, `report`
    /// said "nothing to draw: no runs".
    #[test]
    fn with_no_survey_the_latest_runs_are_drawn_and_it_says_so() {
        let all: Vec<RunRow> = (1..=17).rev().map(|id| row(id, None, id as f64)).collect();
        let (chosen, said) = choose(&all, None);
        let Chosen::Latest(rows) = chosen else { panic!("the latest runs") };
        assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), (6..=17).rev().collect::<Vec<_>>());
        let said = said.expect("said");
        assert!(said.contains("no survey") && said.contains("latest 12") && said.contains("6 7 8"), "{said}");
        let (chosen, said) = choose(&[], None);
        assert_eq!((chosen, said), (Chosen::Latest(Vec::new()), None));
    }

    #[test]
    fn a_survey_is_drawn_and_runs_after_it_are_named() {
        let all = vec![row(9, None, 90.0), row(8, Some(2), 80.0), row(7, Some(2), 70.0), row(3, None, 30.0)];
        let (chosen, said) = choose(&all, Some(2));
        assert_eq!(chosen, Chosen::Survey(2));
        let said = said.expect("said");
        assert!(said.contains("1 run(s) measured after it") && said.contains("gridperf report 9 "), "{said}");
        let (_, said) = choose(&all[1..], Some(2));
        assert_eq!(said, None, "nothing after it: nothing to say");
    }
}
