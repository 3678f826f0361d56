//! The only crate in gridperf that contains `unsafe`.
//!
//! Every libc call goes through [`cvt`] once and comes out as an
//! `io::Result`; callers in the other crates never see a raw return code.
//! Linux only: gridperf measures Linux hosts.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Turns a libc return value (-1 on error) into an `io::Result`.
fn cvt<T: Copy + PartialOrd + Default>(ret: T, minus_one: T) -> io::Result<T> {
    if ret == minus_one {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_i(ret: libc::c_int) -> io::Result<libc::c_int> {
    cvt(ret, -1)
}

// ---------------------------------------------------------------- memfd, sendfile

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

// ---------------------------------------------------------------- socket options

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: value lives across the call and its size is passed.
    cvt_i(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

fn getsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: value and len are valid for writes of the sizes given.
    cvt_i(unsafe { libc::getsockopt(fd, level, name, &mut value as *mut libc::c_int as *mut libc::c_void, &mut len) })?;
    Ok(value)
}

/// TCP_NOTSENT_LOWAT: a blocking write waits while the socket holds this
/// many bytes not yet sent (what is in flight is not counted).
pub fn set_notsent_lowat(sock: &impl AsRawFd, bytes: u32) -> io::Result<()> {
    setsockopt_int(sock.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, bytes.min(i32::MAX as u32) as i32)
}

const SO_BUSY_POLL: libc::c_int = 46;

/// SO_BUSY_POLL: microseconds the kernel may busy-poll the device queue on a
/// blocking receive. Raising it above net.core.busy_read needs CAP_NET_ADMIN.
pub fn set_busy_poll(sock: &impl AsRawFd, usec: u32) -> io::Result<()> {
    setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, SO_BUSY_POLL, usec as libc::c_int)
}

/// SO_SNDBUF request in bytes (the kernel doubles it and caps it at net.core.wmem_max).
pub fn set_sndbuf(sock: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, bytes.min(i32::MAX as usize) as libc::c_int)
}

/// SO_RCVBUF request in bytes (the kernel doubles it and caps it at net.core.rmem_max).
pub fn set_rcvbuf(sock: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, bytes.min(i32::MAX as usize) as libc::c_int)
}

const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

/// UDP_SEGMENT: each send of up to 64 KiB leaves as datagrams of `size`
/// payload bytes, cut by the kernel (or the device: USO) rather than one
/// system call each.
pub fn set_udp_segment(sock: &impl AsRawFd, size: u16) -> io::Result<()> {
    setsockopt_int(sock.as_raw_fd(), libc::IPPROTO_UDP, UDP_SEGMENT, size as libc::c_int)
}

/// UDP_GRO: a receive may return several datagrams of one size, back to
/// back, as one buffer.
pub fn set_udp_gro(sock: &impl AsRawFd, on: bool) -> io::Result<()> {
    setsockopt_int(sock.as_raw_fd(), libc::IPPROTO_UDP, UDP_GRO, on as libc::c_int)
}

/// Granted send buffer, as the kernel reports it (already doubled).
pub fn sndbuf(sock: &impl AsRawFd) -> io::Result<usize> {
    getsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF).map(|v| v as usize)
}

/// Granted receive buffer, as the kernel reports it (already doubled).
pub fn rcvbuf(sock: &impl AsRawFd) -> io::Result<usize> {
    getsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).map(|v| v as usize)
}

/// TCP_NODELAY state.
pub fn tcp_nodelay(sock: &impl AsRawFd) -> io::Result<bool> {
    getsockopt_int(sock.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY).map(|v| v != 0)
}

/// TCP_MAXSEG: the MSS of a connected TCP socket.
pub fn tcp_maxseg(sock: &impl AsRawFd) -> io::Result<u32> {
    getsockopt_int(sock.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_MAXSEG).map(|v| v as u32)
}

/// IP_MTU (or IPV6_MTU): the path MTU the kernel holds for a connected socket.
pub fn path_mtu(sock: &impl AsRawFd, ipv6: bool) -> io::Result<u32> {
    if ipv6 {
        getsockopt_int(sock.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_MTU).map(|v| v as u32)
    } else {
        getsockopt_int(sock.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU).map(|v| v as u32)
    }
}

/// TCP_CONGESTION: the congestion control algorithm of a TCP socket.
pub fn tcp_congestion(sock: &impl AsRawFd) -> io::Result<String> {
    let mut buf = [0u8; 32];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: buf and len are valid for writes of the sizes given.
    cvt_i(unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    })?;
    let end = buf[..len as usize].iter().position(|&b| b == 0).unwrap_or(len as usize);
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Sets TCP_CONGESTION: the congestion control algorithm of a TCP socket
/// (ENOENT when the kernel has no such algorithm; EPERM when it is not in
/// net.ipv4.tcp_allowed_congestion_control and the caller lacks CAP_NET_ADMIN).
pub fn set_tcp_congestion(sock: &impl AsRawFd, name: &str) -> io::Result<()> {
    // SAFETY: name's bytes are valid for reads of its length.
    cvt_i(unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr() as *const libc::c_void,
            name.len() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Bytes queued in a socket's send queue, not yet acknowledged (SIOCOUTQ).
pub fn outq(sock: &impl AsRawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (== SIOCOUTQ) writes one int.
    cvt_i(unsafe { libc::ioctl(sock.as_raw_fd(), libc::TIOCOUTQ, &mut n) })?;
    Ok(n as usize)
}

/// Bytes waiting in a socket's receive queue (SIOCINQ).
pub fn inq(sock: &impl AsRawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD (== SIOCINQ) writes one int.
    cvt_i(unsafe { libc::ioctl(sock.as_raw_fd(), libc::FIONREAD, &mut n) })?;
    Ok(n as usize)
}

/// Linux's `struct tcp_info` up to the fields of kernel 6.x (the kernel
/// fills as much as the caller's buffer holds; `len` says how much it did).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpInfo {
    pub state: u8,
    pub ca_state: u8,
    pub retransmits: u8,
    pub probes: u8,
    pub backoff: u8,
    pub options: u8,
    pub wscale: u8,
    pub app_limited_and_fastopen: u8,
    pub rto_us: u32,
    pub ato_us: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
    pub unacked: u32,
    pub sacked: u32,
    pub lost: u32,
    pub retrans: u32,
    pub fackets: u32,
    pub last_data_sent: u32,
    pub last_ack_sent: u32,
    pub last_data_recv: u32,
    pub last_ack_recv: u32,
    pub pmtu: u32,
    pub rcv_ssthresh: u32,
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub snd_ssthresh: u32,
    pub snd_cwnd: u32,
    pub advmss: u32,
    pub reordering: u32,
    pub rcv_rtt: u32,
    pub rcv_space: u32,
    pub total_retrans: u32,
    pub pacing_rate: u64,
    pub max_pacing_rate: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub segs_out: u32,
    pub segs_in: u32,
    pub notsent_bytes: u32,
    pub min_rtt: u32,
    pub data_segs_in: u32,
    pub data_segs_out: u32,
    pub delivery_rate: u64,
    pub busy_time_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    pub delivered: u32,
    pub delivered_ce: u32,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub dsack_dups: u32,
    pub reord_seen: u32,
    pub rcv_ooopack: u32,
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
    pub rehash: u32,
    pub total_rto: u16,
    pub total_rto_recoveries: u16,
    pub total_rto_time: u32,
}

/// TCP_INFO of a TCP socket. Fields the running kernel does not know stay zero;
/// the second value is how many bytes the kernel filled.
pub fn tcp_info(sock: &impl AsRawFd) -> io::Result<(TcpInfo, usize)> {
    let mut info = MaybeUninit::<TcpInfo>::zeroed();
    let mut len = size_of::<TcpInfo>() as libc::socklen_t;
    // SAFETY: info is a zeroed buffer of len bytes; the kernel writes at most len.
    cvt_i(unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    })?;
    // SAFETY: zero is a valid value for every field; the kernel wrote the rest.
    Ok((unsafe { info.assume_init() }, len as usize))
}

/// poll(2) for readability: which of `fds` have data (or EOF, or an error)
/// within `timeout_ms` (0 = just look, -1 = wait forever).
pub fn poll_readable(fds: &[RawFd], timeout_ms: i32) -> io::Result<Vec<bool>> {
    Ok(poll_events(fds, libc::POLLIN, timeout_ms)?.into_iter().map(|r| r != 0).collect())
}

/// poll(2) for `events` on each descriptor; each one's revents.
fn poll_events(fds: &[RawFd], events: libc::c_short, timeout_ms: i32) -> io::Result<Vec<libc::c_short>> {
    let mut pfds: Vec<libc::pollfd> = fds.iter().map(|&fd| libc::pollfd { fd, events, revents: 0 }).collect();
    loop {
        // SAFETY: pfds is a valid array of pollfd of the length given.
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
        match cvt_i(r) {
            Ok(_) => return Ok(pfds.iter().map(|p| p.revents).collect()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Whether the peer of a connected socket has shut down its sending side
/// (or the connection is gone), even with data still unread before that:
/// poll(2) for POLLRDHUP, at once.
pub fn peer_closed(fd: RawFd) -> bool {
    poll_events(&[fd], libc::POLLRDHUP, 0)
        .map_or(true, |r| r[0] & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0)
}

/// ppoll(2) for readability with a nanosecond timeout (None = wait for ever).
pub fn ppoll_readable(fds: &[RawFd], timeout_ns: Option<u64>) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> =
        fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    loop {
        // SAFETY: pfds is a valid array of the length given; tsp is null or points to ts.
        let r = unsafe { libc::ppoll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, tsp, std::ptr::null()) };
        match cvt_i(r) {
            Ok(_) => return Ok(pfds.iter().map(|p| p.revents != 0).collect()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// O_NONBLOCK on any descriptor.
pub fn set_fd_nonblocking(fd: &impl AsRawFd, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on a valid descriptor.
    unsafe {
        let flags = cvt_i(libc::fcntl(fd.as_raw_fd(), libc::F_GETFL))?;
        let flags = if on { flags | libc::O_NONBLOCK } else { flags & !libc::O_NONBLOCK };
        cvt_i(libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags)).map(drop)
    }
}

/// Runs the calling thread under SCHED_FIFO at `priority` (1-99), so that a
/// busy machine does not delay it by a scheduler slice. Needs CAP_SYS_NICE.
pub fn set_realtime(priority: i32) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: param is a valid sched_param; 0 is the calling thread.
    cvt_i(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) }).map(drop)
}

/// The highest real-time priority this process may take without
/// privilege (RLIMIT_RTPRIO, which an administrator can raise for a user in
/// /etc/security/limits.conf); 0 when it may take none.
pub fn rtprio_limit() -> u64 {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: r is a valid rlimit to write.
    if unsafe { libc::getrlimit(libc::RLIMIT_RTPRIO, &mut r) } == 0 {
        r.rlim_cur.min(99)
    } else {
        0
    }
}

/// The calling thread's timer slack (how late the kernel may wake it), in ns.
/// The default 50 us would blur the emulator's schedule.
pub fn set_timer_slack_ns(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes the value as an unsigned long.
    cvt_i(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) }).map(drop)
}

// ---------------------------------------------------------------- CPU placement

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

// ---------------------------------------------------------------- host

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

// ---------------------------------------------------------------- network namespaces and links

/// Moves the calling thread into a new, private network namespace (which holds
/// only a `lo` that is down). Needs CAP_SYS_ADMIN. Sockets opened afterwards
/// by this thread live in the new namespace.
pub fn unshare_netns() -> io::Result<()> {
    // SAFETY: plain syscall with a valid flag.
    cvt_i(unsafe { libc::unshare(libc::CLONE_NEWNET) }).map(drop)
}

const SIOCGIFFLAGS: libc::c_ulong = 0x8913;
const SIOCSIFFLAGS: libc::c_ulong = 0x8914;
const SIOCGIFMTU: libc::c_ulong = 0x8921;
const SIOCSIFMTU: libc::c_ulong = 0x8922;
const SIOCGIFTXQLEN: libc::c_ulong = 0x8942;

#[repr(C)]
struct IfReq {
    name: [u8; 16],
    // The kernel's union: flags (short) or mtu (int); 24 bytes of room.
    data: [u8; 24],
}

fn ifreq(name: &str) -> io::Result<IfReq> {
    if name.is_empty() || name.len() >= 16 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad interface name {name:?}")));
    }
    let mut req = IfReq { name: [0; 16], data: [0; 24] };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    Ok(req)
}

fn ioctl_sock() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call.
    let fd = cvt_i(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fresh descriptor, now owned.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets an interface's MTU (SIOCSIFMTU) in the calling thread's namespace.
pub fn set_link_mtu(name: &str, mtu: u32) -> io::Result<()> {
    let sock = ioctl_sock()?;
    let mut req = ifreq(name)?;
    req.data[..4].copy_from_slice(&(mtu as i32).to_ne_bytes());
    // SAFETY: req is a valid ifreq-sized buffer.
    cvt_i(unsafe { libc::ioctl(sock.as_raw_fd(), SIOCSIFMTU, &mut req) }).map(drop)
}

/// Sets an interface's transmit queue length in packets in the calling
/// thread's namespace; for a TUN device, the ring its host's packets wait in
/// until the reader takes them. By rtnetlink (RTM_NEWLINK, IFLA_TXQLEN),
/// which asks for CAP_NET_ADMIN over the namespace: the SIOCSIFTXQLEN ioctl
/// asks for it in the machine's first user namespace, which a rootless lab
/// does not have.
pub fn set_link_txqueuelen(name: &str, len: u32) -> io::Result<()> {
    const IFLA_TXQLEN: u16 = 13;
    ifreq(name)?;
    let cname = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a name"))?;
    // SAFETY: cname is a valid C string.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    // nlmsghdr (16) + ifinfomsg (16) + rtattr (4) + u32 (4)
    let mut msg = [0u8; 40];
    msg[0..4].copy_from_slice(&40u32.to_ne_bytes());
    msg[4..6].copy_from_slice(&libc::RTM_NEWLINK.to_ne_bytes());
    msg[6..8].copy_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16).to_ne_bytes());
    msg[8..12].copy_from_slice(&1u32.to_ne_bytes());
    msg[16] = libc::AF_UNSPEC as u8;
    msg[20..24].copy_from_slice(&(index as i32).to_ne_bytes());
    msg[32..34].copy_from_slice(&8u16.to_ne_bytes());
    msg[34..36].copy_from_slice(&IFLA_TXQLEN.to_ne_bytes());
    msg[36..40].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: plain socket(2) call.
    let fd =
        cvt_i(unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) })?;
    // SAFETY: fresh descriptor, now owned.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // the kernel answers at once; a deadline all the same
    let tv = libc::timeval { tv_sec: 2, tv_usec: 0 };
    // SAFETY: tv lives across the call and its size is passed.
    cvt_i(unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const libc::timeval as *const libc::c_void,
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    })?;
    // SAFETY: msg is valid for reads of its length; a NULL address sends to the kernel.
    let n = unsafe { libc::send(sock.as_raw_fd(), msg.as_ptr() as *const libc::c_void, msg.len(), 0) };
    cvt(n, -1)?;
    let mut ack = [0u8; 256];
    // SAFETY: ack is valid for writes of its length.
    let n = cvt(unsafe { libc::recv(sock.as_raw_fd(), ack.as_mut_ptr() as *mut libc::c_void, ack.len(), 0) }, -1)?;
    // an NLMSG_ERROR message: its header, then the error number (0: done)
    let kind = u16::from_ne_bytes([ack[4], ack[5]]);
    if n < 20 || kind != libc::NLMSG_ERROR as u16 {
        return Err(io::Error::other(format!("rtnetlink: unexpected answer of {n} bytes, type {kind}")));
    }
    match i32::from_ne_bytes([ack[16], ack[17], ack[18], ack[19]]) {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(-e)),
    }
}

/// An interface's transmit queue length (SIOCGIFTXQLEN).
pub fn link_txqueuelen(name: &str) -> io::Result<u32> {
    let sock = ioctl_sock()?;
    let mut req = ifreq(name)?;
    // SAFETY: req is a valid ifreq-sized buffer.
    cvt_i(unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGIFTXQLEN, &mut req) })?;
    Ok(i32::from_ne_bytes([req.data[0], req.data[1], req.data[2], req.data[3]]) as u32)
}

/// An interface's MTU (SIOCGIFMTU).
pub fn link_mtu(name: &str) -> io::Result<u32> {
    let sock = ioctl_sock()?;
    let mut req = ifreq(name)?;
    // SAFETY: req is a valid ifreq-sized buffer.
    cvt_i(unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGIFMTU, &mut req) })?;
    let mut b = [0u8; 4];
    b.copy_from_slice(&req.data[..4]);
    Ok(i32::from_ne_bytes(b) as u32)
}

/// Brings an interface up (IFF_UP via SIOCSIFFLAGS).
pub fn set_link_up(name: &str) -> io::Result<()> {
    let sock = ioctl_sock()?;
    let mut req = ifreq(name)?;
    // SAFETY: req is a valid ifreq-sized buffer.
    cvt_i(unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGIFFLAGS, &mut req) })?;
    let flags = i16::from_ne_bytes([req.data[0], req.data[1]]) | libc::IFF_UP as i16;
    req.data[..2].copy_from_slice(&flags.to_ne_bytes());
    // SAFETY: as above.
    cvt_i(unsafe { libc::ioctl(sock.as_raw_fd(), SIOCSIFFLAGS, &mut req) }).map(drop)
}

/// Sets an interface's IPv4 address and netmask (SIOCSIFADDR, SIOCSIFNETMASK);
/// the kernel adds the connected route.
pub fn set_link_ipv4(name: &str, addr: std::net::Ipv4Addr, prefix: u8) -> io::Result<()> {
    const SIOCSIFADDR: libc::c_ulong = 0x8916;
    const SIOCSIFNETMASK: libc::c_ulong = 0x891c;
    if prefix > 32 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("prefix /{prefix} is longer than 32")));
    }
    let sock = ioctl_sock()?;
    let sockaddr = |a: std::net::Ipv4Addr| {
        // struct sockaddr_in: family (u16), port (u16), address (4 bytes), zero
        let mut d = [0u8; 24];
        d[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        d[4..8].copy_from_slice(&a.octets());
        d
    };
    let mut req = ifreq(name)?;
    req.data = sockaddr(addr);
    // SAFETY: req is a valid ifreq-sized buffer.
    cvt_i(unsafe { libc::ioctl(sock.as_raw_fd(), SIOCSIFADDR, &mut req) })?;
    let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix as u32) };
    let mut req = ifreq(name)?;
    req.data = sockaddr(std::net::Ipv4Addr::from(mask));
    // SAFETY: as above.
    cvt_i(unsafe { libc::ioctl(sock.as_raw_fd(), SIOCSIFNETMASK, &mut req) }).map(drop)
}

// ---------------------------------------------------------------- TUN

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const TUNSETVNETHDRSZ: libc::c_ulong = 0x4004_54d8;
const IFF_TUN: i16 = 0x0001;
const IFF_NO_PI: i16 = 0x1000;
const IFF_VNET_HDR: i16 = 0x4000;
/// TUNSETOFFLOAD flags: checksum offload, TSO for IPv4 and IPv6, and UDP
/// segmentation offload (USO, Linux 6.2) for IPv4 and IPv6.
pub const TUN_F_CSUM: u32 = 0x01;
pub const TUN_F_TSO4: u32 = 0x02;
pub const TUN_F_TSO6: u32 = 0x04;
pub const TUN_F_USO4: u32 = 0x20;
pub const TUN_F_USO6: u32 = 0x40;
/// The size of `struct virtio_net_hdr` that precedes every packet when
/// offloads are on.
pub const VNET_HDR_LEN: usize = 10;

/// Creates a TUN device named `name` in the calling thread's network
/// namespace and returns its descriptor (IP packets, no packet-info
/// header). With `offload`, every packet carries a virtio-net header and
/// the kernel may hand over TCP super-packets of up to 64 KiB with
/// checksums left to do, and UDP ones (a UDP_SEGMENT send) where the kernel
/// has USO.
pub fn tun_create(name: &str, offload: bool) -> io::Result<OwnedFd> {
    let path = CString::new("/dev/net/tun").expect("no NUL in a literal");
    // SAFETY: path is a valid C string.
    let fd = cvt_i(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) })?;
    // SAFETY: a fresh descriptor, now owned.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = ifreq(name)?;
    let flags = IFF_TUN | IFF_NO_PI | if offload { IFF_VNET_HDR } else { 0 };
    req.data[..2].copy_from_slice(&flags.to_ne_bytes());
    // SAFETY: req is a valid ifreq-sized buffer.
    cvt_i(unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req) })?;
    if offload {
        let len = VNET_HDR_LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads one int.
        cvt_i(unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETVNETHDRSZ, &len) })?;
        let tso = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
        // SAFETY: TUNSETOFFLOAD takes the flags by value.
        let uso =
            unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETOFFLOAD, (tso | TUN_F_USO4 | TUN_F_USO6) as libc::c_ulong) };
        if uso < 0 {
            // a kernel before 6.2: UDP arrives segment by segment
            // SAFETY: as above.
            cvt_i(unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETOFFLOAD, tso as libc::c_ulong) })?;
        }
    }
    Ok(fd)
}

// ---------------------------------------------------------------- named network namespaces

/// Where named namespaces live, as `ip netns` keeps them.
pub const NETNS_DIR: &str = "/run/netns";

/// A namespace's file: a name under /run/netns, or a namespace a process
/// holds open, `/proc/PID/fd/N` (the rootless lab's, see [`netns_hold`]).
fn netns_path(name: &str) -> io::Result<CString> {
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
fn held_path(name: &str) -> bool {
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

// ---------------------------------------------------------------- user namespaces

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

/// Creates a named network namespace that `ip netns exec NAME ...` can use:
/// a new namespace bind-mounted on /run/netns/NAME. Needs CAP_SYS_ADMIN.
/// Fails if the name is taken.
pub fn netns_create(name: &str) -> io::Result<()> {
    let path = netns_path(name)?;
    std::fs::create_dir_all(NETNS_DIR)?;
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

#[cfg(test)]
mod tests {
    #[test]
    fn steal_is_read_per_cpu_in_nanoseconds() {
        let stat = "cpu  568307 139 137772 1098996 3827 0 31994 239 0 0\n\
                    cpu0 269567 69 73721 556805 910 0 20047 108 0 0\n\
                    cpu1 298739 69 64051 542191 2917 0 11947 131 0 0\nintr 1 2 3\n";
        assert_eq!(parse_steal(stat, 100), vec![1_080_000_000, 1_310_000_000]);
        assert_eq!(parse_steal("cpu0 1 2 3\n", 100), vec![0], "a short line: no steal column, none counted");
    }

    #[test]
    fn a_threads_time_and_the_steal_are_read_here() {
        let mut p = SchedProbe::for_this_thread();
        let a = p.sample();
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(30) {}
        let b = p.sample();
        assert!(!b.steal_ns.is_empty(), "a steal figure per CPU");
        if let (Some(r0), Some(r1)) = (a.ran_ns, b.ran_ns) {
            assert!(r1 >= r0 + 10_000_000, "30 ms of spinning shows in the thread's run time: {r0} -> {r1}");
        }
    }

    use super::*;

    #[test]
    fn held_namespace_paths() {
        assert!(held_path("/proc/123/fd/7"));
        for bad in
            ["/proc/123/fd/", "/proc/self/fd/7", "/proc/1/fd/7/..", "/run/netns/x", "proc/1/fd/2", "/proc/1/ns/net"]
        {
            assert!(!held_path(bad), "{bad}");
            assert!(netns_path(bad).is_err(), "{bad}");
        }
        assert_eq!(netns_path("/proc/123/fd/7").expect("held").to_str(), Ok("/proc/123/fd/7"));
        assert!(netns_delete("/proc/123/fd/7").is_ok(), "a held namespace goes with its holder");
    }

    #[test]
    fn each_userns_blocker_is_named() {
        let with = |file: &'static str, value: &'static str| {
            userns_blocker_from(move |p| (p.ends_with(file)).then(|| value.to_string()))
        };
        assert_eq!(with("unprivileged_userns_clone", "0"), Some(("kernel.unprivileged_userns_clone", "0".into())));
        assert_eq!(with("unprivileged_userns_clone", "1"), None);
        assert_eq!(with("max_user_namespaces", "0"), Some(("user.max_user_namespaces", "0".into())));
        assert_eq!(with("max_user_namespaces", "96365"), None);
        assert_eq!(
            with("apparmor_restrict_unprivileged_userns", "1"),
            Some(("kernel.apparmor_restrict_unprivileged_userns", "1".into()))
        );
        assert_eq!(with("apparmor_restrict_unprivileged_userns", "0"), None);
        assert_eq!(userns_blocker_from(|_| None), None, "a kernel without these files blocks nothing by them");
    }

    #[test]
    fn outside_uid_in_the_first_namespace_is_the_uid() {
        if in_initial_userns() {
            assert_eq!(outside_uid(), euid());
        }
    }

    #[test]
    fn memfd_holds_the_pattern() {
        let fd = memfd_pattern(70_000).expect("memfd");
        let f = std::fs::File::from(fd);
        use std::os::unix::fs::FileExt;
        let mut all = vec![0u8; 70_000];
        f.read_exact_at(&mut all, 0).expect("read back");
        for (i, b) in all.iter().enumerate() {
            assert_eq!(*b, pattern_byte(i), "byte {i}");
        }
    }

    #[test]
    fn affinity_roundtrip() {
        let before = thread_affinity().expect("getaffinity");
        assert!(!before.is_empty());
        set_thread_affinity(&[before[0]]).expect("setaffinity");
        assert_eq!(thread_affinity().expect("get"), vec![before[0]]);
        set_thread_affinity(&before).expect("restore");
        assert!(set_thread_affinity(&[100_000]).is_err());
    }

    #[test]
    fn tcp_socket_options_read_back() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (_s, _) = l.accept().expect("accept");
        assert!(tcp_maxseg(&c).expect("mss") > 0);
        assert!(!tcp_congestion(&c).expect("cc").is_empty());
        set_sndbuf(&c, 100_000).expect("sndbuf");
        // Linux doubles the request (and caps it at wmem_max)
        let granted = sndbuf(&c).expect("sndbuf");
        assert!(granted >= 100_000, "granted {granted}");
        let (info, len) = tcp_info(&c).expect("tcp_info");
        assert!(len >= 104);
        assert_eq!(info.state, 1, "ESTABLISHED");
        assert!(path_mtu(&c, false).expect("mtu") >= 1280);
        assert_eq!(outq(&c).expect("outq"), 0);
        assert_eq!(inq(&c).expect("inq"), 0);
    }

    /// How many bytes a blocking writer gets into a connection whose reader
    /// reads nothing, before a 300 ms send timeout: with TCP_NOTSENT_LOWAT
    /// at `lowat` (or none), a 16 MiB send buffer, a 64 KiB receive buffer
    /// (about 128 KiB held, as the kernel doubles it).
    fn written_before_blocking(lowat: Option<u32>) -> (usize, usize) {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let a = l.local_addr().expect("addr");
        let reader = std::net::TcpStream::connect(a).expect("connect");
        // set after the handshake: it still caps what the reader's socket holds (and stops autotuning)
        set_rcvbuf(&reader, 64 << 10).expect("rcvbuf");
        let (w, _) = l.accept().expect("accept");
        set_sndbuf(&w, 16 << 20).ok();
        let held_by_buffer = sndbuf(&w).unwrap_or(0);
        if let Some(b) = lowat {
            set_notsent_lowat(&w, b).expect("lowat");
        }
        w.set_write_timeout(Some(std::time::Duration::from_millis(300))).expect("timeout");
        let chunk = vec![7u8; 256 << 10];
        let mut total = 0;
        let mut w = &w;
        while total < 64 << 20 {
            match w.write(&chunk) {
                Ok(n) => total += n,
                Err(_) => break,
            }
        }
        drop(reader);
        (total, held_by_buffer)
    }

    #[test]
    fn notsent_lowat_stops_a_blocking_writer_near_the_mark_not_at_the_send_buffer() {
        let (free, buffer) = written_before_blocking(None);
        if buffer < 4 << 20 {
            eprintln!(
                "\n*** SKIPPED notsent_lowat_...: net.core.wmem_max lets a send buffer hold only {buffer} bytes, \
                 too few to tell the mark from the buffer ***\n"
            );
            return;
        }
        let (held, _) = written_before_blocking(Some(256 << 10));
        // unread: the reader's buffer holds ~128 KiB, then the mark and a chunk being written
        assert!(held < 2 << 20, "with a 256 KiB mark the writer got {held} bytes in");
        assert!(
            free > 2 << 20,
            "without it a {buffer}-byte send buffer took only {free} bytes: the control proves nothing"
        );
    }

    #[test]
    fn preallocate_on_tmpfs_extends_without_filling_and_refuses_what_cannot_fit() {
        use std::os::unix::fs::MetadataExt;
        let path = std::path::Path::new("/dev/shm").join(format!("gridperf-sys-prealloc-{}", std::process::id()));
        let Ok(f) = std::fs::OpenOptions::new().create_new(true).read(true).write(true).open(&path) else {
            eprintln!("SKIPPED preallocate_on_tmpfs_...: no /dev/shm here");
            return;
        };
        let Some(free) = tmpfs_free(&f) else {
            let _ = std::fs::remove_file(&path);
            eprintln!("SKIPPED preallocate_on_tmpfs_...: /dev/shm is not a tmpfs here");
            return;
        };
        preallocate(&f, 64 << 20).expect("preallocate");
        let m = f.metadata().expect("metadata");
        let (len, blocks) = (m.len(), m.blocks());
        // more than the tmpfs has free: ENOSPC
        let big = free.map(|free| preallocate(&f, free + (1 << 30)));
        let _ = std::fs::remove_file(&path);
        assert_eq!(len, 64 << 20);
        assert!(blocks < 1024, "tmpfs pages were filled ahead of the writes: {blocks} blocks of 512 bytes");
        if let Some(big) = big {
            assert_eq!(big.expect_err("too big").raw_os_error(), Some(libc::ENOSPC));
        }
    }
}

#[cfg(test)]
mod root_tests {
    //! Need root: ignored unless asked for (`--ignored`, as root); .ci/run runs them.
    use super::*;

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    #[ignore = "needs root, for a named network namespace: .ci/run runs it with --ignored"]
    fn named_namespace_with_a_tun_device() {
        assert!(is_root(), "needs root");
        let name = format!("gpsys-test-{}", std::process::id());
        netns_create(&name).expect("create");
        assert!(netns_exists(&name));
        assert!(netns_create(&name).is_err(), "a name is taken once");
        let tun = in_netns(&name, || {
            let fd = tun_create("gp0", true)?;
            set_link_mtu("gp0", 1500)?;
            set_link_ipv4("gp0", std::net::Ipv4Addr::new(10, 77, 0, 1), 24)?;
            set_link_up("gp0")?;
            set_link_up("lo")?;
            assert_eq!(link_mtu("gp0")?, 1500);
            set_link_txqueuelen("gp0", 1234)?;
            assert_eq!(link_txqueuelen("gp0")?, 1234);
            Ok(fd)
        })
        .expect("tun in the namespace");
        // the device is not in this namespace
        assert!(link_mtu("gp0").is_err());
        drop(tun);
        netns_delete(&name).expect("delete");
        assert!(!netns_exists(&name));
        assert!(netns_create("bad/name").is_err());
    }
}

// ---------------------------------------------------------------- bulk streams

/// Opens `path` relative to the directory `dir`, never leaving it:
/// openat2 with RESOLVE_BENEATH (no `..` above it, no absolute path, no
/// symbolic link that points out of it) and RESOLVE_NO_MAGICLINKS
/// (/proc/PID/fd links). `flags` are open(2)'s (O_CLOEXEC is added).
pub fn open_beneath(dir: &impl AsRawFd, path: &str, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let c = CString::new(path).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: open_how is plain integers; all zero is a valid value
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 { u64::from(mode) } else { 0 };
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
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
    let c = CString::new(path).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: open_how is plain integers; all zero is a valid value
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_NO_SYMLINKS;
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

/// If the file is on a tmpfs: the bytes free there (None for a tmpfs
/// mounted with size=0, which has no limit and says 0 blocks).
fn tmpfs_free(file: &impl AsRawFd) -> Option<Option<u64>> {
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

// ---------------------------------------------------------------- packet capture

/// A packet socket (AF_PACKET, SOCK_DGRAM: the network header first, the
/// link header removed) that sees every IPv4 and IPv6 packet of this
/// network namespace, each with the kernel's receive time: `stream
/// --capture` writes them as a raw-IP pcap.
pub struct PacketSocket {
    fd: OwnedFd,
}

/// One packet a [`PacketSocket`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketMeta {
    /// Bytes placed in the buffer (at most its length: the snap length).
    pub len: usize,
    /// The packet's whole length.
    pub orig_len: usize,
    /// CLOCK_REALTIME when the kernel took it, ns.
    pub t_ns: i64,
    /// The ethertype: 0x0800 IPv4, 0x86dd IPv6.
    pub protocol: u16,
    /// PACKET_OUTGOING: sent by this host (on loopback each packet is seen
    /// once going out and once coming in).
    pub outgoing: bool,
    /// The device is a loopback (ARPHRD_LOOPBACK).
    pub loopback: bool,
}

impl PacketSocket {
    /// Opens it (needs CAP_NET_RAW in this network namespace's user namespace).
    pub fn open() -> io::Result<PacketSocket> {
        let proto = (libc::ETH_P_ALL as u16).to_be() as libc::c_int;
        // SAFETY: plain arguments
        let fd = cvt_i(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, proto) })?;
        // SAFETY: fd was just returned by socket and is owned by nobody else
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
        // a burst must not overflow it while the writer catches up: ask for 32 MiB (root may exceed rmem_max)
        if setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 32 << 20).is_err() {
            let _ = setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 32 << 20);
        }
        Ok(PacketSocket { fd })
    }

    /// The next packet within `timeout_ms` (None when none came).
    pub fn recv(&self, buf: &mut [u8], timeout_ms: i32) -> io::Result<Option<PacketMeta>> {
        if !poll_readable(&[self.fd.as_raw_fd()], timeout_ms)?[0] {
            return Ok(None);
        }
        // SAFETY: zeroed sockaddr_ll and a control buffer large enough for one timespec cmsg
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut control = [0u64; 8];
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: msghdr is plain data; every pointer set below outlives the call
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = &mut addr as *mut libc::sockaddr_ll as *mut libc::c_void;
        msg.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: msg points at valid buffers as set above
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_TRUNC | libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock { Ok(None) } else { Err(e) };
        }
        let mut t_ns = 0i64;
        // SAFETY: the CMSG macros walk the control buffer the kernel filled, within msg_controllen
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                    t_ns = ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64;
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if t_ns == 0 {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: ts is a valid timespec to write
            unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
            t_ns = ts.tv_sec * 1_000_000_000 + ts.tv_nsec;
        }
        let orig_len = n as usize;
        Ok(Some(PacketMeta {
            len: orig_len.min(buf.len()),
            orig_len,
            t_ns,
            protocol: u16::from_be(addr.sll_protocol),
            outgoing: addr.sll_pkttype == libc::PACKET_OUTGOING,
            loopback: addr.sll_hatype == libc::ARPHRD_LOOPBACK,
        }))
    }

    /// Packets the kernel received for this socket and dropped (its buffer
    /// was full) since the last call (PACKET_STATISTICS).
    pub fn drops(&self) -> io::Result<(u64, u64)> {
        let mut st = libc::tpacket_stats { tp_packets: 0, tp_drops: 0 };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: st and len are valid for the kernel to write
        cvt_i(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut st as *mut libc::tpacket_stats as *mut libc::c_void,
                &mut len,
            )
        })?;
        Ok((u64::from(st.tp_packets), u64::from(st.tp_drops)))
    }
}
