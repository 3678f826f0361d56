//! memfd and sendfile.

use super::*;

/// A memory-backed file of `len` bytes filled with gridperf's payload pattern
/// (byte i holds `i % 251`, a prime so that misaligned data shows up).
/// It is what `sendfile` transmits from: no disk is involved.
pub fn memfd_pattern(len: usize) -> io::Result<OwnedFd> {
    let name = CString::new("gridperf-pattern").expect("no NUL in a literal");
    // SAFETY: name is a valid NUL-terminated string; flags are valid.
    let fd = cvt_i(unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) })?;
    // SAFETY: memfd_create returned a fresh descriptor that we now own.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(owned);
    let chunk: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    // 64 KiB is not a multiple of 251: write the pattern by absolute offset.
    let mut written = 0usize;
    use std::io::Write;
    while written < len {
        let start = written % 251;
        let n = (len - written).min(chunk.len() - 251);
        file.write_all(&chunk[start..start + n])?;
        written += n;
    }
    Ok(OwnedFd::from(file))
}

/// The payload byte at `offset` in gridperf's pattern (see [`memfd_pattern`]).
pub fn pattern_byte(offset: usize) -> u8 {
    (offset % 251) as u8
}

/// sendfile(2): sends up to `count` bytes of `in_fd` starting at `offset`.
/// Returns the number of bytes sent (may be short on a non-blocking socket).
pub fn sendfile(out: &impl AsRawFd, in_fd: &impl AsRawFd, offset: u64, count: usize) -> io::Result<usize> {
    let mut off = offset as libc::off_t;
    // SAFETY: both descriptors are valid for the duration of the call; off is a valid pointer.
    let n = unsafe { libc::sendfile(out.as_raw_fd(), in_fd.as_raw_fd(), &mut off, count) };
    cvt(n, -1).map(|n| n as usize)
}
