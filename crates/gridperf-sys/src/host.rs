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

/// The size of a memory page, bytes (4096 where sysconf cannot say).
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as u64,
        _ => 4096,
    }
}

/// Keeps the memory this process frees for its own next allocations:
/// glibc's malloc neither gives the top of its heap back (trim) nor serves
/// a block of up to 32 MiB from a mapping of its own, so a process that
/// allocates and frees the same amount over and over (the lab's emulator:
/// a packet buffer per packet, about 20,000 a second at 10 Gbit/s, freed
/// as they leave its delay line) stops faulting fresh zeroed pages in
/// for each. Its memory stays at its high-water mark. Returns whether the
/// allocator took both settings (false on a C library without mallopt).
pub fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt(3) only changes two of malloc's tunables; the
        // values are within their documented ranges (the mapping
        // threshold's maximum on 64-bit is 32 MiB).
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1 && libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

static CONTINUED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn on_sigcont(_: libc::c_int) {
    // async-signal-safe: one atomic add
    CONTINUED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Counts the times this process is continued after a stop (SIGSTOP,
/// SIGTSTP): a handler for SIGCONT, which is delivered on every continue.
/// Slow system calls are restarted (SA_RESTART), but a ppoll(2) or
/// nanosleep(2) it interrupts returns EINTR. See [`continued`].
pub fn count_continues() -> io::Result<()> {
    // SAFETY: a zeroed sigaction with a handler that only adds to an
    // atomic; sigemptyset on its mask.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigcont as *const () as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        cvt_i(libc::sigaction(libc::SIGCONT, &sa, std::ptr::null_mut())).map(drop)
    }
}

/// How many times this process was continued after a stop since
/// [`count_continues`] (0 without it).
pub fn continued() -> u64 {
    CONTINUED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Collects the exit status of a child of this process that has ended,
/// without waiting (a no-op for a process that is not our child, or runs).
pub fn reap(pid: u32) {
    let mut status = 0;
    // SAFETY: waitpid writes the status to a valid int; WNOHANG never blocks.
    unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
}

#[cfg(test)]
mod continue_tests {
    #[test]
    fn a_continue_is_counted() -> std::io::Result<()> {
        super::count_continues()?;
        let before = super::continued();
        // SIGCONT to a running process is delivered as any signal is
        super::signal(std::process::id(), libc::SIGCONT)?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while super::continued() == before {
            assert!(std::time::Instant::now() < deadline, "the continue was not counted");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(super::continued(), before + 1);
        Ok(())
    }
}
