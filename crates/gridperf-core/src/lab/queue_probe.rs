//! The emulator's probe of its hosts' TUN queues: how long a packet a host
//! sends waits in its device's queue before the emulator reads it.
//!
//! The emulator stamps a packet when it reads it, so time spent before
//! that, in the host's TUN queue, is time no setting put there: while the
//! emulator reads more slowly than a host sends (its CPU is taken, or it
//! cannot keep up), every packet waits there, and the lab's delay is the
//! setting plus that wait. The kernel does not say how full the queue is
//! (the device counts a packet as sent when it is read), so the emulator
//! asks: it writes an ICMP echo request to the host from an address no
//! host has ([`FROM`]), and the host's reply, sent after it through the
//! same queue, comes back behind whatever waited there. Without receive
//! steering the kernel answers within the emulator's write, so the time
//! from the write to reading the reply is the queue's wait at that moment;
//! with steering (labs from 5 Gbit/s), the host's CPU's backlog too.

use super::gso::{internet_checksum, ipv4_checksum, VNET_HDR_LEN};
use std::net::Ipv4Addr;

/// The address the probe comes from: inside the lab's 10.77.0.0/16 (the
/// hosts' replies take their route to it, through their TUN device), and
/// no host's (hosts are 10.77.1.i and 10.77.2.i).
pub const FROM: Ipv4Addr = Ipv4Addr::new(10, 77, 255, 254);
/// The echo's identifier ("gp"): a reply to [`FROM`] with another is not
/// the probe's.
pub const ID: u16 = 0x6770;

/// An ICMP echo request from [`FROM`] to `to` with sequence number `seq`,
/// behind a virtio-net header (no offload), as a TUN write takes it.
pub fn echo_request(to: Ipv4Addr, seq: u16) -> Vec<u8> {
    let mut p = vec![0u8; VNET_HDR_LEN + 28];
    let ip = &mut p[VNET_HDR_LEN..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&28u16.to_be_bytes());
    ip[4..6].copy_from_slice(&seq.to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = 64;
    ip[9] = 1; // ICMP
    ip[12..16].copy_from_slice(&FROM.octets());
    ip[16..20].copy_from_slice(&to.octets());
    let c = ipv4_checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let icmp = &mut ip[20..28];
    icmp[0] = 8; // echo request
    icmp[4..6].copy_from_slice(&ID.to_be_bytes());
    icmp[6..8].copy_from_slice(&seq.to_be_bytes());
    let c = internet_checksum(icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    p
}

/// The sequence number of an IP packet (after the virtio-net header) that
/// is a host's echo reply to the probe, else None.
pub fn reply_seq(ip: &[u8]) -> Option<u16> {
    if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 1 || ip[16..20] != FROM.octets() {
        return None;
    }
    let icmp = ip.get(usize::from(ip[0] & 0x0f) * 4..)?;
    if icmp.len() < 8 || icmp[0] != 0 || icmp[4..6] != ID.to_be_bytes() {
        return None;
    }
    Some(u16::from_be_bytes([icmp[6], icmp[7]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reply a Linux host makes to a request: addresses swapped, type
    /// 0, the ICMP checksum mended for it.
    fn reply_to(req: &[u8]) -> Vec<u8> {
        let mut ip = req[VNET_HDR_LEN..].to_vec();
        let (src, dst) = (ip[12..16].to_vec(), ip[16..20].to_vec());
        ip[12..16].copy_from_slice(&dst);
        ip[16..20].copy_from_slice(&src);
        ip[20] = 0;
        ip[22..24].fill(0);
        let c = internet_checksum(&ip[20..]);
        ip[22..24].copy_from_slice(&c.to_be_bytes());
        ip
    }

    #[test]
    fn a_request_checks_and_only_its_reply_is_known() {
        let req = echo_request(Ipv4Addr::new(10, 77, 1, 1), 513);
        let ip = &req[VNET_HDR_LEN..];
        assert_eq!(req[..VNET_HDR_LEN], [0u8; VNET_HDR_LEN]);
        // a header and a message whose checksums are right sum to zero
        assert_eq!(internet_checksum(&ip[..20]), 0);
        assert_eq!(internet_checksum(&ip[20..]), 0);
        assert_eq!(ip[16..20], [10, 77, 1, 1]);
        // the request itself is no reply, the host's reply is, with its number
        assert_eq!(reply_seq(ip), None);
        let rep = reply_to(&req);
        assert_eq!(reply_seq(&rep), Some(513));
        // another's echo reply (another identifier, another address) is not
        let mut other = rep.clone();
        other[24] ^= 1;
        assert_eq!(reply_seq(&other), None);
        let mut elsewhere = rep.clone();
        elsewhere[19] = 1;
        assert_eq!(reply_seq(&elsewhere), None);
        assert_eq!(reply_seq(&rep[..27]), None);
    }
}
