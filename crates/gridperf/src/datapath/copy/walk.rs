//! The sending end's files: a file opened for reading, and a path walked
//! beneath a root (never leaving it, links listed and not followed).

use super::*;
use gridperf_core::copy::{block_count, block_cv, block_len, file_hash};
use gridperf_core::wire::CopyFile;
use std::fs::File;
use std::io::{self};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt};

/// A file the sending end reads.
pub struct SourceFile {
    pub file: File,
    /// As the copy names it at the writing end.
    pub info: CopyFile,
}

impl SourceFile {
    /// Opens a regular file (not a device, a pipe or a directory) and notes its size and time.
    pub fn open(file: File, path: String) -> io::Result<SourceFile> {
        let m = file.metadata()?;
        if !m.file_type().is_file() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
        }
        Ok(SourceFile { info: CopyFile { path, size: m.len(), mtime_ns: mtime_ns(&m), digest: None }, file })
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
            self.file.read_exact_at(&mut buf[..len], i * block)?;
            cvs.push(block_cv(&buf[..len], i * block));
            if n == 1 {
                single = Some(gridperf_core::copy::whole_hash(&buf[..len]));
            }
        }
        let hash = file_hash(&cvs, self.info.size, block, single).ok_or_else(|| io::Error::other("no hash"))?;
        Ok(hash.to_hex().to_string())
    }

    /// Whether the file changed (size or modification time) since it was opened.
    pub fn changed(&self) -> bool {
        self.file.metadata().map(|m| m.len() != self.info.size || mtime_ns(&m) != self.info.mtime_ns).unwrap_or(true)
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
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    walk(&dir, &name, &name, &mut files, &mut skipped, max, 0)?;
    Ok((files, skipped))
}

fn walk(
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
            skipped.push((shown.to_string(), "a symbolic link: not followed".into()));
            return Ok(());
        }
        Err(e) if depth == 0 => return Err(e),
        Err(e) => {
            skipped.push((shown.to_string(), format!("{UNREADABLE}: {e}")));
            return Ok(());
        }
    };
    let f = File::from(fd);
    let kind = f.metadata()?.file_type();
    if kind.is_file() {
        if files.len() >= max {
            return Err(io::Error::other(format!("more than {max} files")));
        }
        // reads block again: the non-blocking flag was for opening only
        gridperf_sys::set_fd_nonblocking(&f, false)?;
        files.push(SourceFile::open(f, shown.to_string())?);
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
            walk(&sub, &n, &format!("{shown}/{n}"), files, skipped, max, depth + 1)?;
        }
    } else {
        skipped.push((shown.to_string(), "not a regular file or a directory (a device, pipe or socket)".into()));
    }
    Ok(())
}
