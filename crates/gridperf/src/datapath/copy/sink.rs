//! The writing end's files: the partial file, its journal, the resume, the finish.
//!
//! A file's bytes go into `.NAME.gridperf-partial` beside its final name,
//! and each verified block's chaining value into `.NAME.gridperf-manifest`
//! (the journal: a JSON head, then a 40-byte record per block). What a
//! copy promises of them:
//!
//! - **One writer.** The copy that prepares a partial file holds its
//!   exclusive lock (flock) whenever it has it open, and its journal's head
//!   names it (`owner`, random per copy and file). A partial another copy
//!   holds is refused ("being written by another copy"); one another copy
//!   took over while this one had it closed (see below) is not written and
//!   not renamed: the file fails, and says so. Two names in one list that
//!   land on one destination are refused before anything is made.
//! - **One source.** The journal's head names the source's size, time and
//!   origin (host, device, inode): a resume keeps a partial's blocks only
//!   for that very file, each block hashed again.
//! - **Nothing written through a link.** A partial or journal with another
//!   hard link, or that is not a regular file, is refused; every name is
//!   opened beneath the root without following links.
//! - **Few descriptors.** A file is open (its directory, partial and
//!   journal: three descriptors, and the lock) while its blocks come, and
//!   closed when files used more lately need the room ([`super::open`]):
//!   opened again, its owner and inode checked again, when a block comes.
//! - **Nothing left reserved.** A partial this copy made and wrote nothing
//!   verified into is removed when the copy ends, however it ends.

use super::open::{OpenFiles, Slot};
use super::*;
use gridperf_core::copy::{block_count, block_cv, block_len, file_hash, hex, unhex32};
use gridperf_core::wire::{CopyFile, CopyNeed};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The attributes a finished file keeps: which source it is, and its BLAKE3.
const XATTR_ORIGIN: &str = "user.gridperf.origin";
const XATTR_BLAKE3: &str = "user.gridperf.blake3";

/// The journal's format: its head carries the source's origin and the writing copy's owner.
const JOURNAL_VERSION: u64 = 2;

/// A file being written at the receiving end: where it is beneath the
/// root, its final name, and what is verified of it.
pub struct SinkFile {
    pub name: String,
    pub info: CopyFile,
    pub block: u64,
    root: Arc<OwnedFd>,
    /// Its path beneath the root.
    rel: String,
    /// This copy's mark in the journal's head: the partial is this copy's while it is there.
    owner: String,
    /// The partial file's device and inode, once prepared (None: no partial: kept, or refused).
    ident: Option<(u64, u64)>,
    id: u64,
    slot: Slot<Handle>,
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
    /// This copy made the partial file (it removes it if nothing verified went in).
    created: bool,
    /// Moved into place (or left for good): nothing to clean.
    settled: AtomicBool,
    force: bool,
    /// A finished destination kept: the hash its copy recorded with it.
    known_hash: Option<String>,
}

/// A sink file while it is open: its directory, the partial file (and its
/// lock, for as long as this is open) and the journal.
struct Handle {
    dir: OwnedFd,
    partial: File,
    journal: File,
}

/// The writing end's open files.
static SINKS: OpenFiles<Handle> = OpenFiles::new(super::open::MAX_OPEN);

/// Sink files held open in this process now (for tests and the agent's metrics).
pub fn open_sinks() -> usize {
    SINKS.len()
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

fn partial_name(name: &str) -> String {
    format!(".{name}{PARTIAL}")
}

fn journal_name(name: &str) -> String {
    format!(".{name}{JOURNAL}")
}

/// A random mark for one copy's hold on one file.
fn new_owner() -> String {
    let mut b = [0u8; 16];
    match crate::host::random_32() {
        Ok(r) => b.copy_from_slice(&r[..16]),
        Err(_) => {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
            b.copy_from_slice(
                &(t ^ (u128::from(std::process::id()) << 64) ^ u128::from(super::open::new_id())).to_be_bytes(),
            );
        }
    }
    hex(&b)
}

/// Opens a partial file or journal for writing: a regular file with no
/// other hard link (a link planted beside the destination would have the
/// copy write through it), never through a symbolic link.
fn open_own(dir: &OwnedFd, name: &str, create: bool) -> io::Result<File> {
    let mut flags = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_NONBLOCK;
    if create {
        flags |= libc::O_CREAT | libc::O_EXCL;
    }
    let f = File::from(gridperf_sys::open_beneath(dir, name, flags, 0o600)?);
    gridperf_sys::set_fd_nonblocking(&f, false)?;
    let m = f.metadata()?;
    if !m.file_type().is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{name} is not a regular file: not written")));
    }
    if m.nlink() > 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name} has {} hard links: not written through (remove it)", m.nlink()),
        ));
    }
    Ok(f)
}

/// The journal's head, as JSON.
fn head(info: &CopyFile, block: u64, owner: &str) -> String {
    serde_json::json!({ "version": JOURNAL_VERSION, "size": info.size, "mtime_ns": info.mtime_ns, "block": block,
                        "origin": info.origin, "owner": owner })
    .to_string()
}

/// A journal's head line, parsed (the first line of its bytes).
fn read_head(all: &[u8]) -> Option<(serde_json::Value, usize)> {
    let nl = all.iter().position(|&b| b == b'\n')?;
    Some((serde_json::from_slice(&all[..nl]).ok()?, nl + 1))
}

impl SinkFile {
    /// Prepares `rel` beneath `root` for `info`: what a partial file
    /// already holds is hashed again against its journal (kept if it
    /// belongs to this very source), a finished destination is refused
    /// (unless `force`, or kept with `resume` when its size and time are the
    /// source's), a partial another copy holds is refused, and a new
    /// partial file takes its whole size at once (a full disk is said now).
    /// Returns the file and the blocks it needs.
    // Long by design: the destination's cases in the order they are decided
    // (partial of this source, finished, another copy's, new), each a
    // refusal or the blocks needed, on one open directory.
    pub fn prepare(
        root: &Arc<OwnedFd>,
        rel: &str,
        info: CopyFile,
        block: u64,
        rules: SinkRules,
    ) -> Result<(SinkFile, CopyNeed), String> {
        let (dir, name) = dir_beneath(&**root, rel, true).map_err(|e| format!("{rel}: {e}"))?;
        if info.size > MAX_FILE {
            return Err(format!("{name}: {} bytes: a copy takes files of up to 1 PiB", info.size));
        }
        let n = block_count(info.size, block) as usize;
        let mut file = SinkFile {
            name: name.clone(),
            info: info.clone(),
            block,
            root: root.clone(),
            rel: rel.to_string(),
            owner: new_owner(),
            ident: None,
            id: super::open::new_id(),
            slot: Slot::default(),
            summer: Mutex::new(rules.checksum.map(|c| (c.summer(), 0, Vec::new()))),
            state: Mutex::new(SinkState::default()),
            joined: rules.join,
            adopt: rules.adopt,
            adopt_from: 0,
            created: false,
            settled: AtomicBool::new(false),
            force: rules.force,
            known_hash: None,
        };
        if rules.join {
            return file.join(dir, n);
        }
        let none = |kept| CopyNeed { file: 0, ranges: Vec::new(), kept, refused: None };
        // a finished destination
        if let Ok(existing) = gridperf_sys::open_beneath(&dir, &name, libc::O_PATH | libc::O_NOFOLLOW, 0) {
            let m = File::from(existing).metadata().map_err(|e| format!("{name}: {e}"))?;
            if !m.file_type().is_file() {
                return Err(format!("{name} exists and is not a regular file: not replaced"));
            }
            // a copy that put it in place said which source it was, and its hash
            let said = gridperf_sys::open_beneath(&dir, &name, libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK, 0)
                .ok()
                .map(|f| (gridperf_sys::get_xattr(&f, XATTR_ORIGIN), gridperf_sys::get_xattr(&f, XATTR_BLAKE3)));
            let (origin, hash) = said.unwrap_or((None, None));
            let same_source = match (&origin, &info.origin) {
                (Some(o), Some(want)) => o.as_slice() == want.as_bytes(),
                // put there by another tool (or where no attribute is kept): size and time, as rsync's quick check
                (None, _) => true,
                (Some(_), None) => false,
            };
            let same_file = m.len() == info.size && mtime_ns(&m) == info.mtime_ns && same_source;
            // this very source in place already (its attributes say so): nothing to do, resume or not;
            // one another tool put there is kept by its size and time only with --resume
            if !rules.force && same_file && (rules.resume || origin.is_some()) {
                lock(&file.state).kept = info.size;
                file.settled.store(true, Ordering::SeqCst);
                file.known_hash = hash.and_then(|h| String::from_utf8(h).ok());
                let why = if origin.is_some() {
                    "finished by an earlier run (this very source: its size, time and origin)"
                } else {
                    "finished by an earlier run (its size and time are the source's; not hashed again)"
                };
                return Ok((file, CopyNeed { refused: Some(why.into()), ..none(info.size) }));
            }
            if !rules.force {
                return Err(format!(
                    "{name} exists: give --force to replace it (or --resume to keep what an earlier run finished)"
                ));
            }
        }
        let (pname, jname) = (partial_name(&name), journal_name(&name));
        // the partial file there, or a new one (another copy may make it between the two: then it is that one's)
        let mut tries = 0;
        let (partial, created) = loop {
            tries += 1;
            match open_own(&dir, &pname, false) {
                Ok(p) => break (p, false),
                Err(e) if e.kind() == io::ErrorKind::NotFound => match open_own(&dir, &pname, true) {
                    Ok(p) => break (p, true),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 3 => continue,
                    Err(e) => return Err(format!("creating {pname}: {e}")),
                },
                Err(e) => return Err(format!("{pname}: {e}")),
            }
        };
        file.created = created;
        // from here on, a refusal removes what this copy made
        let undo = |file: &SinkFile, why: String| -> String {
            if file.created {
                let _ = gridperf_sys::unlink_in(&dir, &pname);
                let _ = gridperf_sys::unlink_in(&dir, &jname);
            }
            why
        };
        match gridperf_sys::try_lock_exclusive(&partial) {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "{name} is being written by another copy right now (its partial file is locked): not touched; \
                     copy it again when that one is done"
                ))
            }
            Err(e) => return Err(undo(&file, format!("locking {pname}: {e}"))),
        }
        // locked: still the file that name holds (not replaced between the open and the lock)
        let m = partial.metadata().map_err(|e| undo(&file, format!("{pname}: {e}")))?;
        let ident = (m.dev(), m.ino());
        match gridperf_sys::stat_in(&dir, &pname) {
            Ok((d, i, _)) if (d, i) == ident => {}
            _ => return Err(format!("{name}: its partial file was replaced as it was opened: not touched")),
        }
        file.ident = Some(ident);
        // the journal: kept blocks of this very source, hashed again; a new head either way
        let journal = match open_own(&dir, &jname, false) {
            Ok(j) => Some(j),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(undo(&file, format!("{jname}: {e}"))),
        };
        let mut kept: Vec<(u64, [u8; 32])> = Vec::new();
        if let (Some(mut j), false) = (journal.as_ref(), created) {
            if m.len() == info.size {
                // the space is there (the partial holds it): the blocks' values may be kept
                lock(&file.state).cvs = vec![None; n];
                let mut all = Vec::new();
                j.read_to_end(&mut all).map_err(|e| format!("{jname}: {e}"))?;
                kept = file.rehash(&partial, &all);
            }
        }
        let journal = match journal {
            Some(j) => j,
            None => open_own(&dir, &jname, true).map_err(|e| undo(&file, format!("creating {jname}: {e}")))?,
        };
        let rewrite = (|| -> io::Result<()> {
            journal.set_len(0)?;
            let mut out = head(&info, block, &file.owner).into_bytes();
            out.push(b'\n');
            for (idx, cv) in &kept {
                out.extend_from_slice(&idx.to_be_bytes());
                out.extend_from_slice(cv);
            }
            journal.write_all_at(&out, 0)?;
            Ok(())
        })();
        rewrite.map_err(|e| undo(&file, format!("{jname}: {e}")))?;
        if kept.is_empty() {
            partial.set_len(0).map_err(|e| undo(&file, format!("{pname}: {e}")))?;
            gridperf_sys::preallocate(&partial, info.size).map_err(|e| {
                undo(
                    &file,
                    match e.raw_os_error() {
                        Some(libc::ENOSPC) => {
                            format!("{name}: the destination's disk has no room for its {} bytes", info.size)
                        }
                        _ => format!("{name}: reserving {} bytes: {e}", info.size),
                    },
                )
            })?;
            // the blocks' values are kept once the file's space is known to be there
            lock(&file.state).cvs = vec![None; n];
        }
        file.adopt_from = journal.metadata().map_or(u64::MAX, |m| m.len());
        // journal records are appended from here on (other destination agents' too)
        let journal = reopen_append(&dir, &jname, journal).map_err(|e| undo(&file, format!("{jname}: {e}")))?;
        SINKS.put(file.id, &file.slot, Handle { dir, partial, journal });
        let need: Vec<u64> = {
            let s = lock(&file.state);
            (0..n as u64).filter(|&i| s.cvs[i as usize].is_none()).collect()
        };
        let kept_bytes = lock(&file.state).kept;
        Ok((file, CopyNeed { ranges: gridperf_core::copy::ranges(need), ..none(kept_bytes) }))
    }

    /// A second destination's side of a file: the partial file and journal
    /// the first destination prepared, opened where this agent sees them
    /// (refused when they are not there: not the same storage). It needs
    /// nothing of its own: the client's leases say what comes here.
    fn join(mut self, dir: OwnedFd, n: usize) -> Result<(SinkFile, CopyNeed), String> {
        let name = self.name.clone();
        let (pname, jname) = (partial_name(&name), journal_name(&name));
        let not_shared = |what: &str| {
            format!(
                "{name}: {what}: this destination does not share the first one's storage (give \
                 --same-destination, or destinations on one shared filesystem)"
            )
        };
        let partial =
            open_own(&dir, &pname, false).map_err(|e| not_shared(&format!("the first destination's {pname}: {e}")))?;
        let pm = partial.metadata().map_err(|e| format!("{pname}: {e}"))?;
        if pm.len() != self.info.size {
            return Err(not_shared(&format!("{pname} is not of the source's size")));
        }
        let j =
            open_own(&dir, &jname, false).map_err(|e| not_shared(&format!("the first destination's {jname}: {e}")))?;
        let mut all = Vec::new();
        (&j).read_to_end(&mut all).map_err(|e| format!("{jname}: {e}"))?;
        let head = read_head(&all).map(|(h, _)| h).unwrap_or_default();
        if head["size"] != self.info.size || head["mtime_ns"] != self.info.mtime_ns || head["block"] != self.block {
            return Err(not_shared(&format!("{jname} belongs to another copy")));
        }
        // the first destination's hold: this one writes under it, and checks it again when it reopens
        self.owner = head["owner"].as_str().unwrap_or_default().to_string();
        self.ident = Some((pm.dev(), pm.ino()));
        let journal = reopen_append(&dir, &jname, j).map_err(|e| format!("{jname}: {e}"))?;
        SINKS.put(self.id, &self.slot, Handle { dir, partial, journal });
        lock(&self.state).cvs = vec![None; n];
        Ok((self, CopyNeed { file: 0, ranges: Vec::new(), kept: 0, refused: None }))
    }

    /// The file open: as it was prepared, or opened again (closed meanwhile
    /// for room), then checked to be still this copy's: the same inode,
    /// its lock taken again, its journal's head naming this copy.
    fn handle(&self) -> io::Result<Arc<Handle>> {
        let Some(ident) = self.ident else { return Err(io::Error::other("no partial file")) };
        SINKS.get(self.id, &self.slot, || {
            let (dir, name) = dir_beneath(&*self.root, &self.rel, false)?;
            let (pname, jname) = (partial_name(&name), journal_name(&name));
            let taken = |what: &str| io::Error::other(format!("{what}: not written, not renamed"));
            let partial = open_own(&dir, &pname, false).map_err(|e| taken(&format!("{pname}: {e}")))?;
            let m = partial.metadata()?;
            if (m.dev(), m.ino()) != ident {
                return Err(taken(&format!("{name}'s partial file was replaced by another copy's")));
            }
            if !self.joined && !gridperf_sys::try_lock_exclusive(&partial)? {
                return Err(taken(&format!("{name} is being written by another copy now")));
            }
            let mut journal = open_own(&dir, &jname, false).map_err(|e| taken(&format!("{jname}: {e}")))?;
            let mut first = [0u8; 4096];
            let got = journal.read(&mut first)?;
            let owner = read_head(&first[..got]).map(|(h, _)| h["owner"].as_str().unwrap_or_default().to_string());
            if owner.as_deref() != Some(self.owner.as_str()) {
                return Err(taken(&format!("{name} was taken over by another copy while this one had it closed")));
            }
            let journal = reopen_append(&dir, &jname, journal)?;
            Ok(Handle { dir, partial, journal })
        })
    }

    /// Hashes again each block the journal (its bytes: `all`) says arrived
    /// verified, if the journal belongs to this very source; the blocks
    /// that still hold, with their values.
    fn rehash(&mut self, partial: &File, all: &[u8]) -> Vec<(u64, [u8; 32])> {
        let Some((head, body)) = read_head(all) else { return Vec::new() };
        let same = head["version"] == JOURNAL_VERSION
            && head["size"] == self.info.size
            && head["mtime_ns"] == self.info.mtime_ns
            && head["block"] == self.block
            && self.info.origin.is_some()
            && head["origin"] == serde_json::json!(self.info.origin);
        if !same {
            return Vec::new();
        }
        let mut kept = Vec::new();
        let mut buf = vec![0u8; self.block as usize];
        let n = block_count(self.info.size, self.block);
        for rec in all[body..].chunks_exact(40) {
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
                    kept.push((idx, want));
                }
            }
        }
        kept
    }

    /// The bytes of the file verified so far, kept or written.
    pub(super) fn verified_bytes(&self) -> u64 {
        let s = lock(&self.state);
        s.moved + s.kept
    }

    /// Whether this file failed already (nothing more of it is written).
    pub(super) fn failed(&self) -> bool {
        lock(&self.state).error.is_some()
    }

    /// Writes a verified block and records it in the journal.
    pub(super) fn put(&self, idx: u64, data: &[u8], cv: [u8; 32]) -> io::Result<u64> {
        let h = self.handle()?;
        let t = Instant::now();
        h.partial.write_all_at(data, idx * self.block)?;
        let mut rec = [0u8; 40];
        rec[..8].copy_from_slice(&idx.to_be_bytes());
        rec[8..].copy_from_slice(&cv);
        (&h.journal).write_all(&rec)?;
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
        self.feed(&h, Some((idx, data)))?;
        Ok(spent)
    }

    /// Takes the checksum as far as the verified blocks reach in order:
    /// `just` (a block in hand) if it is the next, then any after it that
    /// arrived ahead, read back from the partial file (the page cache, as
    /// a rule; a resumed file's kept blocks, from the disk).
    fn feed(&self, h: &Handle, just: Option<(u64, &[u8])>) -> io::Result<()> {
        let mut g = lock(&self.summer);
        let Some((sum, cursor, buf)) = g.as_mut() else { return Ok(()) };
        let n = block_count(self.info.size, self.block);
        if let Some((idx, data)) = just {
            if idx == *cursor {
                sum.update(data);
                *cursor += 1;
            }
        }
        while *cursor < n && lock(&self.state).cvs.get(*cursor as usize).is_some_and(Option::is_some) {
            let len = block_len(self.info.size, self.block, *cursor) as usize;
            buf.resize(len, 0);
            h.partial.read_exact_at(&mut buf[..len], *cursor * self.block)?;
            sum.update(&buf[..len]);
            *cursor += 1;
        }
        Ok(())
    }

    /// Takes from the journal the blocks other destination agents verified
    /// and recorded there (a third-party copy on shared storage).
    fn adopt_joined(&self, h: &Handle) -> io::Result<()> {
        let len = h.journal.metadata()?.len();
        let from = self.adopt_from.min(len);
        let mut all = vec![0u8; (len - from) as usize];
        h.journal.read_exact_at(&mut all, from)?;
        let mut s = lock(&self.state);
        for rec in all.chunks_exact(40) {
            let idx = u64::from_be_bytes(rec[..8].try_into().expect("8 bytes")) as usize;
            let Some(cv) = unhex32(&hex(&rec[8..40])) else { continue };
            if let Some(slot @ None) = s.cvs.get_mut(idx) {
                *slot = Some(cv);
            }
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
    /// source did not change), if it is still this copy's: its data made
    /// durable, its time set to the source's, the partial renamed to the
    /// final name (never over a file that appeared meanwhile, unless
    /// --force), the journal removed. Returns the outcome either way (a file
    /// not finished stays partial, with its journal, for a resume).
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
        if self.ident.is_none() || self.settled.load(Ordering::SeqCst) {
            // kept from an earlier run (with the hash it recorded), or refused
            out.blake3 = self.known_hash.clone();
            return out;
        }
        let h = match self.handle() {
            Ok(h) => h,
            Err(e) => {
                out.error.get_or_insert(format!("{}: {e}", self.name));
                return out;
            }
        };
        if self.joined {
            // the first destination renames: what this one wrote is made durable first
            if let Err(e) = h.partial.sync_data() {
                out.error = Some(format!("{}: {e}", self.name));
            }
            return out;
        }
        if self.adopt && !self.complete() {
            if let Err(e) = self.adopt_joined(&h) {
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
        let summed = match self.feed(&h, None) {
            Ok(()) => lock(&self.summer).take().map(|(s, _, _)| s.hex()),
            Err(e) => {
                out.error = Some(format!("reading {} back for its checksum: {e}; kept partial", self.name));
                return out;
            }
        };
        let (pname, jname) = (partial_name(&self.name), journal_name(&self.name));
        let done = (|| -> io::Result<()> {
            use std::os::unix::fs::PermissionsExt;
            h.partial.sync_all()?;
            let when = std::time::UNIX_EPOCH + Duration::from_nanos(self.info.mtime_ns.max(0) as u64);
            h.partial.set_times(std::fs::FileTimes::new().set_modified(when).set_accessed(when))?;
            h.partial.set_permissions(std::fs::Permissions::from_mode(0o644))?;
            // which source this is, and its hash, kept with it (a resume's quick check; where the
            // filesystem keeps no attributes, nothing is lost but that)
            if let Some(o) = &self.info.origin {
                let _ = gridperf_sys::set_xattr(&h.partial, XATTR_ORIGIN, o.as_bytes());
            }
            if let Some(hx) = &hash {
                let _ = gridperf_sys::set_xattr(&h.partial, XATTR_BLAKE3, hx.to_hex().as_bytes());
            }
            if self.force {
                gridperf_sys::rename_in(&h.dir, &pname, &self.name)?;
            } else {
                gridperf_sys::rename_in_noreplace(&h.dir, &pname, &self.name).map_err(|e| {
                    if e.kind() == io::ErrorKind::AlreadyExists {
                        io::Error::new(
                            e.kind(),
                            "a file of its name appeared while the copy ran: not replaced (give --force); kept partial",
                        )
                    } else {
                        e
                    }
                })?;
            }
            self.settled.store(true, Ordering::SeqCst);
            gridperf_sys::unlink_in(&h.dir, &jname)?;
            File::from(h.dir.try_clone()?).sync_all()
        })();
        drop(h);
        SINKS.forget(self.id, &self.slot);
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

/// The same journal, opened again to append (O_APPEND: every writer's
/// 40-byte records land whole after the others', whatever their offsets).
fn reopen_append(dir: &OwnedFd, jname: &str, was: File) -> io::Result<File> {
    let f = File::from(gridperf_sys::open_beneath(dir, jname, libc::O_RDWR | libc::O_APPEND | libc::O_NOFOLLOW, 0)?);
    let (a, b) = (was.metadata()?, f.metadata()?);
    if (a.dev(), a.ino()) != (b.dev(), b.ino()) || b.nlink() > 1 {
        return Err(io::Error::other("the journal was replaced as it was opened"));
    }
    Ok(f)
}

impl Drop for SinkFile {
    /// A partial file this copy made and put nothing verified into is
    /// removed, with its journal, however the copy ended (a client that
    /// declared 2 GiB and sent nothing left 2 GiB reserved for ever): if it
    /// is still this copy's.
    fn drop(&mut self) {
        let nothing = {
            let s = lock(&self.state);
            s.moved == 0 && s.kept == 0
        };
        if self.created && !self.joined && nothing && !self.settled.load(Ordering::SeqCst) {
            if let Ok(h) = self.handle() {
                let (pname, jname) = (partial_name(&self.name), journal_name(&self.name));
                let _ = gridperf_sys::unlink_in(&h.dir, &pname);
                let _ = gridperf_sys::unlink_in(&h.dir, &jname);
            }
        }
        SINKS.forget(self.id, &self.slot);
    }
}

/// Prepares every file of a copy at the writing end, beneath `root`:
/// the files, and what each needs (a file refused says why; the rest go
/// on). Names that land on one destination are refused, every one of them:
/// two sources written into one file would make a file of both.
pub fn prepare_all(
    root: &OwnedFd,
    list: &[CopyFile],
    block: u64,
    rules: SinkRules,
) -> (Vec<Option<SinkFile>>, Vec<CopyNeed>) {
    let mut files = Vec::with_capacity(list.len());
    let mut needs = Vec::with_capacity(list.len());
    let twice = gridperf_core::copy::named_twice(list.iter().map(|f| f.path.as_str()));
    let root = root.try_clone().map(Arc::new);
    for (k, f) in list.iter().enumerate() {
        let prepared = match (&root, twice.contains(f.path.as_str())) {
            (_, true) => {
                Err(format!("{}: two of the copy's sources go to this one destination: neither is written", f.path))
            }
            (Err(e), _) => Err(format!("the destination: {e}")),
            (Ok(root), false) => SinkFile::prepare(root, &f.path, f.clone(), block, rules),
        };
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
