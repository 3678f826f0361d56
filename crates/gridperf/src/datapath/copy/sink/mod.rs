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

mod finish;
mod prepare;
mod sweep;

use super::open::{OpenFiles, Slot};
use super::*;
use gridperf_core::copy::{block_count, block_cv, block_len, file_hash, hex, unhex32};
use gridperf_core::wire::{CopyFile, CopyNeed};
use prepare::reopen_append;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
pub use sweep::*;

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

    /// Notes why the file cannot be finished (the first reason stays).
    pub(super) fn fail(&self, why: String) {
        lock(&self.state).error.get_or_insert(why);
    }

    /// Counts a block that arrived damaged (it is sent again).
    pub(super) fn damaged(&self) {
        lock(&self.state).resent += 1;
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

    /// Whether every block is verified.
    pub fn complete(&self) -> bool {
        lock(&self.state).cvs.iter().all(Option::is_some)
    }
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
