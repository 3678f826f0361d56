//! The writing end's files: the partial file, its journal, the resume, the finish.

use super::*;
use gridperf_core::copy::{block_count, block_cv, block_len, file_hash, hex, unhex32};
use gridperf_core::wire::{CopyFile, CopyNeed};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A file being written at the receiving end: its directory, its final
/// name, the partial file beside it, and what is verified of it.
pub struct SinkFile {
    pub dir: OwnedFd,
    pub name: String,
    pub info: CopyFile,
    pub block: u64,
    partial: Option<File>,
    journal: Mutex<Option<File>>,
    state: Mutex<SinkState>,
    /// The checksum asked for, the next offset's block it takes, a buffer
    /// for blocks read back (they arrived ahead of the ones before them).
    summer: Mutex<Option<(gridperf_core::copy::Summer, u64, Vec<u8>)>>,
    /// A third-party copy's second destination: writes into the first's
    /// partial file, never renames it.
    joined: bool,
    /// A third-party copy's first destination with others joined: blocks
    /// they verified are taken from the shared journal at the finish:
    /// its records from this offset on (written in this run; the ones
    /// before were hashed again, or did not hold).
    adopt: bool,
    adopt_from: u64,
}

#[derive(Default)]
struct SinkState {
    cvs: Vec<Option<[u8; 32]>>,
    single: Option<gridperf_core::copy::Hash>,
    moved: u64,
    resent: u64,
    kept: u64,
    error: Option<String>,
}

/// How a destination is prepared.
#[derive(Debug, Clone, Copy, Default)]
pub struct SinkRules {
    /// A checksum to compute as the blocks arrive, in order.
    pub checksum: Option<gridperf_core::copy::Checksum>,
    /// Replace a finished destination.
    pub force: bool,
    /// Keep a finished destination of the source's size and time (a resumed
    /// directory copy).
    pub resume: bool,
    /// Write into the partial files another destination agent prepared on
    /// shared storage (a third-party copy's second destination).
    pub join: bool,
    /// Take the blocks other destination agents verified from the shared
    /// journal at the finish (a third-party copy's first destination).
    pub adopt: bool,
}

/// Flips one byte of the n-th block a writing end receives (counted from 1,
/// across its streams): a test seam for damage in flight.
pub static FLIP_BLOCK: AtomicU64 = AtomicU64::new(0);
pub(super) static RECEIVED: AtomicU64 = AtomicU64::new(0);

impl SinkFile {
    /// Prepares `name` in `dir` for `info`: what a partial file already
    /// holds is hashed again against its journal (kept if it matches this
    /// source), a finished destination is refused (unless `force`, or kept
    /// with `resume` when its size and time are the source's), and a new
    /// partial file takes its whole size at once (a full disk is said now).
    /// Returns the file and the blocks it needs.
    pub fn prepare(
        dir: OwnedFd,
        name: &str,
        info: CopyFile,
        block: u64,
        rules: SinkRules,
    ) -> Result<(SinkFile, CopyNeed), String> {
        let partial_name = format!(".{name}{PARTIAL}");
        let journal_name = format!(".{name}{JOURNAL}");
        if info.size > MAX_FILE {
            return Err(format!("{name}: {} bytes: a copy takes files of up to 1 PiB", info.size));
        }
        let n = block_count(info.size, block) as usize;
        let mut file = SinkFile {
            dir,
            name: name.to_string(),
            info: info.clone(),
            block,
            partial: None,
            journal: Mutex::new(None),
            summer: Mutex::new(rules.checksum.map(|c| (c.summer(), 0, Vec::new()))),
            // the blocks' values are kept once the file's space is known to be there
            state: Mutex::new(SinkState::default()),
            joined: rules.join,
            adopt: rules.adopt,
            adopt_from: 0,
        };
        if rules.join {
            return file.join(&partial_name, &journal_name, n);
        }
        let none = |kept| CopyNeed { file: 0, ranges: Vec::new(), kept, refused: None };
        // a finished destination
        if let Ok(existing) = gridperf_sys::open_beneath(&file.dir, name, libc::O_PATH | libc::O_NOFOLLOW, 0) {
            let m = File::from(existing).metadata().map_err(|e| format!("{name}: {e}"))?;
            if !m.file_type().is_file() {
                return Err(format!("{name} exists and is not a regular file: not replaced"));
            }
            if rules.resume && !rules.force && m.len() == info.size && mtime_ns(&m) == info.mtime_ns {
                lock(&file.state).kept = info.size;
                return Ok((
                    file,
                    CopyNeed {
                        refused: Some("finished by an earlier run (its size and time are the source's)".into()),
                        ..none(info.size)
                    },
                ));
            }
            if !rules.force {
                return Err(format!(
                    "{name} exists: give --force to replace it (or --resume to keep what an earlier run finished)"
                ));
            }
        }
        let rw = libc::O_RDWR | libc::O_NOFOLLOW;
        let mut kept_blocks: Vec<usize> = Vec::new();
        let partial = match gridperf_sys::open_beneath(&file.dir, &partial_name, rw, 0) {
            Ok(fd) => {
                let p = File::from(fd);
                // a partial file of this size was reserved before: its blocks fit
                if p.metadata().is_ok_and(|m| m.len() == info.size) {
                    lock(&file.state).cvs = vec![None; n];
                    kept_blocks = file.rehash(&p, &journal_name)?;
                }
                p
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let fd = gridperf_sys::open_beneath(&file.dir, &partial_name, rw | libc::O_CREAT | libc::O_EXCL, 0o600)
                    .map_err(|e| format!("creating {partial_name}: {e}"))?;
                File::from(fd)
            }
            Err(e) => return Err(format!("{partial_name}: {e}")),
        };
        if kept_blocks.is_empty() {
            partial.set_len(0).map_err(|e| format!("{partial_name}: {e}"))?;
            gridperf_sys::preallocate(&partial, info.size).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOSPC) => format!("{name}: the destination's disk has no room for its {} bytes", info.size),
                _ => format!("{name}: reserving {} bytes: {e}", info.size),
            })?;
            lock(&file.state).cvs = vec![None; n];
            // a new journal: the source it belongs to, then a record per verified block
            // appended to (other destination agents may write records into it too)
            let flags = rw | libc::O_CREAT | libc::O_TRUNC | libc::O_APPEND;
            let j = gridperf_sys::open_beneath(&file.dir, &journal_name, flags, 0o600)
                .map_err(|e| format!("{journal_name}: {e}"))?;
            let mut j = File::from(j);
            let head =
                serde_json::json!({ "version": 1, "size": info.size, "mtime_ns": info.mtime_ns, "block": block });
            writeln!(j, "{head}").map_err(|e| format!("{journal_name}: {e}"))?;
            *lock(&file.journal) = Some(j);
        }
        file.partial = Some(partial);
        file.adopt_from = lock(&file.journal).as_ref().and_then(|j| j.metadata().ok()).map_or(u64::MAX, |m| m.len());
        let need: Vec<u64> = {
            let s = lock(&file.state);
            (0..n as u64).filter(|&i| s.cvs[i as usize].is_none()).collect()
        };
        let kept = lock(&file.state).kept;
        Ok((file, CopyNeed { ranges: gridperf_core::copy::ranges(need), ..none(kept) }))
    }

    /// A second destination's side of a file: the partial file and journal
    /// the first destination prepared, opened where this agent sees them
    /// (refused when they are not there: not the same storage). It needs
    /// nothing of its own: the client's leases say what comes here.
    fn join(mut self, partial_name: &str, journal_name: &str, n: usize) -> Result<(SinkFile, CopyNeed), String> {
        let name = self.name.clone();
        let not_shared = |what: &str| {
            format!(
                "{name}: {what}: this destination does not share the first one's storage (give \
                 --same-destination, or destinations on one shared filesystem)"
            )
        };
        let rw = libc::O_RDWR | libc::O_NOFOLLOW;
        let partial = gridperf_sys::open_beneath(&self.dir, partial_name, rw, 0)
            .map(File::from)
            .map_err(|e| not_shared(&format!("the first destination's {partial_name}: {e}")))?;
        if !partial.metadata().is_ok_and(|m| m.len() == self.info.size) {
            return Err(not_shared(&format!("{partial_name} is not of the source's size")));
        }
        let mut j = gridperf_sys::open_beneath(&self.dir, journal_name, rw | libc::O_APPEND, 0)
            .map(File::from)
            .map_err(|e| not_shared(&format!("the first destination's {journal_name}: {e}")))?;
        let mut head = String::new();
        io::BufRead::read_line(&mut io::BufReader::new(&mut j), &mut head)
            .map_err(|e| format!("{journal_name}: {e}"))?;
        let head: serde_json::Value = serde_json::from_str(&head).unwrap_or_default();
        if head["size"] != self.info.size || head["mtime_ns"] != self.info.mtime_ns || head["block"] != self.block {
            return Err(not_shared(&format!("{journal_name} belongs to another copy")));
        }
        self.partial = Some(partial);
        *lock(&self.journal) = Some(j);
        lock(&self.state).cvs = vec![None; n];
        Ok((self, CopyNeed { file: 0, ranges: Vec::new(), kept: 0, refused: None }))
    }

    /// Takes from the journal the blocks other destination agents verified
    /// and recorded there (a third-party copy on shared storage).
    fn adopt_joined(&self) -> io::Result<()> {
        let journal_name = format!(".{}{JOURNAL}", self.name);
        let fd = gridperf_sys::open_beneath(&self.dir, &journal_name, libc::O_RDONLY | libc::O_NOFOLLOW, 0)?;
        let mut all = Vec::new();
        File::from(fd).read_to_end(&mut all)?;
        let from = (self.adopt_from as usize).min(all.len());
        let mut s = lock(&self.state);
        for rec in all[from..].chunks_exact(40) {
            let idx = u64::from_be_bytes(rec[..8].try_into().expect("8 bytes")) as usize;
            let Some(cv) = unhex32(&hex(&rec[8..40])) else { continue };
            if let Some(slot @ None) = s.cvs.get_mut(idx) {
                *slot = Some(cv);
            }
        }
        Ok(())
    }

    /// Hashes again each block the journal says arrived verified; returns
    /// the ones that still hold (none, and the journal restarted, when it
    /// belongs to another source).
    fn rehash(&mut self, partial: &File, journal_name: &str) -> Result<Vec<usize>, String> {
        let rw = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_APPEND;
        let Ok(fd) = gridperf_sys::open_beneath(&self.dir, journal_name, rw, 0) else { return Ok(Vec::new()) };
        let mut j = File::from(fd);
        let mut all = Vec::new();
        j.read_to_end(&mut all).map_err(|e| format!("{journal_name}: {e}"))?;
        let Some(nl) = all.iter().position(|&b| b == b'\n') else { return Ok(Vec::new()) };
        let head: serde_json::Value = serde_json::from_slice(&all[..nl]).unwrap_or_default();
        let same = head["version"] == 1
            && head["size"] == self.info.size
            && head["mtime_ns"] == self.info.mtime_ns
            && head["block"] == self.block;
        if !same {
            return Ok(Vec::new());
        }
        let mut kept = Vec::new();
        let mut buf = vec![0u8; self.block as usize];
        let n = block_count(self.info.size, self.block);
        for rec in all[nl + 1..].chunks_exact(40) {
            let idx = u64::from_be_bytes(rec[..8].try_into().expect("8 bytes"));
            let Some(want) = unhex32(&hex(&rec[8..40])) else { continue };
            if idx >= n {
                continue;
            }
            let len = block_len(self.info.size, self.block, idx) as usize;
            if partial.read_exact_at(&mut buf[..len], idx * self.block).is_err() {
                continue;
            }
            if block_cv(&buf[..len], idx * self.block) == want {
                let mut s = lock(&self.state);
                if s.cvs[idx as usize].is_none() {
                    s.cvs[idx as usize] = Some(want);
                    s.kept += len as u64;
                    if n == 1 {
                        s.single = Some(gridperf_core::copy::whole_hash(&buf[..len]));
                    }
                    kept.push(idx as usize);
                }
            }
        }
        *lock(&self.journal) = Some(j);
        Ok(kept)
    }

    /// Writes a verified block and records it in the journal.
    pub(super) fn put(&self, idx: u64, data: &[u8], cv: [u8; 32]) -> io::Result<u64> {
        let partial = self.partial.as_ref().ok_or_else(|| io::Error::other("no partial file"))?;
        let t = Instant::now();
        partial.write_all_at(data, idx * self.block)?;
        let mut rec = [0u8; 40];
        rec[..8].copy_from_slice(&idx.to_be_bytes());
        rec[8..].copy_from_slice(&cv);
        if let Some(j) = lock(&self.journal).as_mut() {
            j.write_all(&rec)?;
        }
        let spent = t.elapsed().as_nanos() as u64;
        {
            let mut s = lock(&self.state);
            if s.cvs[idx as usize].is_none() {
                s.moved += data.len() as u64;
            }
            s.cvs[idx as usize] = Some(cv);
            if block_count(self.info.size, self.block) == 1 {
                s.single = Some(gridperf_core::copy::whole_hash(data));
            }
        }
        self.feed(Some((idx, data)))?;
        Ok(spent)
    }

    /// Takes the checksum as far as the verified blocks reach in order:
    /// `just` (a block in hand) if it is the next, then any after it that
    /// arrived ahead, read back from the partial file (the page cache, as
    /// a rule; a resumed file's kept blocks, from the disk).
    fn feed(&self, just: Option<(u64, &[u8])>) -> io::Result<()> {
        let mut g = lock(&self.summer);
        let Some((sum, cursor, buf)) = g.as_mut() else { return Ok(()) };
        let n = block_count(self.info.size, self.block);
        if let Some((idx, data)) = just {
            if idx == *cursor {
                sum.update(data);
                *cursor += 1;
            }
        }
        let partial = self.partial.as_ref().ok_or_else(|| io::Error::other("no partial file"))?;
        while *cursor < n && lock(&self.state).cvs.get(*cursor as usize).is_some_and(Option::is_some) {
            let len = block_len(self.info.size, self.block, *cursor) as usize;
            buf.resize(len, 0);
            partial.read_exact_at(&mut buf[..len], *cursor * self.block)?;
            sum.update(&buf[..len]);
            *cursor += 1;
        }
        Ok(())
    }

    /// Notes why the file cannot be finished (the first reason stays).
    pub(super) fn fail(&self, why: String) {
        lock(&self.state).error.get_or_insert(why);
    }

    /// Counts a block that arrived damaged (it is sent again).
    pub(super) fn damaged(&self) {
        lock(&self.state).resent += 1;
    }

    /// Whether every block is verified.
    pub fn complete(&self) -> bool {
        lock(&self.state).cvs.iter().all(Option::is_some)
    }

    /// Moves the file into place once every block is verified (and the
    /// source did not change): its data made durable, its time set to the
    /// source's, the partial renamed over the final name, the journal
    /// removed. Returns the outcome either way (a file not finished stays
    /// partial, with its journal, for a resume).
    pub fn finish(&self, file: u32, source_changed: bool) -> gridperf_core::wire::CopyOutcome {
        let mut out = {
            let s = lock(&self.state);
            gridperf_core::wire::CopyOutcome {
                file,
                blake3: None,
                moved: s.moved,
                resent: s.resent,
                kept: s.kept,
                error: s.error.clone(),
                checksum: None,
            }
        };
        let Some(partial) = &self.partial else {
            // kept from an earlier run, or refused
            return out;
        };
        if self.joined {
            // the first destination renames: what this one wrote is made durable first
            if let Err(e) = partial.sync_data() {
                out.error = Some(format!("{}: {e}", self.name));
            }
            return out;
        }
        if self.adopt && !self.complete() {
            if let Err(e) = self.adopt_joined() {
                out.error.get_or_insert(format!("reading the journal others wrote: {e}; kept partial"));
            }
        }
        if out.error.is_none() && source_changed {
            out.error =
                Some("the source changed during the copy (its size or time): not renamed; copy it again".into());
        }
        if out.error.is_none() && !self.complete() {
            out.error = Some("not every block arrived: kept partial for --resume".into());
        }
        if out.error.is_some() {
            return out;
        }
        let hash = {
            let s = lock(&self.state);
            let cvs: Vec<[u8; 32]> = s.cvs.iter().flatten().copied().collect();
            file_hash(&cvs, self.info.size, self.block, s.single)
        };
        // the checksum's rest (a resumed file's kept blocks), then its value, before the rename
        let summed = match self.feed(None) {
            Ok(()) => lock(&self.summer).take().map(|(s, _, _)| s.hex()),
            Err(e) => {
                out.error = Some(format!("reading {} back for its checksum: {e}; kept partial", self.name));
                return out;
            }
        };
        let done = (|| -> io::Result<()> {
            use std::os::unix::fs::PermissionsExt;
            partial.sync_all()?;
            let when = std::time::UNIX_EPOCH + Duration::from_nanos(self.info.mtime_ns.max(0) as u64);
            partial.set_times(std::fs::FileTimes::new().set_modified(when).set_accessed(when))?;
            partial.set_permissions(std::fs::Permissions::from_mode(0o644))?;
            gridperf_sys::rename_in(&self.dir, &format!(".{}{PARTIAL}", self.name), &self.name)?;
            gridperf_sys::unlink_in(&self.dir, &format!(".{}{JOURNAL}", self.name))?;
            File::from(self.dir.try_clone()?).sync_all()
        })();
        match done {
            Ok(()) => {
                out.blake3 = hash.map(|h| h.to_hex().to_string());
                out.checksum = summed;
            }
            Err(e) => out.error = Some(format!("moving {} into place: {e}", self.name)),
        }
        out
    }
}

/// Prepares every file of a copy at the writing end, beneath `root`:
/// the files, and what each needs (a file refused says why; the rest go on).
pub fn prepare_all(
    root: &impl AsRawFd,
    list: &[CopyFile],
    block: u64,
    rules: SinkRules,
) -> (Vec<Option<SinkFile>>, Vec<CopyNeed>) {
    let mut files = Vec::with_capacity(list.len());
    let mut needs = Vec::with_capacity(list.len());
    for (k, f) in list.iter().enumerate() {
        let prepared = dir_beneath(root, &f.path, true)
            .map_err(|e| format!("{}: {e}", f.path))
            .and_then(|(dir, name)| SinkFile::prepare(dir, &name, f.clone(), block, rules));
        match prepared {
            Ok((sf, need)) => {
                files.push(Some(sf));
                needs.push(CopyNeed { file: k as u32, ..need });
            }
            Err(why) => {
                files.push(None);
                needs.push(CopyNeed { file: k as u32, ranges: Vec::new(), kept: 0, refused: Some(why) });
            }
        }
    }
    (files, needs)
}
