//! Packet captures: reading pcap and pcapng as a stream (one frame at a
//! time, in bounded memory, the byte offset kept so that a truncated file
//! is read to its last whole packet and says where it ended), decoding a
//! frame's link layer (Ethernet with VLAN tags, Linux cooked SLL and SLL2,
//! raw IP, BSD loopback), IPv4 or IPv6 (extension headers walked) and TCP
//! (options: MSS, window scale, SACK), and writing pcap (`stream
//! --capture`). The formats are those of libpcap's and the IETF's
//! pcapng drafts; both are small enough that reading them here keeps the
//! time resolution (pcapng's if_tsresol) and the truncation exact.

pub mod trace;

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Link-layer types (LINKTYPE_*) this reader decodes.
pub const LINKTYPE_NULL: u16 = 0;
pub const LINKTYPE_ETHERNET: u16 = 1;
pub const LINKTYPE_RAW: u16 = 101;
pub const LINKTYPE_LOOP: u16 = 108;
pub const LINKTYPE_LINUX_SLL: u16 = 113;
pub const LINKTYPE_IPV4: u16 = 228;
pub const LINKTYPE_IPV6: u16 = 229;
pub const LINKTYPE_LINUX_SLL2: u16 = 276;
/// Some systems write DLT_RAW as 12 or 14.
const DLT_RAW_ALT: [u16; 2] = [12, 14];

/// The largest frame a record may hold (a corrupt length is refused, not allocated).
pub const MAX_FRAME: u32 = 1 << 20;

/// The link-layer type's name, for errors.
pub fn link_name(link: u16) -> String {
    match link {
        LINKTYPE_NULL => "NULL (BSD loopback)".into(),
        LINKTYPE_ETHERNET => "Ethernet".into(),
        LINKTYPE_RAW | 12 | 14 => "raw IP".into(),
        LINKTYPE_LOOP => "LOOP (OpenBSD loopback)".into(),
        LINKTYPE_LINUX_SLL => "Linux cooked (SLL)".into(),
        LINKTYPE_IPV4 => "raw IPv4".into(),
        LINKTYPE_IPV6 => "raw IPv6".into(),
        LINKTYPE_LINUX_SLL2 => "Linux cooked v2 (SLL2)".into(),
        105 => "IEEE 802.11 (LINKTYPE 105)".into(),
        127 => "802.11 radiotap (LINKTYPE 127)".into(),
        n => format!("LINKTYPE {n}"),
    }
}

/// One captured frame.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Time, ns since the Unix epoch.
    pub t_ns: i64,
    pub link: u16,
    /// The bytes captured (at most the snap length).
    pub data: Vec<u8>,
    /// The frame's length on the wire.
    pub orig_len: u32,
}

/// A frame's time (ns since the Unix epoch), link type and length on the wire.
#[derive(Debug, Clone, Copy)]
pub struct FrameHead {
    pub t_ns: i64,
    pub link: u16,
    pub orig_len: u32,
}

/// Why a capture could not be read (the frames before it were).
#[derive(Debug, Clone, PartialEq)]
pub enum CaptureError {
    /// Not a pcap or pcapng file (its first bytes).
    NotACapture(String),
    /// The file ends inside a record that starts at `offset`: read to the last whole packet.
    Truncated {
        offset: u64,
        what: String,
    },
    /// A record that cannot be (a length beyond any frame, a block too short).
    Corrupt {
        offset: u64,
        what: String,
    },
    Io(String),
}

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaptureError::NotACapture(m) => write!(f, "not a pcap or pcapng capture: {m}"),
            CaptureError::Truncated { offset, what } => {
                write!(f, "the capture ends inside {what} at byte {offset}: read to the last whole packet before it")
            }
            CaptureError::Corrupt { offset, what } => write!(f, "a corrupt record at byte {offset}: {what}"),
            CaptureError::Io(m) => f.write_str(m),
        }
    }
}

enum Format {
    Pcap { big: bool, nanos: bool, link: u16 },
    PcapNg { big: bool, ifaces: Vec<Iface> },
}

#[derive(Clone, Copy)]
struct Iface {
    link: u16,
    /// Units per second of its timestamps.
    per_sec: u64,
    offset_s: i64,
}

/// A pcap or pcapng file read a frame at a time.
pub struct CaptureReader<R: Read> {
    r: R,
    format: Format,
    offset: u64,
    done: bool,
    /// pcapng blocks skipped (statistics, name resolution, ...) and simple
    /// packet blocks (no timestamp) left out.
    pub skipped_blocks: u64,
}

fn u16_of(b: &[u8], big: bool) -> u16 {
    let a = [b[0], b[1]];
    if big {
        u16::from_be_bytes(a)
    } else {
        u16::from_le_bytes(a)
    }
}

fn u32_of(b: &[u8], big: bool) -> u32 {
    let a = [b[0], b[1], b[2], b[3]];
    if big {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

/// Reads exactly `buf.len()` bytes; Ok(false) at a clean end (nothing read),
/// Err(Truncated) when the file ends within them.
fn read_full(r: &mut impl Read, buf: &mut [u8], offset: u64, what: &str) -> Result<bool, CaptureError> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(CaptureError::Truncated { offset, what: what.into() }),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(CaptureError::Io(e.to_string())),
        }
    }
    Ok(true)
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file's header (pcap) or first section header (pcapng).
    pub fn new(mut r: R) -> Result<CaptureReader<R>, CaptureError> {
        let mut magic = [0u8; 4];
        if !read_full(&mut r, &mut magic, 0, "the file header")? {
            return Err(CaptureError::NotACapture("the file is empty".into()));
        }
        let m = u32::from_le_bytes(magic);
        let mut reader = CaptureReader {
            r,
            format: Format::Pcap { big: false, nanos: false, link: 0 },
            offset: 4,
            done: false,
            skipped_blocks: 0,
        };
        match m {
            0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 => {
                let big = m == 0xd4c3_b2a1 || m == 0x4d3c_b2a1;
                let nanos = m == 0xa1b2_3c4d || m == 0x4d3c_b2a1;
                let mut rest = [0u8; 20];
                if !read_full(&mut reader.r, &mut rest, 4, "the pcap header")? {
                    return Err(CaptureError::Truncated { offset: 4, what: "the pcap header".into() });
                }
                reader.offset = 24;
                // the link type's low 16 bits (the upper ones carry FCS flags)
                let link = u32_of(&rest[16..20], big) as u16;
                reader.format = Format::Pcap { big, nanos, link };
            }
            0x0a0d_0d0a => {
                let mut len = [0u8; 4];
                if !read_full(&mut reader.r, &mut len, 4, "a section header")? {
                    return Err(CaptureError::Truncated { offset: 4, what: "a section header".into() });
                }
                reader.section_rest(0, len)?;
            }
            _ => {
                return Err(CaptureError::NotACapture(format!(
                    "its first bytes are {:02x} {:02x} {:02x} {:02x}",
                    magic[0], magic[1], magic[2], magic[3]
                )))
            }
        }
        Ok(reader)
    }

    /// pcap or pcapng.
    pub fn format_name(&self) -> &'static str {
        match self.format {
            Format::Pcap { .. } => "pcap",
            Format::PcapNg { .. } => "pcapng",
        }
    }

    /// Bytes read so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The rest of a pcapng section header at `at`, whose type and
    /// length (`len_bytes`, in the byte order the next 4 bytes give) were read.
    fn section_rest(&mut self, at: u64, len_bytes: [u8; 4]) -> Result<(), CaptureError> {
        let mut bom = [0u8; 4];
        if !read_full(&mut self.r, &mut bom, at + 8, "a section header")? {
            return Err(CaptureError::Truncated { offset: at + 8, what: "a section header".into() });
        }
        let big = match u32::from_le_bytes(bom) {
            0x1a2b_3c4d => false,
            0x4d3c_2b1a => true,
            _ => {
                return Err(CaptureError::Corrupt {
                    offset: at,
                    what: "a section header without its byte-order magic".into(),
                })
            }
        };
        let len = u32_of(&len_bytes, big);
        if !(28..=MAX_FRAME).contains(&len) || len % 4 != 0 {
            return Err(CaptureError::Corrupt { offset: at, what: format!("a section header of {len} bytes") });
        }
        let mut rest = vec![0u8; len as usize - 12];
        if !read_full(&mut self.r, &mut rest, at + 12, "a section header")? {
            return Err(CaptureError::Truncated { offset: at + 12, what: "a section header".into() });
        }
        self.offset = at + u64::from(len);
        // a new section: its own byte order and interfaces
        self.format = Format::PcapNg { big, ifaces: Vec::new() };
        Ok(())
    }

    /// The next frame; None at the end; an error once (then None).
    pub fn next_frame(&mut self) -> Option<Result<Frame, CaptureError>> {
        let mut data = Vec::new();
        self.next_frame_into(&mut data)
            .map(|r| r.map(|h| Frame { t_ns: h.t_ns, link: h.link, data, orig_len: h.orig_len }))
    }

    /// The same into `data` (reused from frame to frame: no allocation per
    /// frame); returns the frame's time, link type and length on the wire.
    pub fn next_frame_into(&mut self, data: &mut Vec<u8>) -> Option<Result<FrameHead, CaptureError>> {
        if self.done {
            return None;
        }
        let r = match self.format {
            Format::Pcap { big, nanos, link } => self.pcap_record(big, nanos, link, data),
            Format::PcapNg { .. } => self.pcapng_block(data),
        };
        match r {
            Ok(Some(f)) => Some(Ok(f)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }

    fn pcap_record(
        &mut self,
        big: bool,
        nanos: bool,
        link: u16,
        data: &mut Vec<u8>,
    ) -> Result<Option<FrameHead>, CaptureError> {
        let at = self.offset;
        let mut head = [0u8; 16];
        if !read_full(&mut self.r, &mut head, at, "a packet record's header")? {
            return Ok(None);
        }
        let (sec, frac) = (u32_of(&head[0..4], big), u32_of(&head[4..8], big));
        let (incl, orig) = (u32_of(&head[8..12], big), u32_of(&head[12..16], big));
        if incl > MAX_FRAME {
            return Err(CaptureError::Corrupt { offset: at, what: format!("a packet record of {incl} bytes") });
        }
        data.resize(incl as usize, 0);
        if !read_full(&mut self.r, data, at, "a packet record")? && incl > 0 {
            return Err(CaptureError::Truncated { offset: at, what: "a packet record".into() });
        }
        self.offset = at + 16 + u64::from(incl);
        let frac_ns = if nanos { i64::from(frac) } else { i64::from(frac) * 1000 };
        Ok(Some(FrameHead { t_ns: i64::from(sec) * 1_000_000_000 + frac_ns, link, orig_len: orig }))
    }

    fn pcapng_block(&mut self, data: &mut Vec<u8>) -> Result<Option<FrameHead>, CaptureError> {
        loop {
            let at = self.offset;
            let mut head = [0u8; 8];
            if !read_full(&mut self.r, &mut head, at, "a block header")? {
                return Ok(None);
            }
            let Format::PcapNg { big, .. } = self.format else { return Ok(None) };
            let kind = u32_of(&head[0..4], big);
            if kind == 0x0a0d_0d0a {
                self.section_rest(at, [head[4], head[5], head[6], head[7]])?;
                continue;
            }
            let len = u32_of(&head[4..8], big);
            if !(12..=MAX_FRAME + 64).contains(&len) || len % 4 != 0 {
                return Err(CaptureError::Corrupt { offset: at, what: format!("a block of {len} bytes") });
            }
            let mut body = vec![0u8; len as usize - 8];
            if !read_full(&mut self.r, &mut body, at, "a block")? {
                return Err(CaptureError::Truncated { offset: at, what: "a block".into() });
            }
            self.offset = at + u64::from(len);
            let body = &body[..body.len() - 4];
            let Format::PcapNg { ifaces, .. } = &mut self.format else { return Ok(None) };
            match kind {
                // interface description: link type, snap length, options
                1 if body.len() >= 8 => {
                    let mut iface = Iface { link: u16_of(&body[0..2], big), per_sec: 1_000_000, offset_s: 0 };
                    let mut opts = &body[8..];
                    while opts.len() >= 4 {
                        let (code, olen) = (u16_of(&opts[0..2], big), u16_of(&opts[2..4], big) as usize);
                        if code == 0 || opts.len() < 4 + olen {
                            break;
                        }
                        let v = &opts[4..4 + olen];
                        if code == 9 && olen >= 1 {
                            let e = u32::from(v[0] & 0x7f);
                            iface.per_sec = if v[0] & 0x80 == 0 { 10u64.saturating_pow(e) } else { 1u64 << e.min(63) };
                        } else if code == 14 && olen >= 8 {
                            let b = [v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]];
                            iface.offset_s = if big { i64::from_be_bytes(b) } else { i64::from_le_bytes(b) };
                        }
                        opts = &opts[(4 + olen).div_ceil(4) * 4..];
                    }
                    ifaces.push(iface);
                }
                // enhanced packet
                6 if body.len() >= 20 => {
                    let id = u32_of(&body[0..4], big) as usize;
                    let Some(iface) = ifaces.get(id).copied() else {
                        return Err(CaptureError::Corrupt {
                            offset: at,
                            what: format!("a packet of interface {id}, not described"),
                        });
                    };
                    let ts = (u64::from(u32_of(&body[4..8], big)) << 32) | u64::from(u32_of(&body[8..12], big));
                    let (cap, orig) = (u32_of(&body[12..16], big) as usize, u32_of(&body[16..20], big));
                    if 20 + cap > body.len() {
                        return Err(CaptureError::Corrupt {
                            offset: at,
                            what: "a packet longer than its block".into(),
                        });
                    }
                    let per = iface.per_sec.max(1);
                    let ns = (u128::from(ts / per) * 1_000_000_000
                        + u128::from(ts % per) * 1_000_000_000 / u128::from(per)) as i64;
                    data.clear();
                    data.extend_from_slice(&body[20..20 + cap]);
                    return Ok(Some(FrameHead {
                        t_ns: ns + iface.offset_s * 1_000_000_000,
                        link: iface.link,
                        orig_len: orig,
                    }));
                }
                _ => self.skipped_blocks += 1,
            }
        }
    }
}

/// Writes frames as pcap (nanosecond timestamps).
pub struct PcapWriter<W: Write> {
    w: W,
}

impl<W: Write> PcapWriter<W> {
    pub fn new(mut w: W, link: u16, snaplen: u32) -> io::Result<PcapWriter<W>> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&snaplen.to_le_bytes());
        h.extend_from_slice(&u32::from(link).to_le_bytes());
        w.write_all(&h)?;
        Ok(PcapWriter { w })
    }

    pub fn write(&mut self, t_ns: i64, data: &[u8], orig_len: u32) -> io::Result<()> {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((t_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((t_ns % 1_000_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(data.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&orig_len.to_le_bytes());
        self.w.write_all(&h)?;
        self.w.write_all(data)
    }

    pub fn into_inner(self) -> W {
        self.w
    }
}

/// TCP flags.
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const ACK: u8 = 0x10;

/// One TCP segment as the capture saw it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Segment {
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    /// The window field as sent (unscaled).
    pub win: u16,
    /// Payload bytes, from the IP header's lengths (not what the snap length kept).
    pub len: u32,
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub sack: Vec<(u32, u32)>,
    /// It carries the timestamps option (12 bytes of every segment, with padding, once both SYNs had it).
    pub timestamps: bool,
}

/// Why a frame was not a TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Not IP, or IP but not TCP.
    NotTcp,
    /// Cut by the snap length before the TCP header's end.
    Short,
    /// A fragment after the first (no TCP header in it).
    Fragment,
    /// A link-layer type this reader does not decode.
    Link(u16),
}

/// Decodes a frame down to its TCP segment.
pub fn decode(link: u16, data: &[u8]) -> Result<Segment, Skip> {
    let (ethertype, ip) = match link {
        LINKTYPE_ETHERNET => {
            if data.len() < 14 {
                return Err(Skip::Short);
            }
            let mut t = u16::from_be_bytes([data[12], data[13]]);
            let mut at = 14;
            // 802.1Q and 802.1ad tags, stacked
            while matches!(t, 0x8100 | 0x88a8 | 0x9100) {
                if data.len() < at + 4 {
                    return Err(Skip::Short);
                }
                t = u16::from_be_bytes([data[at + 2], data[at + 3]]);
                at += 4;
            }
            (t, &data[at..])
        }
        LINKTYPE_LINUX_SLL => {
            if data.len() < 16 {
                return Err(Skip::Short);
            }
            (u16::from_be_bytes([data[14], data[15]]), &data[16..])
        }
        LINKTYPE_LINUX_SLL2 => {
            if data.len() < 20 {
                return Err(Skip::Short);
            }
            (u16::from_be_bytes([data[0], data[1]]), &data[20..])
        }
        LINKTYPE_RAW | LINKTYPE_IPV4 | LINKTYPE_IPV6 => (0, data),
        l if DLT_RAW_ALT.contains(&l) => (0, data),
        LINKTYPE_NULL | LINKTYPE_LOOP => {
            if data.len() < 4 {
                return Err(Skip::Short);
            }
            (0, &data[4..])
        }
        other => return Err(Skip::Link(other)),
    };
    let version = ip.first().map(|b| b >> 4);
    match (ethertype, version) {
        (0x0800, _) | (0, Some(4)) => ipv4(ip),
        (0x86dd, _) | (0, Some(6)) => ipv6(ip),
        (0, None) => Err(Skip::Short),
        _ => Err(Skip::NotTcp),
    }
}

fn ipv4(ip: &[u8]) -> Result<Segment, Skip> {
    if ip.len() < 20 {
        return Err(Skip::Short);
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if ip[9] != 6 {
        return Err(Skip::NotTcp);
    }
    if u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff != 0 {
        return Err(Skip::Fragment);
    }
    if ihl < 20 || ip.len() < ihl {
        return Err(Skip::Short);
    }
    let src = IpAddr::V4(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]));
    let dst = IpAddr::V4(Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]));
    // a TSO/GRO super-packet seen at the host may carry 0 as its length
    let total = if total == 0 { ip.len() } else { total };
    tcp(&ip[ihl..], total.saturating_sub(ihl), src, dst)
}

fn ipv6(ip: &[u8]) -> Result<Segment, Skip> {
    if ip.len() < 40 {
        return Err(Skip::Short);
    }
    let payload = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    let mut next = ip[6];
    let mut at = 40;
    let mut left = if payload == 0 { ip.len() - 40 } else { payload };
    let octets = |b: &[u8]| -> [u8; 16] {
        let mut o = [0u8; 16];
        o.copy_from_slice(&b[..16]);
        o
    };
    let src = IpAddr::V6(Ipv6Addr::from(octets(&ip[8..24])));
    let dst = IpAddr::V6(Ipv6Addr::from(octets(&ip[24..40])));
    // extension headers: hop-by-hop, routing, fragment, destination options, AH
    loop {
        match next {
            6 => return tcp(&ip[at..], left, src, dst),
            0 | 43 | 60 | 44 | 51 => {
                if ip.len() < at + 8 {
                    return Err(Skip::Short);
                }
                let len = match next {
                    44 => {
                        if u16::from_be_bytes([ip[at + 2], ip[at + 3]]) & 0xfff8 != 0 {
                            return Err(Skip::Fragment);
                        }
                        8
                    }
                    51 => (usize::from(ip[at + 1]) + 2) * 4,
                    _ => (usize::from(ip[at + 1]) + 1) * 8,
                };
                next = ip[at];
                at += len;
                left = left.saturating_sub(len);
            }
            _ => return Err(Skip::NotTcp),
        }
    }
}

fn tcp(t: &[u8], len_from_ip: usize, src: IpAddr, dst: IpAddr) -> Result<Segment, Skip> {
    if t.len() < 20 {
        return Err(Skip::Short);
    }
    let off = usize::from(t[12] >> 4) * 4;
    if off < 20 {
        return Err(Skip::NotTcp);
    }
    if t.len() < off {
        return Err(Skip::Short);
    }
    let be16 = |i: usize| u16::from_be_bytes([t[i], t[i + 1]]);
    let be32 = |i: usize| u32::from_be_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
    let mut s = Segment {
        src: Some(SocketAddr::new(src, be16(0))),
        dst: Some(SocketAddr::new(dst, be16(2))),
        seq: be32(4),
        ack: be32(8),
        flags: t[13],
        win: be16(14),
        len: len_from_ip.saturating_sub(off) as u32,
        ..Segment::default()
    };
    let mut o = &t[20..off];
    while let Some(&kind) = o.first() {
        match kind {
            0 => break,
            1 => o = &o[1..],
            _ => {
                let Some(&l) = o.get(1) else { break };
                let l = usize::from(l);
                if l < 2 || o.len() < l {
                    break;
                }
                let v = &o[2..l];
                match (kind, v.len()) {
                    (2, 2) => s.mss = Some(u16::from_be_bytes([v[0], v[1]])),
                    (3, 1) => s.wscale = Some(v[0].min(14)),
                    (8, 8) => s.timestamps = true,
                    (5, n) if n % 8 == 0 => {
                        for b in v.chunks_exact(8) {
                            let left = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                            let right = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
                            s.sack.push((left, right));
                        }
                    }
                    _ => {}
                }
                o = &o[l..];
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 TCP segment: ports, seq, ack, flags, window, options, payload length.
    pub(crate) fn v4_segment(seq: u32, ack: u32, flags: u8, win: u16, opts: &[u8], payload: usize) -> Vec<u8> {
        let off = 20 + opts.len();
        let total = 20 + off + payload;
        let mut p =
            vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        p.extend_from_slice(&40000u16.to_be_bytes());
        p.extend_from_slice(&5201u16.to_be_bytes());
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&ack.to_be_bytes());
        p.push(((off / 4) as u8) << 4);
        p.push(flags);
        p.extend_from_slice(&win.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 0]);
        p.extend_from_slice(opts);
        p.extend(std::iter::repeat_n(0u8, payload));
        p
    }

    #[test]
    fn a_pcap_written_is_read_back_with_its_segments() {
        let mut w = PcapWriter::new(Vec::new(), LINKTYPE_RAW, 96).expect("header");
        let syn = v4_segment(1000, 0, SYN, 65535, &[2, 4, 5, 0xb4, 1, 3, 3, 7], 0);
        let data = v4_segment(1001, 1, ACK, 512, &[], 1448);
        w.write(1_700_000_000_123_456_789, &syn, syn.len() as u32).expect("syn");
        w.write(1_700_000_000_223_456_789, &data[..96], data.len() as u32).expect("data");
        let bytes = w.into_inner();
        let mut r = CaptureReader::new(&bytes[..]).expect("reader");
        let f = r.next_frame().expect("one").expect("ok");
        assert_eq!((f.t_ns, f.link), (1_700_000_000_123_456_789, LINKTYPE_RAW));
        let s = decode(f.link, &f.data).expect("tcp");
        assert_eq!((s.seq, s.flags, s.mss, s.wscale, s.len), (1000, SYN, Some(1460), Some(7), 0));
        let f = r.next_frame().expect("two").expect("ok");
        assert_eq!(f.orig_len as usize, data.len());
        // cut by the snap length: the payload's length still comes from the IP header
        assert_eq!(decode(f.link, &f.data).expect("tcp").len, 1448);
        assert!(r.next_frame().is_none());
        // a truncated file: the whole packets, then where it ended
        let cut = &bytes[..bytes.len() - 10];
        let mut r = CaptureReader::new(cut).expect("reader");
        assert!(r.next_frame().is_some_and(|f| f.is_ok()));
        match r.next_frame() {
            Some(Err(CaptureError::Truncated { offset, .. })) => assert_eq!(offset, 24 + 16 + syn.len() as u64),
            other => panic!("{other:?}"),
        }
        assert!(r.next_frame().is_none());
        assert!(matches!(CaptureReader::new(&b"GIF89a.."[..]), Err(CaptureError::NotACapture(_))));
    }

    #[test]
    fn pcapng_with_its_own_time_resolution_and_ethernet_vlan_ipv6() {
        // IPv6 in 802.1Q-tagged Ethernet, a hop-by-hop header before TCP
        let mut ip6 = vec![0x60, 0, 0, 0, 0, 0, 0, 64];
        ip6.extend_from_slice(&[0u8; 15]);
        ip6.push(1);
        ip6.extend_from_slice(&[0u8; 15]);
        ip6.push(2);
        let hbh = [6u8, 0, 1, 4, 0, 0, 0, 0];
        let mut tcp = v4_segment(7, 9, ACK, 100, &[1, 1, 5, 10, 0, 0, 0, 20, 0, 0, 0, 30], 100)[20..].to_vec();
        tcp.truncate(32 + 100);
        let plen = (hbh.len() + tcp.len()) as u16;
        ip6[4..6].copy_from_slice(&plen.to_be_bytes());
        ip6[6] = 0;
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x81, 0x00, 0, 5, 0x86, 0xdd]);
        frame.extend_from_slice(&ip6);
        frame.extend_from_slice(&hbh);
        frame.extend_from_slice(&tcp);
        let mut f = Vec::new();
        let block = |f: &mut Vec<u8>, kind: u32, body: &[u8]| {
            let len = 12 + body.len().div_ceil(4) * 4;
            f.extend_from_slice(&kind.to_le_bytes());
            f.extend_from_slice(&(len as u32).to_le_bytes());
            f.extend_from_slice(body);
            f.extend(std::iter::repeat_n(0u8, len - 12 - body.len()));
            f.extend_from_slice(&(len as u32).to_le_bytes());
        };
        let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
        shb.extend_from_slice(&[1, 0, 0, 0]);
        shb.extend_from_slice(&(-1i64).to_le_bytes());
        block(&mut f, 0x0a0d_0d0a, &shb);
        // Ethernet, snap 262144, if_tsresol 9 (ns)
        let mut idb = vec![1, 0, 0, 0, 0, 0, 4, 0];
        idb.extend_from_slice(&[9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
        block(&mut f, 1, &idb);
        block(&mut f, 4, &[0u8; 8]); // a name resolution block: skipped
        let ts: u64 = 1_700_000_000_000_000_001;
        let mut epb = 0u32.to_le_bytes().to_vec();
        epb.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(ts as u32).to_le_bytes());
        epb.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        epb.extend_from_slice(&frame);
        block(&mut f, 6, &epb);
        let mut r = CaptureReader::new(&f[..]).expect("pcapng");
        let fr = r.next_frame().expect("frame").expect("ok");
        assert_eq!(fr.t_ns, 1_700_000_000_000_000_001);
        let s = decode(fr.link, &fr.data).expect("tcp");
        assert!(s.src.is_some_and(|a| a.ip().is_ipv6()));
        assert_eq!((s.seq, s.ack, s.len), (7, 9, 100));
        assert_eq!(s.sack, vec![(20, 30)]);
        assert_eq!(r.skipped_blocks, 1);
        assert!(r.next_frame().is_none());
        assert_eq!(decode(105, &frame), Err(Skip::Link(105)));
        assert_eq!(decode(LINKTYPE_ETHERNET, &frame[..30]), Err(Skip::Short));
    }
}
