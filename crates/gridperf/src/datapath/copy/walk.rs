//! The sending end's files: a file opened for reading, and a path walked
//! beneath a root (never leaving it, links listed and not followed).

use super::open::{OpenFiles, Slot};
use super::*;
use gridperf_core::copy::{block_count, block_cv, block_len, file_hash};
use gridperf_core::wire::CopyFile;
use std::fs::File;
use std::io::{self};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::Arc;

/// A file the sending end reads: where it is (beneath the directory it
/// was listed from), which file it was then, and what the copy calls it.
/// It is opened when a block of it is read (and closed when files used
/// more lately need the room: [`super::open`]), each time checked to be
/// the file listed, unchanged.
pub struct SourceFile {
    /// As the copy names it at the writing end; `origin` says which file it is.
    pub info: CopyFile,
    base: Arc<OwnedFd>,
    rel: String,
    /// Its device and inode when listed.
    ident: (u64, u64),
    id: u64,
    slot: Slot<File>,
}

/// The sending end's open files.
static SOURCES: OpenFiles<File> = OpenFiles::new(super::open::MAX_OPEN);

/// Which file this is, for a resume's journal: host, device, inode, size and time, hashed.
fn origin(m: &std::fs::Metadata) -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let host = HOST.get_or_init(|| {
        std::fs::read_to_string("/etc/machine-id")
            .ok()
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| gridperf_sys::uname().map(|u| u[1].clone()).unwrap_or_default())
    });
    let key = format!("{}|{}|{}|{}|{}", host.trim(), m.dev(), m.ino(), m.len(), mtime_ns(m));
    gridperf_core::copy::whole_hash(key.as_bytes()).to_hex()[..32].to_string()
}

impl SourceFile {
    /// A regular file found at `rel` beneath `base`, as listed (`m`); named `path` at the writing end.
    fn listed(base: Arc<OwnedFd>, rel: String, path: String, m: &std::fs::Metadata) -> SourceFile {
        SourceFile {
            info: CopyFile { path, size: m.len(), mtime_ns: mtime_ns(m), digest: None, origin: Some(origin(m)) },
            base,
            rel,
            ident: (m.dev(), m.ino()),
            id: super::open::new_id(),
            slot: Slot::default(),
        }
    }

    /// The file, opened again beneath its directory without following any
    /// link, and the same file unchanged, or why not.
    fn reopen(&self) -> io::Result<File> {
        let f = File::from(gridperf_sys::open_beneath_nofollow(
            &*self.base,
            &self.rel,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
        )?);
        gridperf_sys::set_fd_nonblocking(&f, false)?;
        let m = f.metadata()?;
        if !m.file_type().is_file() || (m.dev(), m.ino()) != self.ident {
            return Err(io::Error::other("replaced by another file since it was listed"));
        }
        if m.len() != self.info.size || mtime_ns(&m) != self.info.mtime_ns {
            return Err(io::Error::other("changed since it was listed (its size or time)"));
        }
        Ok(f)
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        SOURCES.get(self.id, &self.slot, || self.reopen())?.read_exact_at(buf, offset)
    }

    /// The file's BLAKE3 (hex), from its blocks' chaining values, for a
    /// third-party copy's sources to be compared before any byte moves: a
    /// read of the whole file at each source, side by side.
    pub fn digest(&self, block: u64) -> io::Result<String> {
        let n = block_count(self.info.size, block);
        let mut buf = vec![0u8; block as usize];
        let mut cvs = Vec::with_capacity(n as usize);
        let mut single = None;
        for i in 0..n {
            let len = block_len(self.info.size, block, i) as usize;
            self.read_exact_at(&mut buf[..len], i * block)?;
            cvs.push(block_cv(&buf[..len], i * block));
            if n == 1 {
                single = Some(gridperf_core::copy::whole_hash(&buf[..len]));
            }
        }
        let hash = file_hash(&cvs, self.info.size, block, single).ok_or_else(|| io::Error::other("no hash"))?;
        Ok(hash.to_hex().to_string())
    }

    /// Whether the file changed (replaced, or its size or time) since it was listed.
    pub fn changed(&self) -> bool {
        let Ok(fd) = gridperf_sys::open_beneath_nofollow(&*self.base, &self.rel, libc::O_PATH | libc::O_NOFOLLOW)
        else {
            return true;
        };
        File::from(fd).metadata().map_or(true, |m| {
            (m.dev(), m.ino()) != self.ident || m.len() != self.info.size || mtime_ns(&m) != self.info.mtime_ns
        })
    }
}

impl Drop for SourceFile {
    fn drop(&mut self) {
        SOURCES.forget(self.id, &self.slot);
    }
}

pub fn mtime_ns(m: &std::fs::Metadata) -> i64 {
    m.mtime().saturating_mul(1_000_000_000).saturating_add(m.mtime_nsec())
}

/// The directory that holds `rel` beneath `root` (its parents made, part
/// by part, when `make`), opened without leaving `root`, and the file's
/// own name. `rel` is checked first ([`gridperf_core::copy::check_relative`]).
pub fn dir_beneath(root: &impl AsRawFd, rel: &str, make: bool) -> io::Result<(OwnedFd, String)> {
    gridperf_core::copy::check_relative(rel).map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
    let parts: Vec<&str> = rel.split('/').collect();
    let (name, parents) = parts.split_last().expect("a checked path has a part");
    let dir_flags = libc::O_DIRECTORY | libc::O_RDONLY | libc::O_NOFOLLOW;
    let mut cur = gridperf_sys::open_beneath(root, ".", dir_flags, 0)?;
    for p in parents {
        if make {
            gridperf_sys::mkdir_in(&cur, p)?;
        }
        cur = gridperf_sys::open_beneath(&cur, p, dir_flags, 0)?;
    }
    Ok((cur, name.to_string()))
}

/// A file skipped while a directory was listed, and why.
pub type Skipped = (String, String);

/// How a skipped entry that could not be read (not one skipped by design:
/// a link, a device) begins its reason: the copy fails for it.
pub const UNREADABLE: &str = "cannot read";

/// The regular files at `rel` beneath `root`: the file itself, or every one
/// under the directory, each named by its path from `rel`'s parent (so
/// `data/run1` gives `run1/a.dat`, ...). Symbolic links, devices, pipes and
/// sockets are skipped and listed, never followed or read; at most `max`
/// files.
pub fn expand(root: &impl AsRawFd, rel: &str, max: usize) -> io::Result<(Vec<SourceFile>, Vec<Skipped>)> {
    let (dir, name) = dir_beneath(root, rel, false)?;
    let base = Arc::new(dir);
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    walk(&base, &base, &name, &name, &mut files, &mut skipped, max, 0)?;
    // what was named is itself skipped (a link, a pipe, /proc's): an error, not an empty copy
    if files.is_empty() {
        if let Some((_, why)) = skipped.iter().find(|(p, _)| *p == name) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{name}: {why}")));
        }
    }
    Ok((files, skipped))
}

#[allow(clippy::too_many_arguments)]
fn walk(
    base: &Arc<OwnedFd>,
    dir: &OwnedFd,
    name: &str,
    shown: &str,
    files: &mut Vec<SourceFile>,
    skipped: &mut Vec<Skipped>,
    max: usize,
    depth: usize,
) -> io::Result<()> {
    if depth > 64 {
        skipped.push((shown.to_string(), "deeper than 64 directories".into()));
        return Ok(());
    }
    let fd = match gridperf_sys::open_beneath(dir, name, libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK, 0) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            skipped.push((shown.to_string(), "a symbolic link: not followed (name its target)".into()));
            return Ok(());
        }
        Err(e) if depth == 0 => return Err(e),
        Err(e) => {
            skipped.push((shown.to_string(), format!("{UNREADABLE}: {e}")));
            return Ok(());
        }
    };
    let f = File::from(fd);
    let m = f.metadata()?;
    let kind = m.file_type();
    if kind.is_file() {
        if gridperf_sys::on_pseudo_fs(&f) {
            skipped.push((
                shown.to_string(),
                "a pseudo-file (/proc, /sys and the like): its size says nothing of what it holds".into(),
            ));
            return Ok(());
        }
        if files.len() >= max {
            return Err(io::Error::other(format!("more than {max} files")));
        }
        // listed, and closed: opened again when its blocks are read
        files.push(SourceFile::listed(base.clone(), shown.to_string(), shown.to_string(), &m));
    } else if kind.is_dir() {
        let mut names: Vec<String> = std::fs::read_dir(format!("/proc/self/fd/{}", f.as_raw_fd()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let sub: OwnedFd = f.into();
        for n in names {
            if n.ends_with(PARTIAL) || n.ends_with(JOURNAL) {
                continue;
            }
            walk(base, &sub, &n, &format!("{shown}/{n}"), files, skipped, max, depth + 1)?;
        }
    } else {
        skipped.push((shown.to_string(), "not a regular file or a directory (a device, pipe or socket)".into()));
    }
    Ok(())
}
