//! The TCP sockets of the calling thread's network namespace, by
//! sock_diag(7): aborting them all (SOCK_DESTROY) before a lab's namespaces
//! go. A socket whose process ended with data unsent (a copy killed
//! mid-transfer) lives on as an orphan after its lab is gone: it holds its
//! buffers (hundreds of megabytes at 10 Gbit/s) in the machine-wide TCP
//! memory and retries into a namespace without links for minutes. Past
//! tcp_mem's pressure mark the kernel clamps every TCP window on the
//! machine to four segments, so the runs that come after measure that.

use super::*;

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const SOCK_DESTROY: u16 = 21;
/// Every TCP state but LISTEN (10), TIME_WAIT (6) and NEW_SYN_RECV (12):
/// the sockets that may hold data.
const STATES: u32 = 0xffe & !(1 << 10) & !(1 << 6);
const NLMSG_HDR: usize = 16;
/// inet_diag_req_v2: family, protocol, ext, pad, states (4), then the
/// socket's id (48: ports, addresses, interface, cookie).
const REQ_LEN: usize = 56;
const ID_LEN: usize = 48;

/// The TCP sockets of a namespace that may hold data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpSockets {
    pub sockets: u32,
    /// Of them, orphans (no process holds them any more).
    pub orphans: u32,
    /// The bytes they hold unsent or unread (send and receive queues).
    pub queued_bytes: u64,
}

/// The TCP sockets of the calling thread's network namespace that may
/// hold data (not listeners, not TIME_WAIT).
pub fn tcp_sockets() -> io::Result<TcpSockets> {
    walk(false)
}

/// Aborts every TCP socket of the calling thread's network namespace that
/// may hold data, as `ss -K` does: each is reset and its buffers freed at
/// once (one's reset may end its peer first). Returns what they were.
/// Needs CAP_NET_ADMIN over the namespace (a rootless lab's user namespace
/// gives it) and a kernel with CONFIG_INET_DIAG_DESTROY (EOPNOTSUPP
/// otherwise).
pub fn abort_tcp_sockets() -> io::Result<TcpSockets> {
    walk(true)
}

fn walk(abort: bool) -> io::Result<TcpSockets> {
    let sock = diag_socket()?;
    let mut out = TcpSockets::default();
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        for (id, orphan, queued) in dump(&sock, family)? {
            out.sockets += 1;
            out.orphans += u32::from(orphan);
            out.queued_bytes += queued;
            if !abort {
                continue;
            }
            match request(&sock, SOCK_DESTROY, libc::NLM_F_REQUEST | libc::NLM_F_ACK, family, &id)
                .and_then(|()| ack(&sock))
            {
                // ENOENT: it ended since the dump (its peer's abort reset it)
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(out)
}

fn diag_socket() -> io::Result<OwnedFd> {
    links::netlink_socket(libc::NETLINK_SOCK_DIAG)
}

/// Sends one inet_diag_req_v2 for TCP sockets of `family` (and `id`).
fn request(sock: &OwnedFd, kind: u16, flags: libc::c_int, family: u8, id: &[u8; ID_LEN]) -> io::Result<()> {
    let mut msg = [0u8; NLMSG_HDR + REQ_LEN];
    msg[0..4].copy_from_slice(&((NLMSG_HDR + REQ_LEN) as u32).to_ne_bytes());
    msg[4..6].copy_from_slice(&kind.to_ne_bytes());
    msg[6..8].copy_from_slice(&(flags as u16).to_ne_bytes());
    msg[8..12].copy_from_slice(&1u32.to_ne_bytes());
    msg[16] = family;
    msg[17] = libc::IPPROTO_TCP as u8;
    msg[20..24].copy_from_slice(&STATES.to_ne_bytes());
    msg[24..24 + ID_LEN].copy_from_slice(id);
    // SAFETY: msg is valid for reads of its length; a NULL address sends to the kernel.
    let n = unsafe { libc::send(sock.as_raw_fd(), msg.as_ptr() as *const libc::c_void, msg.len(), 0) };
    cvt(n, -1).map(drop)
}

fn recv(sock: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for writes of its length.
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
    cvt(n, -1).map(|n| n as usize)
}

fn ack(sock: &OwnedFd) -> io::Result<()> {
    links::netlink_ack(sock, "sock_diag")
}

/// Every TCP socket of `family` in [`STATES`]: its id, whether it is an
/// orphan (inode 0), and the bytes in its queues.
fn dump(sock: &OwnedFd, family: u8) -> io::Result<Vec<([u8; ID_LEN], bool, u64)>> {
    request(sock, SOCK_DIAG_BY_FAMILY, libc::NLM_F_REQUEST | libc::NLM_F_DUMP, family, &[0; ID_LEN])?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = recv(sock, &mut buf)?;
        let mut at = 0;
        while at + NLMSG_HDR <= n {
            let len = u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]) as usize;
            let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
            if len < NLMSG_HDR || at + len > n {
                return Err(io::Error::other(format!("sock_diag: a message of {len} bytes in {n}")));
            }
            if kind == libc::NLMSG_DONE as u16 {
                return Ok(out);
            }
            if kind == libc::NLMSG_ERROR as u16 {
                let e = if len >= 20 {
                    i32::from_ne_bytes([buf[at + 16], buf[at + 17], buf[at + 18], buf[at + 19]])
                } else {
                    -libc::EIO
                };
                return Err(io::Error::from_raw_os_error(-e));
            }
            // inet_diag_msg: family, state, timer, retrans, id (48),
            // expires, rqueue, wqueue, uid, inode
            let m = &buf[at + NLMSG_HDR..at + len];
            if m.len() >= 4 + ID_LEN + 20 {
                let mut id = [0u8; ID_LEN];
                id.copy_from_slice(&m[4..4 + ID_LEN]);
                let word = |k: usize| u32::from_ne_bytes([m[k], m[k + 1], m[k + 2], m[k + 3]]);
                let (rqueue, wqueue, inode) = (word(4 + ID_LEN + 4), word(4 + ID_LEN + 8), word(4 + ID_LEN + 16));
                out.push((id, inode == 0, u64::from(rqueue) + u64::from(wqueue)));
            }
            at += (len + 3) & !3;
        }
    }
}
