//! Network devices: links up, addresses, MTU and queue lengths, by ioctl and rtnetlink.

use super::*;

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
pub(crate) struct IfReq {
    pub(crate) name: [u8; 16],
    // The kernel's union: flags (short) or mtu (int); 24 bytes of room.
    pub(crate) data: [u8; 24],
}

pub(crate) fn ifreq(name: &str) -> io::Result<IfReq> {
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
    let sock = netlink_socket(libc::NETLINK_ROUTE)?;
    // SAFETY: msg is valid for reads of its length; a NULL address sends to the kernel.
    let n = unsafe { libc::send(sock.as_raw_fd(), msg.as_ptr() as *const libc::c_void, msg.len(), 0) };
    cvt(n, -1)?;
    netlink_ack(&sock, "rtnetlink")
}

/// A netlink socket of `protocol` whose reads wait 2 s at most (the kernel
/// answers at once; a deadline all the same).
pub(crate) fn netlink_socket(protocol: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call.
    let fd = cvt_i(unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) })?;
    // SAFETY: fresh descriptor, now owned.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
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
    Ok(sock)
}

/// The answer to a netlink request sent with NLM_F_ACK: an NLMSG_ERROR
/// message, its header then the error number (0: done).
pub(crate) fn netlink_ack(sock: &OwnedFd, what: &str) -> io::Result<()> {
    let mut ack = [0u8; 512];
    // SAFETY: ack is valid for writes of its length.
    let n = cvt(unsafe { libc::recv(sock.as_raw_fd(), ack.as_mut_ptr() as *mut libc::c_void, ack.len(), 0) }, -1)?;
    let kind = u16::from_ne_bytes([ack[4], ack[5]]);
    if n < 20 || kind != libc::NLMSG_ERROR as u16 {
        return Err(io::Error::other(format!("{what}: unexpected answer of {n} bytes, type {kind}")));
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
