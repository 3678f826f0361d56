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
                out.steal_ns = parse_steal(&String::from_utf8_lossy(&self.buf[..n]), self.ticks_per_s);
            }
        }
        out
    }
}

/// Each CPU's steal from /proc/stat's text (`cpuN user nice system idle
/// iowait irq softirq steal ...`, in clock ticks), ns.
pub fn parse_steal(stat: &str, ticks_per_s: u64) -> Vec<u64> {
    stat.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| {
            let ticks = l.split_whitespace().nth(8).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            ticks.saturating_mul(1_000_000_000 / ticks_per_s.max(1))
        })
        .collect()
}
