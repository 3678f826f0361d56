//! The emulator's probe of its hosts' TUN queues: how long a packet a host
//! sends waits in its device's queue before the emulator reads it.
//!
//! The emulator stamps a packet when it reads it, so time spent before
//! that, in the host's TUN queue, is time no setting put there: while the
//! emulator reads more slowly than a host sends (its CPU is taken, or it
//! cannot keep up), every packet waits there, and the lab's delay is the
//! setting plus that wait. The kernel does not say how full the queue is
//! (the device counts a packet as sent when it is read), so the emulator
//! marks it: it sends a small UDP datagram from a socket in the host's
//! namespace to an address no host has ([`FROM`], port [`PORT`]). The
//! send runs the host's output path in the emulator's own system call, to
//! the device's queue and no further, so the marker joins the queue when
//! the send returns, behind whatever waited there, and the time from the
//! send to reading it back is the queue's wait at that moment.
//!
//! An ICMP echo the emulator writes to the host instead comes back behind
//! the host's receive work too: from 5 Gbit/s the hosts receive on
//! another CPU (RPS), and there a 10 Gbit/s receiver's backlog held the
//! echo's reply while the queue itself was read in time. Four CUBIC
//! streams across 10G x 20 ms (`-w 16M -t 6 -O 2`, root, the two probes'
//! builds alternated, 2026-12-03): with the echo, 17 to 384 slow replies
//! a run (69 to 992 ms) and 1 run of 6 valid; with the marker, 0 to 2
//! (under 3 ms) in the four runs the hypervisor took under 40 ms from,
//! and 4 of 6 valid (the other two held up 30 and 185 ms under 440-490
//! ms of steal). The echo's wait is the hosts' CPU, not the emulator's
//! reading; [`echo_request`] and [`reply_seq`] remain for a host without
//! a marker socket.

use super::gso::{internet_checksum, ipv4_checksum, VNET_HDR_LEN};
use std::net::Ipv4Addr;

/// The address the markers go to and the echoes come from: inside the
/// lab's 10.77.0.0/16 (a host's route to it is its TUN device), and no
/// host's (hosts are 10.77.1.i and 10.77.2.i).
pub const FROM: Ipv4Addr = Ipv4Addr::new(10, 77, 255, 254);
/// The echo's identifier ("gp"): a reply to [`FROM`] with another is not
/// the probe's.
pub const ID: u16 = 0x6770;

/// The UDP port the markers go to ("gp").
pub const PORT: u16 = 0x6770;

/// A marker's payload: "gp" and its sequence number.
pub fn marker(seq: u16) -> [u8; 4] {
    let [a, b] = seq.to_be_bytes();
    [b'g', b'p', a, b]
}

/// The sequence number of an IP packet (after the virtio-net header) that
/// is a marker (a UDP datagram to [`FROM`]:[`PORT`] carrying [`marker`]),
/// else None.
pub fn marker_seq(ip: &[u8]) -> Option<u16> {
    if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 17 || ip[16..20] != FROM.octets() {
        return None;
    }
    let udp = ip.get(usize::from(ip[0] & 0x0f) * 4..)?;
    match udp {
        [_, _, p0, p1, _, _, _, _, b'g', b'p', s0, s1] if u16::from_be_bytes([*p0, *p1]) == PORT => {
            Some(u16::from_be_bytes([*s0, *s1]))
        }
        _ => None,
    }
}

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

    /// The datagram a host's kernel sends for a marker: an IPv4 header,
    /// then UDP from `sport` to [`FROM`]:[`PORT`] (checksum left to the
    /// device, as Linux leaves it with offload).
    fn datagram(from: Ipv4Addr, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut ip = vec![0u8; 28];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((28 + payload.len()) as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&from.octets());
        ip[16..20].copy_from_slice(&FROM.octets());
        ip[20..22].copy_from_slice(&40000u16.to_be_bytes());
        ip[22..24].copy_from_slice(&dport.to_be_bytes());
        ip[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        ip.extend_from_slice(payload);
        ip
    }

    #[test]
    fn only_a_marker_to_the_probes_port_is_known_with_its_number() {
        let host = Ipv4Addr::new(10, 77, 2, 1);
        assert_eq!(marker(0x1234), [b'g', b'p', 0x12, 0x34]);
        assert_eq!(marker_seq(&datagram(host, PORT, &marker(7))), Some(7));
        assert_eq!(marker_seq(&datagram(host, PORT, &marker(65535))), Some(65535));
        // another port, another payload, a longer one, another address
        assert_eq!(marker_seq(&datagram(host, PORT + 1, &marker(7))), None);
        assert_eq!(marker_seq(&datagram(host, PORT, b"xp\0\x07")), None);
        assert_eq!(marker_seq(&datagram(host, PORT, b"gp\0\x07!")), None);
        let mut elsewhere = datagram(host, PORT, &marker(7));
        elsewhere[19] = 1;
        assert_eq!(marker_seq(&elsewhere), None);
        // a host's echo reply is no marker, nor a marker an echo reply
        let rep = reply_to(&echo_request(host, 7));
        assert_eq!(marker_seq(&rep), None);
        assert_eq!(reply_seq(&datagram(host, PORT, &marker(7))), None);
        assert_eq!(marker_seq(&datagram(host, PORT, &marker(7))[..31]), None);
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
