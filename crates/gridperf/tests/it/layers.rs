//! The binary crate's layers (ARCHITECTURE.md): which top-level module may
//! use which. A `crate::X` that points up the graph, or across it, fails
//! here with the file that does it; so do the cycles that agent, engines,
//! lab and tune once had between them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each module and the modules below it that it may use. Anything not
/// listed is a layer violation.
const LAYERS: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("ctl", &[]),
    ("host", &["error"]),
    ("datapath", &["host"]),
    ("agent", &["ctl", "datapath", "error", "host"]),
    ("lab", &["error", "host"]),
    ("runner", &["agent", "ctl", "error", "host", "lab"]),
    ("engines", &["datapath", "error", "host", "lab", "runner"]),
    ("store", &["error", "host"]),
    ("render", &["host", "lab", "store"]),
    ("commands", &["agent", "engines", "error", "host", "lab", "render", "runner", "store"]),
    ("cli", &["agent", "commands", "engines", "error", "host", "lab", "runner", "store"]),
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level modules a source file names with `crate::` (in paths and
/// in `use crate::{a, b::c}` groups).
fn uses(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

#[test]
fn every_module_uses_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let allowed: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    let mut seen = BTreeSet::new();
    for f in files {
        let rel = f.strip_prefix(&src).expect("under src").to_string_lossy().into_owned();
        let module = rel.split(['/', '.']).next().unwrap_or_default().to_string();
        if module == "main" || module == "lib" {
            continue;
        }
        seen.insert(module.clone());
        let Some(may) = allowed.get(module.as_str()) else {
            wrong.push(format!(
                "{rel}: module {module} has no place in the layers (add it to LAYERS and ARCHITECTURE.md)"
            ));
            continue;
        };
        let text = std::fs::read_to_string(&f).expect("read");
        for used in uses(&text) {
            if used != module && !may.contains(&used.as_str()) {
                wrong.push(format!("{rel}: {module} uses crate::{used}, which is not below it"));
            }
        }
    }
    assert!(wrong.is_empty(), "layer violations:\n{}", wrong.join("\n"));
    let listed: BTreeSet<String> = allowed.keys().map(|k| k.to_string()).collect();
    assert_eq!(seen, listed, "LAYERS lists a module that is not there (or the other way round)");
}

#[test]
fn the_layers_have_no_cycle() {
    // a module may use only modules listed before it
    for (k, (module, below)) in LAYERS.iter().enumerate() {
        for b in *below {
            let at = LAYERS.iter().position(|(m, _)| m == b).unwrap_or(usize::MAX);
            assert!(at < k, "{module} uses {b}, which is not listed before it");
        }
    }
}

#[test]
fn the_scanner_sees_paths_and_groups() {
    let text = "use crate::{agent::Faults, host};\nfn f() { crate::lab::state(\"x\"); }\n";
    let found: Vec<String> = uses(text).into_iter().collect();
    assert_eq!(found, ["agent", "host", "lab"]);
}
