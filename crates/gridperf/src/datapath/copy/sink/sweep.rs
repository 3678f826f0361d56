//! Stale partial files swept (`serve --partial-ttl`).

use super::*;

/// What a sweep of stale partial files did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Partial files removed (each with its journal).
    pub removed: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Partial files a copy holds now (locked): left alone.
    pub busy: u64,
}

/// Removes, beneath `root`, the partial files (and their journals) of
/// copies that did not finish and that nothing has touched for `ttl`: a
/// resume can no longer be wanted, and what they hold is disk taken. A
/// partial file a copy holds (locked) is left alone; the walk follows no
/// link and looks at no more than `max_entries` entries.
pub fn sweep_stale(root: &OwnedFd, ttl: Duration, max_entries: usize) -> io::Result<Swept> {
    let mut out = Swept::default();
    let mut seen = 0usize;
    let top = gridperf_sys::open_beneath(root, ".", libc::O_DIRECTORY | libc::O_RDONLY | libc::O_NOFOLLOW, 0)?;
    sweep_dir(&top, ttl, &mut out, &mut seen, max_entries, 0)?;
    Ok(out)
}

fn sweep_dir(
    dir: &OwnedFd,
    ttl: Duration,
    out: &mut Swept,
    seen: &mut usize,
    max: usize,
    depth: usize,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    if depth > 64 {
        return Ok(());
    }
    let names: Vec<String> = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let now = std::time::SystemTime::now();
    let old =
        |m: &std::fs::Metadata| m.modified().ok().and_then(|t| now.duration_since(t).ok()).is_some_and(|a| a >= ttl);
    for n in names {
        *seen += 1;
        if *seen > max {
            return Ok(());
        }
        if let Some(stem) = n.strip_suffix(PARTIAL).and_then(|s| s.strip_prefix('.')) {
            let Ok(p) = open_own(dir, &n, false) else { continue };
            let Ok(pm) = p.metadata() else { continue };
            let jname = journal_name(stem);
            let journal_old = match gridperf_sys::open_beneath(dir, &jname, libc::O_PATH | libc::O_NOFOLLOW, 0) {
                Ok(j) => File::from(j).metadata().is_ok_and(|m| old(&m)),
                Err(_) => true,
            };
            if !old(&pm) || !journal_old {
                continue;
            }
            match gridperf_sys::try_lock_exclusive(&p) {
                Ok(true) => {
                    let _ = gridperf_sys::unlink_in(dir, &jname);
                    if gridperf_sys::unlink_in(dir, &n).is_ok() {
                        out.removed += 1;
                        out.bytes += pm.len();
                    }
                }
                _ => out.busy += 1,
            }
            continue;
        }
        if let Ok(sub) = gridperf_sys::open_beneath(dir, &n, libc::O_DIRECTORY | libc::O_RDONLY | libc::O_NOFOLLOW, 0) {
            sweep_dir(&sub, ttl, out, seen, max, depth + 1)?;
        }
    }
    Ok(())
}
