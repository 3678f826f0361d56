//! TUN devices with virtio-net headers and offloads.

use super::*;

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
