//! The header gridperf's UDP streams carry at the start of each datagram.

/// The UDP header gridperf's UDP streams carry at the start of each
/// datagram: stream index, sequence number from 0, and the sender's
/// monotonic send time in ns.
pub const UDP_HEADER_LEN: usize = 20;

/// Encodes the header into `buf[..UDP_HEADER_LEN]` (big-endian: u32 stream, u64 seq, u64 send_ns).
///
/// # Panics
///
/// If `buf` is shorter than [`UDP_HEADER_LEN`].
pub fn encode_udp_header(buf: &mut [u8], stream: u32, seq: u64, send_ns: u64) {
    assert!(buf.len() >= UDP_HEADER_LEN, "UDP buffer of {} bytes is shorter than the header", buf.len());
    buf[0..4].copy_from_slice(&stream.to_be_bytes());
    buf[4..12].copy_from_slice(&seq.to_be_bytes());
    buf[12..20].copy_from_slice(&send_ns.to_be_bytes());
}

/// Decodes a header; None if the datagram is shorter than the header.
pub fn decode_udp_header(buf: &[u8]) -> Option<(u32, u64, u64)> {
    let h = buf.get(..UDP_HEADER_LEN)?;
    let stream = u32::from_be_bytes(h[0..4].try_into().ok()?);
    let seq = u64::from_be_bytes(h[4..12].try_into().ok()?);
    let send_ns = u64::from_be_bytes(h[12..20].try_into().ok()?);
    Some((stream, seq, send_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_header_roundtrip() {
        let mut buf = [0xAAu8; 64];
        encode_udp_header(&mut buf, 7, 0x0102_0304_0506_0708, u64::MAX - 1);
        assert_eq!(&buf[..4], &[0, 0, 0, 7]);
        assert_eq!(&buf[4..12], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(buf[UDP_HEADER_LEN], 0xAA, "payload after the header is untouched");
        assert_eq!(decode_udp_header(&buf), Some((7, 0x0102_0304_0506_0708, u64::MAX - 1)));
        assert_eq!(decode_udp_header(&buf[..UDP_HEADER_LEN]), Some((7, 0x0102_0304_0506_0708, u64::MAX - 1)));
    }

    #[test]
    fn udp_header_short_buffer() {
        assert_eq!(decode_udp_header(&[0u8; UDP_HEADER_LEN - 1]), None);
        assert_eq!(decode_udp_header(&[]), None);
    }

    #[test]
    #[should_panic(expected = "shorter than the header")]
    fn udp_header_encode_short_buffer_panics() {
        encode_udp_header(&mut [0u8; 10], 0, 0, 0);
    }
}
