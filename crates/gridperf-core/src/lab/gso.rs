//! Offloaded packets as a TUN device with virtio-net headers hands them
//! over: a 10-byte `virtio_net_hdr`, then an IP packet that may be a TCP
//! super-packet of up to 64 KiB standing for many wire segments, or a UDP
//! one (a UDP_SEGMENT send through a device with USO) standing for many
//! datagrams.
//!
//! The lab decides loss and queueing per wire segment, never per
//! super-packet ([`segments`] says how many and how long). When every
//! segment survives, the super-packet is passed on whole; when some do not,
//! [`cuts`] cuts it into runs of the surviving segments, as the kernel's
//! GSO would have, each with its own header and a checksum left for the
//! receiver's kernel to check (NEEDS_CSUM).

use thiserror::Error;

/// The size of `struct virtio_net_hdr`.
pub const VNET_HDR_LEN: usize = 10;
pub const F_NEEDS_CSUM: u8 = 1;
pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_UDP: u8 = 3;
pub const GSO_TCPV6: u8 = 4;
/// UDP segmentation offload (`VIRTIO_NET_HDR_GSO_UDP_L4`): datagrams of
/// `gso_size` payload bytes behind one IP and UDP header.
pub const GSO_UDP_L4: u8 = 5;
pub const GSO_ECN: u8 = 0x80;

/// A virtio-net header (little-endian fields, as the TUN device uses them
/// on little-endian hosts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    pub fn parse(b: &[u8]) -> Option<VnetHdr> {
        if b.len() < VNET_HDR_LEN {
            return None;
        }
        let u = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        })
    }

    pub fn write(&self, b: &mut [u8]) {
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
    }
}

/// Why a packet could not be cut into segments.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum GsoError {
    #[error("packet too short for its headers")]
    Short,
    #[error("GSO type {0:#x} is not TCP or UDP (USO) over IPv4 or IPv6")]
    Unsupported(u8),
    #[error("malformed IP or TCP header")]
    Malformed,
}

/// Offsets of a TCP packet's headers: (IP header length, TCP header length, IPv6?).
fn tcp_headers(pkt: &[u8]) -> Result<(usize, usize, bool), GsoError> {
    let v = pkt.first().ok_or(GsoError::Short)? >> 4;
    let (ip_len, v6) = match v {
        4 => (((pkt[0] & 0x0f) as usize) * 4, false),
        6 => (40, true),
        _ => return Err(GsoError::Malformed),
    };
    if ip_len < 20 || pkt.len() < ip_len + 20 {
        return Err(GsoError::Short);
    }
    let proto = if v6 { pkt[6] } else { pkt[9] };
    if proto != 6 {
        return Err(GsoError::Malformed);
    }
    let tcp_len = ((pkt[ip_len + 12] >> 4) as usize) * 4;
    if tcp_len < 20 || pkt.len() < ip_len + tcp_len {
        return Err(GsoError::Short);
    }
    Ok((ip_len, tcp_len, v6))
}

/// Offsets of a UDP packet's headers: (IP header length, IPv6?).
fn udp_headers(pkt: &[u8]) -> Result<(usize, bool), GsoError> {
    let v = pkt.first().ok_or(GsoError::Short)? >> 4;
    let (ip_len, v6) = match v {
        4 => (((pkt[0] & 0x0f) as usize) * 4, false),
        6 => (40, true),
        _ => return Err(GsoError::Malformed),
    };
    if ip_len < 20 || pkt.len() < ip_len + 8 {
        return Err(GsoError::Short);
    }
    if (if v6 { pkt[6] } else { pkt[9] }) != 17 {
        return Err(GsoError::Malformed);
    }
    Ok((ip_len, v6))
}

/// The on-the-wire lengths (IP header included) of the segments a packet
/// stands for: one length for a plain packet, ceil(payload / gso_size)
/// for a TCP or UDP super-packet.
pub fn segments(hdr: &VnetHdr, pkt: &[u8]) -> Vec<u32> {
    let gso = hdr.gso_type & !GSO_ECN;
    if gso == GSO_NONE || hdr.gso_size == 0 {
        return vec![pkt.len() as u32];
    }
    let headers = if gso == GSO_UDP_L4 {
        match udp_headers(pkt) {
            Ok((ip, _)) => ip + 8,
            Err(_) => return vec![pkt.len() as u32],
        }
    } else {
        match tcp_headers(pkt) {
            Ok((ip, tcp, _)) => ip + tcp,
            Err(_) => return vec![pkt.len() as u32],
        }
    };
    let payload = pkt.len().saturating_sub(headers);
    let mss = hdr.gso_size as usize;
    if payload <= mss {
        return vec![pkt.len() as u32];
    }
    let n = payload.div_ceil(mss);
    (0..n).map(|i| (headers + mss.min(payload - i * mss)) as u32).collect()
}

/// One's-complement sum of 16-bit words (not folded, not inverted).
fn sum16(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [last] = chunks.remainder() {
        acc += (*last as u32) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The Internet checksum (RFC 1071) of `data`, its checksum field zero.
pub fn internet_checksum(data: &[u8]) -> u16 {
    !fold(sum16(data, 0))
}

/// The IPv4 header checksum.
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut h = header.to_vec();
    h[10] = 0;
    h[11] = 0;
    !fold(sum16(&h, 0))
}

/// Sets a cut packet's IP length (and, for IPv4, its id and header checksum).
fn set_ip_header(p: &mut [u8], ip_len: usize, v6: bool, total: usize, id: u16) {
    if v6 {
        p[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
    } else {
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[4..6].copy_from_slice(&id.to_be_bytes());
        let c = ipv4_checksum(&p[..ip_len]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
    }
}

/// The pseudo-header sum (addresses, protocol, transport length) of `pkt`'s
/// IP header, folded and not inverted, as CHECKSUM_PARTIAL packets carry it.
fn pseudo_sum(pkt: &[u8], v6: bool, proto: u32, len: u32) -> u16 {
    fold(if v6 {
        sum16(&pkt[8..40], 0) + proto + (len >> 16) + (len & 0xffff)
    } else {
        sum16(&pkt[12..20], 0) + proto + len
    })
}

/// One piece of a cut super-packet: its own virtio-net and IP/transport
/// headers, and the range of the super-packet's bytes (as given to
/// [`cuts`], IP header first) that it carries after them. Written with
/// one `writev` of the two, its payload is never copied in user space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub head: Vec<u8>,
    pub data: std::ops::Range<usize>,
}

/// Cuts a TCP or UDP super-packet into runs of the segments (datagrams)
/// for which `keep(i)` is true, without copying the payload: each run's
/// own headers, and where its payload lies in `pkt` (the emulator writes
/// the two with one `writev`). A run of several leaves as one smaller
/// super-packet (the receiving kernel, or a UDP_GRO socket, takes it as
/// the sender's kernel made it), a run of one as a plain packet. Each
/// comes with its own virtio-net header, its checksum left to the
/// receiver: NEEDS_CSUM with the pseudo-header sum for its length in the
/// checksum field, as CHECKSUM_PARTIAL packets carry it.
///
/// Under a steady overload a queue drops the tail of most super-packets,
/// and one write per surviving segment would cost the emulator more than
/// the link it emulates: each write is a system call, a copy and, at 5
/// Gbit/s and more, a wake-up of the receiving host's CPU.
pub fn cuts(hdr: &VnetHdr, pkt: &[u8], keep: impl Fn(usize) -> bool) -> Result<Vec<Cut>, GsoError> {
    let gso = hdr.gso_type & !GSO_ECN;
    if gso == GSO_UDP_L4 {
        return cuts_udp(hdr, pkt, keep);
    }
    if gso != GSO_TCPV4 && gso != GSO_TCPV6 {
        return Err(GsoError::Unsupported(hdr.gso_type));
    }
    let (ip_len, tcp_len, v6) = tcp_headers(pkt)?;
    let headers = ip_len + tcp_len;
    let payload_len = pkt.len() - headers;
    let mss = hdr.gso_size as usize;
    if mss == 0 {
        return Err(GsoError::Malformed);
    }
    let n = payload_len.div_ceil(mss).max(1);
    let seq0 = u32::from_be_bytes([pkt[ip_len + 4], pkt[ip_len + 5], pkt[ip_len + 6], pkt[ip_len + 7]]);
    let flags0 = pkt[ip_len + 13];
    let id0 = u16::from_be_bytes([pkt[4], pkt[5]]);
    Ok(runs(n, keep)
        .map(|(i, j)| {
            let data = headers + i * mss..headers + payload_len.min(j * mss);
            let several = j - i > 1;
            // CWR belongs to the first segment: a run without it is no ECN super-packet
            let gso_type = if i == 0 { hdr.gso_type } else { hdr.gso_type & !GSO_ECN };
            let gso = several.then_some((gso_type, hdr.gso_size));
            let mut head = run_head(pkt, (ip_len, headers, v6), gso, 16, data.len(), id0.wrapping_add(i as u16));
            let t = &mut head[VNET_HDR_LEN + ip_len..];
            t[4..8].copy_from_slice(&seq0.wrapping_add((i * mss) as u32).to_be_bytes());
            // FIN and PSH belong to the last segment, CWR to the first
            let mut flags = flags0;
            if j < n {
                flags &= !(0x01 | 0x08);
            }
            if i > 0 {
                flags &= !0x80;
            }
            t[13] = flags;
            // the pseudo-header sum for this run's length, not inverted
            t[16..18].copy_from_slice(&pseudo_sum(pkt, v6, 6, (tcp_len + data.len()) as u32).to_be_bytes());
            Cut { head, data }
        })
        .collect())
}

/// A run's virtio-net header (NEEDS_CSUM at `csum_offset` into the
/// transport header; GSO type and size when it holds several segments)
/// and the super-packet's headers with the IP header's length and id set
/// for a run of `data_len` payload bytes. `layout` is the IP header's
/// length, all headers' length, and whether it is IPv6.
fn run_head(
    pkt: &[u8],
    layout: (usize, usize, bool),
    gso: Option<(u8, u16)>,
    csum_offset: u16,
    data_len: usize,
    id: u16,
) -> Vec<u8> {
    let (ip_len, headers, v6) = layout;
    let mut head = vec![0u8; VNET_HDR_LEN + headers];
    VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: gso.map_or(GSO_NONE, |g| g.0),
        hdr_len: headers as u16,
        gso_size: gso.map_or(0, |g| g.1),
        csum_start: ip_len as u16,
        csum_offset,
    }
    .write(&mut head[..VNET_HDR_LEN]);
    let p = &mut head[VNET_HDR_LEN..];
    p.copy_from_slice(&pkt[..headers]);
    set_ip_header(p, ip_len, v6, headers + data_len, id);
    head
}

/// The runs `[i, j)` of consecutive indices below `n` for which `keep` is true.
fn runs(n: usize, keep: impl Fn(usize) -> bool) -> impl Iterator<Item = (usize, usize)> {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < n && !keep(i) {
            i += 1;
        }
        if i >= n {
            return None;
        }
        let from = i;
        while i < n && keep(i) {
            i += 1;
        }
        Some((from, i))
    })
}

/// [`cuts`] for a UDP super-packet: runs of kept datagrams.
fn cuts_udp(hdr: &VnetHdr, pkt: &[u8], keep: impl Fn(usize) -> bool) -> Result<Vec<Cut>, GsoError> {
    let (ip_len, v6) = udp_headers(pkt)?;
    let headers = ip_len + 8;
    let payload_len = pkt.len() - headers;
    let size = hdr.gso_size as usize;
    if size == 0 {
        return Err(GsoError::Malformed);
    }
    let n = payload_len.div_ceil(size).max(1);
    let id0 = u16::from_be_bytes([pkt[4], pkt[5]]);
    Ok(runs(n, keep)
        .map(|(i, j)| {
            let data = headers + i * size..headers + payload_len.min(j * size);
            let several = j - i > 1;
            let gso = several.then_some((hdr.gso_type, hdr.gso_size));
            // the kernel numbers a USO packet's datagrams id0, id0 + 1, ...
            let mut head = run_head(pkt, (ip_len, headers, v6), gso, 6, data.len(), id0.wrapping_add(i as u16));
            let p = &mut head[VNET_HDR_LEN..];
            let udp_len = (8 + data.len()) as u32;
            p[ip_len + 4..ip_len + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            // the pseudo-header sum for this length, not inverted (CHECKSUM_PARTIAL)
            p[ip_len + 6..ip_len + 8].copy_from_slice(&pseudo_sum(pkt, v6, 17, udp_len).to_be_bytes());
            Cut { head, data }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`cuts`], each piece joined into one packet (virtio-net header first).
    fn split(hdr: &VnetHdr, pkt: &[u8], keep: impl Fn(usize) -> bool) -> Result<Vec<Vec<u8>>, GsoError> {
        Ok(cuts(hdr, pkt, keep)?.iter().map(|c| joined(c, pkt)).collect())
    }

    fn joined(c: &Cut, pkt: &[u8]) -> Vec<u8> {
        [&c.head[..], &pkt[c.data.clone()]].concat()
    }

    /// An IPv4/TCP super-packet: 20 B IP, 32 B TCP (timestamps), `payload` bytes.
    fn super_v4(payload: usize, flags: u8) -> Vec<u8> {
        let total = 52 + payload;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total.min(65535) as u16).to_be_bytes());
        p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        p[6] = 0x40; // DF
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 77, 1, 1]);
        p[16..20].copy_from_slice(&[10, 77, 2, 1]);
        p[20..22].copy_from_slice(&5301u16.to_be_bytes());
        p[24..28].copy_from_slice(&1_000_000u32.to_be_bytes());
        p[32] = 8 << 4; // 32-byte TCP header
        p[33] = flags;
        for (i, b) in p[52..].iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        p
    }

    fn gso_hdr(mss: u16) -> VnetHdr {
        VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 52,
            gso_size: mss,
            csum_start: 20,
            csum_offset: 16,
        }
    }

    #[test]
    fn header_roundtrip() {
        let h = gso_hdr(1448);
        let mut b = [0u8; 10];
        h.write(&mut b);
        assert_eq!(VnetHdr::parse(&b), Some(h));
        assert_eq!(VnetHdr::parse(&b[..9]), None);
    }

    #[test]
    fn segment_lengths() {
        let pkt = super_v4(1448 * 3 + 100, 0x18);
        assert_eq!(segments(&gso_hdr(1448), &pkt), vec![1500, 1500, 1500, 152]);
        assert_eq!(segments(&VnetHdr::default(), &pkt), vec![pkt.len() as u32]);
        let small = super_v4(500, 0x18);
        assert_eq!(segments(&gso_hdr(1448), &small), vec![552]);
    }

    #[test]
    fn split_rebuilds_each_run_of_segments() {
        // segments 0 | 1 dropped | 2 3 (the last, short): 0 plain, [2, 4) as one super-packet
        let pkt = super_v4(1448 * 3 + 100, 0x18 | 0x01 | 0x80); // PSH ACK FIN CWR
        let ecn = VnetHdr { gso_type: GSO_TCPV4 | GSO_ECN, ..gso_hdr(1448) };
        let parts = split(&ecn, &pkt, |i| i != 1).expect("split");
        assert_eq!(parts.len(), 2, "segment 1 dropped");
        for (s, (i, count)) in parts.iter().zip([(0usize, 1usize), (2, 2)]) {
            let h = VnetHdr::parse(s).expect("hdr");
            assert_eq!((h.flags, h.csum_start, h.csum_offset, h.hdr_len), (F_NEEDS_CSUM, 20, 16, 52));
            let p = &s[VNET_HDR_LEN..];
            let total = u16::from_be_bytes([p[2], p[3]]) as usize;
            assert_eq!(total, p.len());
            let last = i + count == 4;
            assert_eq!(total, 52 + 1448 * (count - usize::from(last)) + if last { 100 } else { 0 });
            assert_eq!(u16::from_be_bytes([p[4], p[5]]), 0x1234 + i as u16);
            // a valid IPv4 header checksum sums to 0xffff
            assert_eq!(fold(sum16(&p[..20], 0)), 0xffff);
            let seq = u32::from_be_bytes([p[24], p[25], p[26], p[27]]);
            assert_eq!(seq, 1_000_000 + (i * 1448) as u32);
            let flags = p[33];
            assert_eq!(flags & 0x01 != 0, last, "FIN only on the last");
            assert_eq!(flags & 0x08 != 0, last, "PSH only on the last");
            assert_eq!(flags & 0x80 != 0, i == 0, "CWR only on the first");
            // the payload is the right slice of the original
            assert_eq!(p[52], ((i * 1448) % 251) as u8);
            // pseudo-header sum: src + dst + proto + TCP length
            let tcp_len = (total - 20) as u32;
            let expect = fold(sum16(&p[12..20], 0) + 6 + tcp_len);
            assert_eq!(u16::from_be_bytes([p[36], p[37]]), expect);
            if count > 1 {
                // without the first segment, no CWR and so no ECN flag
                assert_eq!((h.gso_type, h.gso_size), (GSO_TCPV4, 1448));
                assert_eq!(segments(&h, p), vec![1500, 152], "the run's own segments");
            } else {
                assert_eq!((h.gso_type, h.gso_size), (GSO_NONE, 0));
            }
        }
        // every segment but the last kept: one super-packet of three, CWR and ECN kept, no FIN or PSH
        let head = split(&ecn, &pkt, |i| i < 3).expect("split");
        assert_eq!(head.len(), 1);
        let h = VnetHdr::parse(&head[0]).expect("hdr");
        assert_eq!((h.gso_type, h.gso_size), (GSO_TCPV4 | GSO_ECN, 1448));
        assert_eq!(head[0][VNET_HDR_LEN + 33], 0x10 | 0x80, "ACK and CWR");
        assert_eq!(segments(&h, &head[0][VNET_HDR_LEN..]), vec![1500; 3]);
    }

    #[test]
    fn cuts_point_into_the_super_packet_and_join_to_what_split_gives() {
        let pkt = super_v4(1448 * 5, 0x10);
        let keep = |i| i % 2 == 0;
        let cuts = cuts(&gso_hdr(1448), &pkt, keep).expect("cuts");
        assert_eq!(cuts.iter().map(|c| c.data.clone()).collect::<Vec<_>>(), vec![52..1500, 2948..4396, 5844..7292]);
        assert!(cuts.iter().all(|c| c.head.len() == VNET_HDR_LEN + 52));
        let joined: Vec<Vec<u8>> = cuts.iter().map(|c| joined(c, &pkt)).collect();
        assert_eq!(joined, split(&gso_hdr(1448), &pkt, keep).expect("split"));
    }

    #[test]
    fn split_refuses_what_it_cannot_cut() {
        let pkt = super_v4(3000, 0x10);
        let udp = VnetHdr { gso_type: GSO_UDP, ..gso_hdr(1448) };
        assert_eq!(split(&udp, &pkt, |_| true), Err(GsoError::Unsupported(GSO_UDP)));
        assert_eq!(split(&gso_hdr(1448), &pkt[..30], |_| true), Err(GsoError::Short));
        let mut not_tcp = pkt.clone();
        not_tcp[9] = 17;
        assert_eq!(split(&gso_hdr(1448), &not_tcp, |_| true), Err(GsoError::Malformed));
    }

    /// An IPv4/UDP super-packet: 20 B IP, 8 B UDP, `payload` bytes.
    fn udp_super(payload: usize) -> Vec<u8> {
        let total = 28 + payload;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[4..6].copy_from_slice(&0x0100u16.to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 77, 1, 1]);
        p[16..20].copy_from_slice(&[10, 77, 2, 1]);
        p[20..22].copy_from_slice(&40000u16.to_be_bytes());
        p[22..24].copy_from_slice(&9100u16.to_be_bytes());
        p[24..26].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
        for (i, b) in p[28..].iter_mut().enumerate() {
            *b = (i % 241) as u8;
        }
        p
    }

    fn uso_hdr(size: u16) -> VnetHdr {
        VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_UDP_L4,
            hdr_len: 28,
            gso_size: size,
            csum_start: 20,
            csum_offset: 6,
        }
    }

    #[test]
    fn a_udp_super_packet_is_its_datagrams_on_the_wire() {
        let pkt = udp_super(1472 * 4 + 10);
        assert_eq!(segments(&uso_hdr(1472), &pkt), vec![1500, 1500, 1500, 1500, 38]);
    }

    #[test]
    fn a_udp_super_packet_is_cut_into_runs_of_the_datagrams_kept() {
        // datagrams 0 1 2 | 3 dropped | 4 kept alone | 5 dropped: [0, 3) as one, 4 plain
        let pkt = udp_super(1472 * 5 + 100);
        let kept = [true, true, true, false, true, false];
        let parts = split(&uso_hdr(1472), &pkt, |i| kept[i]).expect("split");
        assert_eq!(parts.len(), 2);
        for (part, (first, count, last_len)) in parts.iter().zip([(0usize, 3usize, 1472usize), (4, 1, 1472)]) {
            let h = VnetHdr::parse(part).expect("hdr");
            let p = &part[VNET_HDR_LEN..];
            let data = 1472 * (count - 1) + last_len;
            assert_eq!(p.len(), 28 + data);
            assert_eq!(u16::from_be_bytes([p[2], p[3]]) as usize, p.len(), "IP total length");
            assert_eq!(u16::from_be_bytes([p[24], p[25]]) as usize, 8 + data, "UDP length");
            assert_eq!(u16::from_be_bytes([p[4], p[5]]), 0x0100 + first as u16, "IP id of its first datagram");
            assert_eq!(fold(sum16(&p[..20], 0)), 0xffff, "IP header checksum");
            let expect = fold(sum16(&p[12..20], 0) + 17 + (8 + data) as u32);
            assert_eq!(u16::from_be_bytes([p[26], p[27]]), expect, "pseudo-header sum");
            assert_eq!(p[28], ((first * 1472) % 241) as u8, "the payload of its first datagram");
            assert_eq!((h.flags, h.csum_start, h.csum_offset, h.hdr_len), (F_NEEDS_CSUM, 20, 6, 28));
            if count > 1 {
                assert_eq!((h.gso_type, h.gso_size), (GSO_UDP_L4, 1472));
                assert_eq!(segments(&h, p), vec![1500; count], "the run's own segments");
            } else {
                assert_eq!((h.gso_type, h.gso_size), (GSO_NONE, 0));
            }
        }
        // everything dropped: nothing; the short last datagram alone: a plain one of 100 bytes
        assert!(split(&uso_hdr(1472), &pkt, |_| false).expect("split").is_empty());
        let last = split(&uso_hdr(1472), &pkt, |i| i == 5).expect("split");
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].len(), VNET_HDR_LEN + 28 + 100);
    }
}
