//! CPU placement, CPU time, and what held a thread up (run-queue wait, steal).

use super::*;

/// Pins the calling thread to the given CPUs.
pub fn set_thread_affinity(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes within it for cpu < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            if c >= libc::CPU_SETSIZE as usize {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("CPU {c} is out of range")));
            }
            libc::CPU_SET(c, &mut set);
        }
        cvt_i(libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)).map(drop)
    }
}

/// Sets the calling thread's nice value (a user may raise it, never lower
/// it below where it is without CAP_SYS_NICE); threads it starts inherit it.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: gettid and setpriority take plain integers.
    let tid = unsafe { libc::gettid() };
    cvt_i(unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) }).map(drop)
}

/// The calling thread's nice value.
pub fn thread_nice() -> io::Result<i32> {
    // SAFETY: gettid and getpriority take plain integers; errno is this
    // thread's, cleared first as getpriority may return -1 as a value.
    unsafe {
        let tid = libc::gettid();
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        if n == -1 && *libc::__errno_location() != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n)
    }
}

/// The CPUs the calling thread may run on.
pub fn thread_affinity() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data, filled by the kernel.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        cvt_i(libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set))?;
        Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect())
    }
}

/// The CPU the calling thread is running on right now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments; returns -1 on error.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

/// CPU time (user, system) used by the whole process so far, in nanoseconds.
pub fn process_cpu_time_ns() -> (u64, u64) {
    cpu_time_ns(libc::RUSAGE_SELF)
}

/// CPU time (user, system) used by the calling thread so far, in nanoseconds.
pub fn thread_cpu_time_ns() -> (u64, u64) {
    cpu_time_ns(libc::RUSAGE_THREAD)
}

/// The calling thread's time on a CPU so far (CLOCK_THREAD_CPUTIME_ID,
/// what the scheduler charges it: the kernel's work done in its system
/// calls too), in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn cpu_time_ns(who: libc::c_int) -> (u64, u64) {
    let mut ru = MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: ru is a valid buffer for one rusage.
    let ok = unsafe { libc::getrusage(who, ru.as_mut_ptr()) } == 0;
    if !ok {
        return (0, 0);
    }
    // SAFETY: getrusage succeeded and filled it.
    let ru = unsafe { ru.assume_init() };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    (ns(ru.ru_utime), ns(ru.ru_stime))
}

/// Where a thread's time went, and the machine's CPUs' steal: what tells
/// why a thread did not run when it asked to. Keeps its /proc files open
/// (a reading is two preads).
pub struct SchedProbe {
    schedstat: Option<std::fs::File>,
    stat: Option<std::fs::File>,
    ticks_per_s: u64,
    buf: Vec<u8>,
}

/// One reading of a [`SchedProbe`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedSample {
    /// The thread's time on a CPU, and waiting on a run queue for one, ns
    /// (None where the kernel keeps no schedstats).
    pub ran_ns: Option<u64>,
    pub waited_ns: Option<u64>,
    /// Each CPU's steal (its virtual CPU not running: the hypervisor ran
    /// something else), ns, at the resolution of /proc/stat (a clock tick).
    pub steal_ns: Vec<u64>,
    /// All CPUs' idle time together, ns, at the same resolution.
    pub idle_ns: u64,
    /// Each CPU's idle time (idle and iowait), ns, at the same resolution.
    pub cpu_idle_ns: Vec<u64>,
}

impl SchedProbe {
    /// For the calling thread.
    pub fn for_this_thread() -> SchedProbe {
        // SAFETY: sysconf reads a constant.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        SchedProbe {
            schedstat: std::fs::File::open("/proc/thread-self/schedstat").ok(),
            stat: std::fs::File::open("/proc/stat").ok(),
            ticks_per_s: if ticks > 0 { ticks as u64 } else { 100 },
            buf: vec![0; 64 * 1024],
        }
    }

    /// The tick of /proc/stat's figures, ns.
    pub fn tick_ns(&self) -> u64 {
        1_000_000_000 / self.ticks_per_s.max(1)
    }

    pub fn sample(&mut self) -> SchedSample {
        use std::os::unix::fs::FileExt;
        let mut out = SchedSample::default();
        if let Some(f) = &self.schedstat {
            if let Ok(n) = f.read_at(&mut self.buf, 0) {
                let text = String::from_utf8_lossy(&self.buf[..n]);
                let mut it = text.split_whitespace().map(|v| v.parse::<u64>().ok());
                out.ran_ns = it.next().flatten();
                out.waited_ns = it.next().flatten();
            }
        }
        if let Some(f) = &self.stat {
            if let Ok(n) = f.read_at(&mut self.buf, 0) {
                let text = String::from_utf8_lossy(&self.buf[..n]);
                let m = parse_machine_times(&text, self.ticks_per_s);
                out.steal_ns = m.steal_ns;
                out.cpu_idle_ns = m.idle_ns;
                out.idle_ns = parse_idle(&text, self.ticks_per_s);
            }
        }
        out
    }
}

/// All CPUs' idle time together from /proc/stat's text (the `cpu` line's
/// fourth figure, in clock ticks), ns.
pub fn parse_idle(stat: &str, ticks_per_s: u64) -> u64 {
    stat.lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        .saturating_mul(1_000_000_000 / ticks_per_s.max(1))
}

/// Each CPU's steal from /proc/stat's text (`cpuN user nice system idle
/// iowait irq softirq steal ...`, in clock ticks), ns.
pub fn parse_steal(stat: &str, ticks_per_s: u64) -> Vec<u64> {
    parse_machine_times(stat, ticks_per_s).steal_ns
}

/// The whole machine's CPU time from /proc/stat, and its runnable tasks: what
/// tells whether other tasks shared the machine with a measurement.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MachineTimes {
    /// Each CPU's busy time (user, nice, system, irq, softirq), ns.
    pub busy_ns: Vec<u64>,
    /// Each CPU's idle time (idle, iowait), ns.
    pub idle_ns: Vec<u64>,
    /// Each CPU's steal, ns.
    pub steal_ns: Vec<u64>,
    /// Tasks runnable right now (procs_running, this reader included).
    pub procs_running: u64,
}

/// The machine's CPU times now (empty where /proc/stat cannot be read).
pub fn machine_times() -> MachineTimes {
    // SAFETY: sysconf reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    std::fs::read_to_string("/proc/stat")
        .map(|t| parse_machine_times(&t, if ticks > 0 { ticks as u64 } else { 100 }))
        .unwrap_or_default()
}

/// [`MachineTimes`] from /proc/stat's text (clock ticks per second given).
pub fn parse_machine_times(stat: &str, ticks_per_s: u64) -> MachineTimes {
    let tick = 1_000_000_000 / ticks_per_s.max(1);
    let mut out = MachineTimes::default();
    for l in stat.lines() {
        if l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit) {
            let v: Vec<u64> = l.split_whitespace().skip(1).map(|x| x.parse().unwrap_or(0)).collect();
            let at = |i: usize| v.get(i).copied().unwrap_or(0).saturating_mul(tick);
            // user nice system idle iowait irq softirq steal (guest is within user)
            out.busy_ns.push(at(0) + at(1) + at(2) + at(5) + at(6));
            out.idle_ns.push(at(3) + at(4));
            out.steal_ns.push(at(7));
        } else if let Some(n) = l.strip_prefix("procs_running ") {
            out.procs_running = n.trim().parse().unwrap_or(0);
        }
    }
    out
}

/// The CPU time (user and system) of a process and of every process
/// descended from it, ns, from /proc (what gridperf itself used: its lab's
/// emulator and agents are its children).
pub fn tree_cpu_time_ns(root: u32) -> u64 {
    // SAFETY: sysconf reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let tick = 1_000_000_000 / if ticks > 0 { ticks as u64 } else { 100 };
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    // pid -> (parent, utime + stime in ticks)
    let mut procs: Vec<(u32, u32, u64)> = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        if let Some((ppid, t)) = parse_pid_stat(&stat) {
            procs.push((pid, ppid, t));
        }
    }
    let mut ours = vec![root];
    let mut total = 0;
    // parents come before children in most listings, but not always: repeat until nothing is added
    loop {
        let before = ours.len();
        for &(pid, ppid, _) in &procs {
            if !ours.contains(&pid) && ours.contains(&ppid) {
                ours.push(pid);
            }
        }
        if ours.len() == before {
            break;
        }
    }
    for &(pid, _, t) in &procs {
        if ours.contains(&pid) {
            total += t;
        }
    }
    total.saturating_mul(tick)
}

/// The parent and the CPU ticks (utime + stime) in a /proc/PID/stat line.
pub fn parse_pid_stat(stat: &str) -> Option<(u32, u64)> {
    // the command name is in parentheses and may hold spaces: fields follow the last ')'
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // state ppid ... utime (14th of the line, 12th here) stime
    let ppid = f.get(1)?.parse().ok()?;
    let (u, s): (u64, u64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
    Some((ppid, u + s))
}

#[cfg(test)]
mod machine_tests {
    use super::*;

    #[test]
    fn proc_stat_is_read_per_cpu() {
        let text = "cpu  10 2 3 40 5 6 7 8 0 0\ncpu0 10 2 3 40 5 6 7 8 0 0\ncpu1 1 1 1 1 1 1 1 1 0 0\nintr 1\nprocs_running 3\nprocs_blocked 0\n";
        let m = parse_machine_times(text, 100);
        assert_eq!(m.busy_ns, vec![(10 + 2 + 3 + 6 + 7) * 10_000_000, 5 * 10_000_000]);
        assert_eq!(m.idle_ns, vec![45 * 10_000_000, 2 * 10_000_000]);
        assert_eq!(m.steal_ns, vec![80_000_000, 10_000_000]);
        assert_eq!(m.procs_running, 3);
        assert!(!machine_times().busy_ns.is_empty());
    }

    #[test]
    fn a_pid_stat_line_with_spaces_in_its_name() {
        let line = "1234 (my (odd) name) S 77 1234 1234 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 1 0 5 1 1";
        assert_eq!(parse_pid_stat(line), Some((77, 281)));
        assert_eq!(parse_pid_stat("garbage"), None);
        // burn 60 ms of CPU: the tree's time (in 10 ms ticks) holds it
        let mut x = 0u64;
        while process_cpu_time_ns().0 < 60_000_000 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        assert!(tree_cpu_time_ns(std::process::id()) >= 30_000_000);
    }
}
