//! Socket options.

use super::*;

pub(crate) fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
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

/// A receive buffer of `bytes`: SO_RCVBUFFORCE, past net.core.rmem_max,
/// where the caller may (CAP_NET_ADMIN in the first user namespace: root),
/// else SO_RCVBUF (doubled by the kernel and capped at rmem_max).
pub fn set_rcvbuf_past_max(sock: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v)
        .or_else(|_| setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, v))
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

/// SIOCGSTAMPNS (asm-generic/sockios.h, a 64-bit timespec).
const SIOCGSTAMPNS: u64 = 0x8907;

/// When the kernel received the datagram last read from `sock`
/// (CLOCK_REALTIME, ns): SIOCGSTAMPNS. The first call turns receive
/// stamping on and, no datagram having been stamped yet, fails with
/// ENOENT: call it once before the datagrams to be timed arrive.
pub fn last_rx_stamp_ns(sock: &impl AsRawFd) -> io::Result<i64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: SIOCGSTAMPNS writes one timespec.
    cvt_i(unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGSTAMPNS as _, &mut ts) })?;
    Ok(ts.tv_sec * 1_000_000_000 + ts.tv_nsec)
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

/// ppoll(2) for readability with a nanosecond timeout (None = wait for ever);
/// a signal handler's interruption returns at once, with nothing ready.
pub fn ppoll_readable(fds: &[RawFd], timeout_ns: Option<u64>) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> =
        fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: pfds is a valid array of the length given; tsp is null or points to ts.
    let r = unsafe { libc::ppoll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, tsp, std::ptr::null()) };
    match cvt_i(r) {
        Ok(_) => Ok(pfds.iter().map(|p| p.revents != 0).collect()),
        // a signal's handler ran (a continue after a stop, say): back at
        // once, nothing ready, rather than the whole timeout again
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(vec![false; fds.len()]),
        Err(e) => Err(e),
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

/// The kernel's `struct sched_attr` (SCHED_ATTR_SIZE_VER1, 56 bytes).
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
    util_min: u32,
    util_max: u32,
}

/// Asks the fair scheduler (EEVDF, Linux 6.12 and later) for a slice of
/// `slice_ns` (0.1 to 100 ms) for the calling thread, at its nice value: a
/// thread with a short slice has an early deadline, so on waking it runs
/// before a thread with a longer one (a niced build) instead of waiting out
/// that thread's slice. Needs no privilege; an older kernel refuses it.
pub fn set_fair_slice(slice_ns: u64, nice: i32) -> io::Result<()> {
    let attr = SchedAttr {
        size: size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice,
        priority: 0,
        runtime: slice_ns,
        deadline: 0,
        period: 0,
        util_min: 0,
        util_max: 0,
    };
    // SAFETY: attr is a valid, fully initialised sched_attr of the size it
    // says; pid 0 is the calling thread; flags 0.
    cvt_i(unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) } as i32).map(drop)
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
