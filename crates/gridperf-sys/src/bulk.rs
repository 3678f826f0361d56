//! Files for bulk streams and copies: opening beneath a directory, space, zero-copy sends.

use super::*;

/// Opens `path` relative to the directory `dir`, never leaving it:
/// openat2 with RESOLVE_BENEATH (no `..` above it, no absolute path, no
/// symbolic link that points out of it) and RESOLVE_NO_MAGICLINKS
/// (/proc/PID/fd links). `flags` are open(2)'s (O_CLOEXEC is added).
pub fn open_beneath(dir: &impl AsRawFd, path: &str, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    openat2(dir, path, flags, mode, libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS)
}

/// openat2(2) with `resolve`, retried on EINTR; O_CLOEXEC is added, and
/// `mode` counts only where the call may create a file.
fn openat2(dir: &impl AsRawFd, path: &str, flags: i32, mode: u32, resolve: u64) -> io::Result<OwnedFd> {
    let c = CString::new(path).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: open_how is plain integers; all zero is a valid value
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 { u64::from(mode) } else { 0 };
    how.resolve = resolve;
    loop {
        // SAFETY: c is a NUL-terminated path; how lives across the call and its size is passed
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: the kernel returned a new descriptor this process owns
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// mkdirat(2): a directory `name` (one plain name) in `dir`; one that
/// exists already is fine.
pub fn mkdir_in(dir: &impl AsRawFd, name: &str) -> io::Result<()> {
    let c = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte"))?;
    // SAFETY: c is NUL-terminated
    if unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) } == 0 {
        return Ok(());
    }
    match io::Error::last_os_error() {
        e if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        e => Err(e),
    }
}

/// renameat(2) within one directory: `from` to `to`, both plain names.
pub fn rename_in(dir: &impl AsRawFd, from: &str, to: &str) -> io::Result<()> {
    let bad = |_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte");
    let (f, t) = (CString::new(from).map_err(bad)?, CString::new(to).map_err(bad)?);
    // SAFETY: both are NUL-terminated and the same directory descriptor is valid
    if unsafe { libc::renameat(dir.as_raw_fd(), f.as_ptr(), dir.as_raw_fd(), t.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// renameat2(2) with RENAME_NOREPLACE within `dir`: fails with
/// AlreadyExists rather than replace what `to` names.
pub fn rename_in_noreplace(dir: &impl AsRawFd, from: &str, to: &str) -> io::Result<()> {
    let bad = |_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte");
    let (f, t) = (CString::new(from).map_err(bad)?, CString::new(to).map_err(bad)?);
    let (d, flags) = (dir.as_raw_fd(), libc::RENAME_NOREPLACE);
    // SAFETY: both are NUL-terminated and the same directory descriptor is valid
    cvt_i(unsafe { libc::renameat2(d, f.as_ptr(), d, t.as_ptr(), flags) }).map(|_| ())
}

/// renameat2(2) with RENAME_NOREPLACE of two paths: fails with
/// AlreadyExists rather than replace what `to` names.
pub fn rename_noreplace(from: &std::path::Path, to: &std::path::Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let bad = |_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte");
    let f = CString::new(from.as_os_str().as_bytes()).map_err(bad)?;
    let t = CString::new(to.as_os_str().as_bytes()).map_err(bad)?;
    // SAFETY: both are NUL-terminated paths
    cvt_i(unsafe { libc::renameat2(libc::AT_FDCWD, f.as_ptr(), libc::AT_FDCWD, t.as_ptr(), libc::RENAME_NOREPLACE) })
        .map(|_| ())
}

/// unlinkat(2) of a plain name in `dir`; one that is gone already is fine.
pub fn unlink_in(dir: &impl AsRawFd, name: &str) -> io::Result<()> {
    let c = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte"))?;
    // SAFETY: c is NUL-terminated
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    match io::Error::last_os_error() {
        e if e.kind() == io::ErrorKind::NotFound => Ok(()),
        e => Err(e),
    }
}

/// The `f_type` statfs(2) gives a tmpfs (linux/magic.h).
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// Makes every allocation of `bytes` or more a mapping of its own, given
/// back to the kernel when it is freed (glibc's M_MMAP_THRESHOLD, which
/// also stops it from rising by itself: after a 16 MiB buffer was freed it
/// rose to 16 MiB, and the next ones stayed in the heap after their test).
pub fn map_large_allocations(bytes: usize) {
    // SAFETY: mallopt changes only the allocator's own settings
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, bytes.min(i32::MAX as usize) as i32);
    }
}

/// fsetxattr(2): sets the extended attribute `name` of an open file.
pub fn set_xattr(file: &impl AsRawFd, name: &str, value: &[u8]) -> io::Result<()> {
    let n = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte"))?;
    // SAFETY: a valid descriptor, a NUL-terminated name, a value and its length
    cvt_i(unsafe { libc::fsetxattr(file.as_raw_fd(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) }).map(|_| ())
}

/// fgetxattr(2): the extended attribute `name` of an open file (at most
/// 256 bytes), None when it has none (or the filesystem keeps none).
pub fn get_xattr(file: &impl AsRawFd, name: &str) -> Option<Vec<u8>> {
    let n = CString::new(name).ok()?;
    let mut buf = [0u8; 256];
    // SAFETY: a valid descriptor, a NUL-terminated name, a buffer and its length
    let got = unsafe { libc::fgetxattr(file.as_raw_fd(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (got >= 0).then(|| buf[..got as usize].to_vec())
}

/// Gives the memory the allocator holds free back to the kernel
/// (glibc's malloc_trim): an agent that served a test of 16 MiB messages
/// kept hundreds of MB of freed buffers while it sat idle.
pub fn release_free_memory() {
    // SAFETY: malloc_trim takes a pad and touches only the allocator's own state
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The filesystems whose files are the kernel's words, not stored bytes
/// (/proc, /sys, debugfs, tracefs, securityfs, cgroup, bpf, configfs,
/// efivarfs, pstore): their sizes say nothing of what they hold.
const PSEUDO_FS: &[u64] = &[
    0x9fa0,      // proc
    0x6265_6572, // sysfs
    0x6462_6720, // debugfs
    0x7472_6163, // tracefs
    0x7363_6673, // securityfs
    0x0027_e0eb, // cgroup
    0x6367_7270, // cgroup2
    0xcafe_4a11, // bpf
    0x6265_6570, // configfs
    0xde5e_81e4, // efivarfs
    0x6165_676c, // pstore
];

/// Whether a file lies on a pseudo-filesystem ([`PSEUDO_FS`]).
pub fn on_pseudo_fs(file: &impl AsRawFd) -> bool {
    // SAFETY: statfs is plain data, written by the call
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a statfs to write
    unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) == 0 && PSEUDO_FS.contains(&(fs.f_type as u64)) }
}

/// flock(2) LOCK_EX | LOCK_NB: Ok(true) when this open file now holds the
/// file's exclusive lock, Ok(false) when another open file holds it. The
/// lock goes with the last descriptor of this open file.
pub fn try_lock_exclusive(file: &impl AsRawFd) -> io::Result<bool> {
    loop {
        // SAFETY: a valid descriptor
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

/// What a name in `dir` is, without following a link: (device, inode,
/// hard links), or NotFound.
pub fn stat_in(dir: &impl AsRawFd, name: &str) -> io::Result<(u64, u64, u64)> {
    let c = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte"))?;
    // SAFETY: stat is plain data, written by the call
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated name, a valid directory descriptor, a stat to write
    cvt_i(unsafe { libc::fstatat(dir.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok((st.st_dev, st.st_ino, st.st_nlink))
}

/// Opens `path` beneath `dir` as [`open_beneath`] does, and follows no
/// symbolic link at all on the way (RESOLVE_NO_SYMLINKS): a path walked
/// once with every part O_NOFOLLOW, opened again later the same way.
pub fn open_beneath_nofollow(dir: &impl AsRawFd, path: &str, flags: i32) -> io::Result<OwnedFd> {
    openat2(dir, path, flags, 0, libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_NO_SYMLINKS)
}

/// If the file is on a tmpfs: the bytes free there (None for a tmpfs
/// mounted with size=0, which has no limit and says 0 blocks).
pub(crate) fn tmpfs_free(file: &impl AsRawFd) -> Option<Option<u64>> {
    // SAFETY: statfs is plain data, written by the call
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a statfs to write
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) } != 0 || fs.f_type as u64 != TMPFS_MAGIC {
        return None;
    }
    Some((fs.f_blocks != 0).then(|| fs.f_bavail as u64 * fs.f_bsize as u64))
}

/// fallocate(2) the first `len` bytes of a file (space reserved now: a full
/// disk is found before the copy, not in the middle of it).
///
/// On tmpfs the file is only extended, after a check that the free space
/// holds it (ENOSPC if not): a tmpfs has no layout to gain, and its
/// fallocate zero-fills every page at once, the writes then filling each a
/// second time (0.25 s before a 2 GiB copy on loopback that took 1.3 s). What
/// another writer takes meanwhile is found by the copy's pwrite (ENOSPC,
/// the partial file kept for a resume).
pub fn preallocate(file: &impl AsRawFd, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    if let Some(free) = tmpfs_free(file) {
        if free.is_some_and(|f| f < len) {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        // SAFETY: as above
        if unsafe { libc::ftruncate(file.as_raw_fd(), len as libc::off_t) } == 0 {
            return Ok(());
        }
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a valid descriptor and a length
    let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len as libc::off_t) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    // a filesystem without fallocate: extend it instead
    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
        // SAFETY: as above
        if unsafe { libc::ftruncate(file.as_raw_fd(), len as libc::off_t) } == 0 {
            return Ok(());
        }
        return Err(io::Error::last_os_error());
    }
    Err(e)
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on a host
/// (what a UDP stream's send timestamps are read from).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

const SO_MAX_PACING_RATE: libc::c_int = 47;
const SO_ZEROCOPY: libc::c_int = 60;
const MSG_ZEROCOPY: libc::c_int = 0x400_0000;
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// SO_MAX_PACING_RATE: the most a socket may send, in bytes per second
/// (TCP paces itself to it, with or without the fq qdisc).
pub fn set_max_pacing_rate(sock: &impl AsRawFd, bytes_per_s: u64) -> io::Result<()> {
    let v: u64 = bytes_per_s;
    // SAFETY: v lives across the call and its size is passed; the kernel takes a u32 or a u64.
    cvt_i(unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MAX_PACING_RATE,
            &v as *const u64 as *const libc::c_void,
            size_of::<u64>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// SO_ZEROCOPY on: the socket may then send with MSG_ZEROCOPY.
pub fn set_zerocopy(sock: &impl AsRawFd) -> io::Result<()> {
    setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, SO_ZEROCOPY, 1)
}

/// send(2) with MSG_ZEROCOPY: the kernel pins `buf`'s pages instead of
/// copying them, and says on the error queue when it is done with them. The
/// caller must not change `buf` until then (gridperf never does: it sends
/// one constant buffer).
pub fn send_zerocopy(sock: &impl AsRawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for reads of its length.
    let n = unsafe { libc::send(sock.as_raw_fd(), buf.as_ptr() as *const libc::c_void, buf.len(), MSG_ZEROCOPY) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Reads every MSG_ZEROCOPY completion waiting on a socket's error queue,
/// without blocking: how many sends they cover, and how many of those the
/// kernel copied after all (it does on loopback and veth, and for small sends).
pub fn reap_zerocopy(sock: &impl AsRawFd) -> io::Result<(u64, u64)> {
    let (mut done, mut copied) = (0u64, 0u64);
    loop {
        let mut control = [0u64; 16];
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = size_of_val(&control) as _;
        // SAFETY: msg points at a control buffer that lives across the call; no data iovec.
        let r = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok((done, copied));
            }
            return Err(e);
        }
        // SAFETY: the kernel filled msg's control buffer; the CMSG macros walk it within msg_controllen.
        let mut cm = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !cm.is_null() {
            // SAFETY: cm is a header inside the control buffer.
            let hdr = unsafe { &*cm };
            let is_err = (hdr.cmsg_level == libc::SOL_IP && hdr.cmsg_type == libc::IP_RECVERR)
                || (hdr.cmsg_level == libc::SOL_IPV6 && hdr.cmsg_type == libc::IPV6_RECVERR);
            if is_err {
                // SAFETY: an IP(V6)_RECVERR message carries a sock_extended_err.
                let ee = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cm) as *const libc::sock_extended_err) };
                if ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY {
                    let n = ee.ee_data.wrapping_sub(ee.ee_info) as u64 + 1;
                    done += n;
                    if ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0 {
                        copied += n;
                    }
                }
            }
            // SAFETY: as above.
            cm = unsafe { libc::CMSG_NXTHDR(&msg, cm) };
        }
    }
}

/// The soft limit on open file descriptors (RLIMIT_NOFILE), if known.
pub fn open_files_limit() -> Option<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: r is a valid rlimit to write.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0).then_some(r.rlim_cur)
}

/// Waits until any of `read` is readable or `write` is writable, at most
/// `timeout_ms`; returns which were ready (readable ones, then the writable one).
pub fn poll_read_or_write(read: &[RawFd], write: RawFd, timeout_ms: i32) -> io::Result<(Vec<bool>, bool)> {
    let mut pfds: Vec<libc::pollfd> =
        read.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    pfds.push(libc::pollfd { fd: write, events: libc::POLLOUT, revents: 0 });
    loop {
        // SAFETY: pfds is a valid array of pollfd of the length given.
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
        match cvt_i(r) {
            Ok(_) => {
                let w = pfds.pop().is_some_and(|p| p.revents != 0);
                return Ok((pfds.iter().map(|p| p.revents != 0).collect(), w));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}
