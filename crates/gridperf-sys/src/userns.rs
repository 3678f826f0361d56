//! User namespaces.

use super::*;

/// Whether this process is in the machine's first user namespace (where
/// root is root), from its uid_map: `0 0 4294967295` there.
pub fn in_initial_userns() -> bool {
    std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|m| {
        let f: Vec<&str> = m.split_whitespace().collect();
        f == ["0", "0", "4294967295"]
    })
}

/// The effective user ID, as this user namespace sees it.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// The user this process is outside every user namespace: the effective
/// UID mapped back through /proc/self/uid_map (the same UID in the first one).
pub fn outside_uid() -> u32 {
    let uid = euid();
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    for line in map.lines() {
        let f: Vec<u64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if let [inside, outside, count] = f[..] {
            if (inside..inside + count).contains(&u64::from(uid)) {
                return (outside + u64::from(uid) - inside) as u32;
            }
        }
    }
    uid
}

/// Moves this process into a new user namespace in which it is root (UID
/// and GID 0 mapped to its own): it then holds every capability over the
/// namespaces it makes, and none outside them. The process must still be
/// single-threaded (call it first thing in `main`).
pub fn unshare_user_as_root() -> io::Result<()> {
    // SAFETY: getegid cannot fail.
    let (uid, gid) = (euid(), unsafe { libc::getegid() });
    // SAFETY: plain syscall with a valid flag.
    cvt_i(unsafe { libc::unshare(libc::CLONE_NEWUSER) })?;
    // an unprivileged process may map only itself, and its group only
    // once it gives up setgroups
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("0 {uid} 1"))?;
    std::fs::write("/proc/self/gid_map", format!("0 {gid} 1"))?;
    Ok(())
}

/// The inode of a process's user namespace (self for None).
pub fn userns_inode(pid: Option<u32>) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let p = pid.map_or("/proc/self/ns/user".to_string(), |p| format!("/proc/{p}/ns/user"));
    Ok(std::fs::metadata(p)?.ino())
}

/// Moves this process into the user namespace of another process (one of
/// the same user's, or root's): single-threaded processes only.
pub fn enter_userns_of(pid: u32) -> io::Result<()> {
    let f = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
    // SAFETY: setns takes a descriptor and a flag; no memory is passed.
    cvt_i(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWUSER) }).map(drop)
}

/// What keeps an unprivileged user from making a user namespace, as the
/// sysctl that says so and its value (None when nothing does).
pub fn userns_blocker() -> Option<(&'static str, String)> {
    userns_blocker_from(|p| std::fs::read_to_string(p).ok().map(|v| v.trim().to_string()))
}

/// [`userns_blocker`] over the sysctl files as `read` gives them (None:
/// no such file on this kernel).
pub fn userns_blocker_from(read: impl Fn(&str) -> Option<String>) -> Option<(&'static str, String)> {
    if let Some(v) = read("/proc/sys/kernel/unprivileged_userns_clone") {
        if v == "0" {
            return Some(("kernel.unprivileged_userns_clone", v));
        }
    }
    if let Some(v) = read("/proc/sys/user/max_user_namespaces") {
        if v == "0" {
            return Some(("user.max_user_namespaces", v));
        }
    }
    if let Some(v) = read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") {
        if v != "0" {
            return Some(("kernel.apparmor_restrict_unprivileged_userns", v));
        }
    }
    None
}
