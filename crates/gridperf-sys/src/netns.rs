//! Named network namespaces (as `ip netns` keeps them), and running in one.

use super::*;

/// Where named namespaces live, as `ip netns` keeps them.
pub const NETNS_DIR: &str = "/run/netns";

/// A namespace's file: a name under /run/netns, or a namespace a process
/// holds open, `/proc/PID/fd/N` (the rootless lab's, see [`netns_hold`]).
pub(crate) fn netns_path(name: &str) -> io::Result<CString> {
    if held_path(name) {
        return Ok(CString::new(name).expect("checked: digits and slashes"));
    }
    if name.is_empty() || name.len() > 64 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad namespace name {name:?}: use 1 to 64 letters, digits, - or _, or /proc/PID/fd/N"),
        ));
    }
    Ok(CString::new(format!("{NETNS_DIR}/{name}")).expect("checked: no NUL"))
}

/// Whether `name` is a held namespace, `/proc/PID/fd/N`.
pub(crate) fn held_path(name: &str) -> bool {
    let parts: Vec<&str> = name.split('/').collect();
    let number = |s: &str| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit());
    matches!(parts[..], ["", "proc", pid, "fd", fd] if number(pid) && number(fd))
}

/// A new network namespace with no name, held by the descriptor returned:
/// it lives while the descriptor is open (or a process runs in it), and
/// other processes reach it as `/proc/PID/fd/N`. Needs CAP_SYS_ADMIN in
/// this process's user namespace, which a user namespace of one's own gives.
pub fn netns_hold() -> io::Result<OwnedFd> {
    std::thread::spawn(|| -> io::Result<OwnedFd> {
        unshare_netns()?;
        Ok(std::fs::File::open("/proc/thread-self/ns/net")?.into())
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
}

/// Makes /run/netns a shared mount point of its own, as iproute2 does
/// before its first namespace. Otherwise a later `ip netns add` binds the
/// directory onto itself, and the namespaces mounted here before end up
/// beneath that mount: neither unmounted nor removed by name, they outlive
/// their lab (umount2 EINVAL, unlink EBUSY).
fn netns_dir_shared() -> io::Result<()> {
    let dir = CString::new(NETNS_DIR).expect("no NUL in a literal");
    let (none, empty) = (CString::new("none").expect("literal"), CString::new("").expect("literal"));
    let share = || {
        // SAFETY: valid C strings; a propagation change takes no data.
        cvt_i(unsafe {
            libc::mount(empty.as_ptr(), dir.as_ptr(), none.as_ptr(), libc::MS_SHARED | libc::MS_REC, std::ptr::null())
        })
    };
    match share() {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            // not a mount point yet: bind it onto itself, then share it
            // SAFETY: as above; a bind mount takes no data.
            cvt_i(unsafe {
                libc::mount(dir.as_ptr(), dir.as_ptr(), none.as_ptr(), libc::MS_BIND | libc::MS_REC, std::ptr::null())
            })?;
            share().map(drop)
        }
        Err(e) => Err(e),
    }
}

/// Creates a named network namespace that `ip netns exec NAME ...` can use:
/// a new namespace bind-mounted on /run/netns/NAME. Needs CAP_SYS_ADMIN.
/// Fails if the name is taken.
pub fn netns_create(name: &str) -> io::Result<()> {
    let path = netns_path(name)?;
    std::fs::create_dir_all(NETNS_DIR)?;
    netns_dir_shared()?;
    // SAFETY: path is a valid C string; the file is created empty and closed at once.
    let fd = cvt_i(unsafe {
        libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o444)
    })?;
    // SAFETY: fd was just opened by us.
    unsafe { libc::close(fd) };
    // a thread of its own enters the new namespace, so this one stays where it is
    let p = path.clone();
    let result = std::thread::spawn(move || -> io::Result<()> {
        unshare_netns()?;
        let src = CString::new("/proc/thread-self/ns/net").expect("no NUL in a literal");
        // SAFETY: both paths are valid C strings; a bind mount takes no data.
        cvt_i(unsafe { libc::mount(src.as_ptr(), p.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) })
            .map(drop)
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")));
    if result.is_err() {
        // SAFETY: path is a valid C string.
        unsafe { libc::unlink(path.as_ptr()) };
    }
    result
}

/// Removes a named network namespace (detaches the mount, deletes the file).
/// The namespace itself goes when its last process and device let go.
pub fn netns_delete(name: &str) -> io::Result<()> {
    let path = netns_path(name)?;
    if held_path(name) {
        // a held namespace goes with its holder
        return Ok(());
    }
    // SAFETY: path is a valid C string.
    let umount = cvt_i(unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) });
    // SAFETY: as above.
    let unlink = cvt_i(unsafe { libc::unlink(path.as_ptr()) });
    umount.and(unlink).map(drop)
}

/// Whether a named namespace exists.
pub fn netns_exists(name: &str) -> bool {
    match netns_path(name) {
        Ok(p) => std::path::Path::new(&*p.to_string_lossy()).exists(),
        Err(_) => false,
    }
}

/// Moves the calling thread into a named network namespace.
pub fn netns_enter(name: &str) -> io::Result<()> {
    let path = netns_path(name)?;
    // SAFETY: path is a valid C string.
    let fd = cvt_i(unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })?;
    // SAFETY: a fresh descriptor, now owned.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fd refers to a network namespace file.
    cvt_i(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
}

/// Moves the calling thread into the network namespace of an open
/// namespace file (e.g. /proc/thread-self/ns/net, opened earlier to come back).
pub fn setns_net(ns: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: setns takes a descriptor and a flag; no memory is passed.
    cvt_i(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
}

/// The inode of a named namespace (what /proc/PID/ns/net links to, as net:[INODE]).
pub fn netns_inode(name: &str) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let p = netns_path(name)?;
    Ok(std::fs::metadata(&*p.to_string_lossy())?.ino())
}

/// The processes whose network namespace is the named one.
pub fn netns_pids(name: &str) -> io::Result<Vec<u32>> {
    netns_inode_pids(netns_inode(name)?)
}

/// The processes whose network namespace has this inode (of those this
/// process may look at: its user's, or all for root).
pub fn netns_inode_pids(inode: u64) -> io::Result<Vec<u32>> {
    let want = format!("net:[{inode}]");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc")?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|l| l.to_string_lossy() == want) {
            out.push(pid);
        }
    }
    Ok(out)
}

/// Runs `f` on a thread inside the named namespace and returns its result.
pub fn in_netns<R: Send + 'static>(name: &str, f: impl FnOnce() -> io::Result<R> + Send + 'static) -> io::Result<R> {
    let name = name.to_string();
    std::thread::spawn(move || {
        netns_enter(&name)?;
        f()
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
}
