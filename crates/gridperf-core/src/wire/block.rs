//! A copy's data connections' binary frames: a block's header (magic,
//! file, block index, length, the sender's chaining value; the block's
//! bytes follow) and the writing end's acknowledgment of it. Sealed with
//! `--encrypt` (`copy::seal`), each frame is then a sealed record.

use blake3::hazmat::ChainingValue;

/// The length of a data frame's header: magic, file, block index, length, chaining value.
pub const FRAME_HEADER: usize = 4 + 4 + 8 + 4 + 32;
/// A block frame's magic ("GPCB").
pub const FRAME_MAGIC: u32 = 0x4750_4342;
/// The file number of the frame that ends a stream's blocks.
pub const END_OF_BLOCKS: u32 = u32::MAX;
/// The length of an acknowledgment: file, block index, verdict.
pub const ACK_LEN: usize = 4 + 8 + 4;

/// A block on a data connection: which file, which block, its length and
/// its chaining value as the sender computed it; `len` bytes follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    pub file: u32,
    pub index: u64,
    pub len: u32,
    pub cv: ChainingValue,
}

impl BlockHeader {
    pub fn end() -> BlockHeader {
        BlockHeader { file: END_OF_BLOCKS, index: 0, len: 0, cv: [0; 32] }
    }

    pub fn encode(&self) -> [u8; FRAME_HEADER] {
        let mut b = [0u8; FRAME_HEADER];
        b[0..4].copy_from_slice(&FRAME_MAGIC.to_be_bytes());
        b[4..8].copy_from_slice(&self.file.to_be_bytes());
        b[8..16].copy_from_slice(&self.index.to_be_bytes());
        b[16..20].copy_from_slice(&self.len.to_be_bytes());
        b[20..52].copy_from_slice(&self.cv);
        b
    }

    pub fn decode(b: &[u8; FRAME_HEADER]) -> Result<BlockHeader, String> {
        let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if word(0) != FRAME_MAGIC {
            return Err(format!("not a block frame (magic {:08x})", word(0)));
        }
        let mut index = [0u8; 8];
        index.copy_from_slice(&b[8..16]);
        let mut cv = [0u8; 32];
        cv.copy_from_slice(&b[20..52]);
        Ok(BlockHeader { file: word(4), index: u64::from_be_bytes(index), len: word(16), cv })
    }
}

/// The receiver's word on a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckStatus {
    /// Arrived whole, verified and written.
    Ok,
    /// Arrived damaged: the sender sends it again.
    Damaged,
    /// Verified, but this end cannot write the file (a full disk, an I/O
    /// error): the sender gives the file up and sends no more of it; the
    /// writing end's outcome for the file says why.
    Failed,
}

/// The receiver's word on one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub file: u32,
    pub index: u64,
    pub status: AckStatus,
}

impl Ack {
    pub fn encode(&self) -> [u8; ACK_LEN] {
        let mut b = [0u8; ACK_LEN];
        b[0..4].copy_from_slice(&self.file.to_be_bytes());
        b[4..12].copy_from_slice(&self.index.to_be_bytes());
        let status: u32 = match self.status {
            AckStatus::Damaged => 0,
            AckStatus::Ok => 1,
            AckStatus::Failed => 2,
        };
        b[12..16].copy_from_slice(&status.to_be_bytes());
        b
    }

    /// An acknowledgment, or None for a status no receiver sends.
    pub fn decode(b: &[u8; ACK_LEN]) -> Option<Ack> {
        let mut index = [0u8; 8];
        index.copy_from_slice(&b[4..12]);
        let status = match u32::from_be_bytes([b[12], b[13], b[14], b[15]]) {
            0 => AckStatus::Damaged,
            1 => AckStatus::Ok,
            2 => AckStatus::Failed,
            _ => return None,
        };
        Some(Ack { file: u32::from_be_bytes([b[0], b[1], b[2], b[3]]), index: u64::from_be_bytes(index), status })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_a_stranger_is_refused() {
        let h = BlockHeader { file: 3, index: 77, len: 65536, cv: [9; 32] };
        assert_eq!(BlockHeader::decode(&h.encode()), Ok(h));
        let mut bad = h.encode();
        bad[0] = b'H';
        assert!(BlockHeader::decode(&bad).expect_err("magic").contains("not a block frame"));
        for status in [AckStatus::Ok, AckStatus::Damaged, AckStatus::Failed] {
            let a = Ack { file: 1, index: u64::MAX, status };
            assert_eq!(Ack::decode(&a.encode()), Some(a));
        }
        let mut odd = Ack { file: 1, index: 2, status: AckStatus::Ok }.encode();
        odd[15] = 7;
        assert_eq!(Ack::decode(&odd), None, "a status no receiver sends");
    }
}
