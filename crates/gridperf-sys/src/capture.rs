//! Packet capture (AF_PACKET).

use super::*;

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
        let _ = set_rcvbuf_past_max(&fd, 32 << 20);
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
