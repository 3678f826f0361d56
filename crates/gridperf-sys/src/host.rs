//! The host: its name, and the processes gridperf started.

use super::*;

/// (sysname, nodename, release, version, machine) from uname(2).
pub fn uname() -> io::Result<[String; 5]> {
    let mut u = MaybeUninit::<libc::utsname>::zeroed();
    // SAFETY: u is a valid buffer for one utsname.
    cvt_i(unsafe { libc::uname(u.as_mut_ptr()) })?;
    // SAFETY: uname succeeded and filled it.
    let u = unsafe { u.assume_init() };
    let s = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Ok([s(&u.sysname), s(&u.nodename), s(&u.release), s(&u.version), s(&u.machine)])
}

/// Sends a signal to a process.
pub fn signal(pid: u32, sig: i32) -> io::Result<()> {
    // SAFETY: plain kill(2) on a pid we were given.
    cvt_i(unsafe { libc::kill(pid as libc::pid_t, sig) }).map(drop)
}

/// Collects the exit status of a child of this process that has ended,
/// without waiting (a no-op for a process that is not our child, or runs).
pub fn reap(pid: u32) {
    let mut status = 0;
    // SAFETY: waitpid writes the status to a valid int; WNOHANG never blocks.
    unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
}
