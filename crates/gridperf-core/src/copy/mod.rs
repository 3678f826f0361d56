//! `gridperf copy`'s pure parts: how a file is cut into blocks, each
//! block's BLAKE3 chaining value (so that the whole file's BLAKE3 follows
//! from the blocks' values in any order, without reading it again), the
//! manifest kept beside a partial file, and the frames a data connection
//! carries.
//!
//! A block is `block` bytes (a power of two, at least BLAKE3's 1 KiB
//! chunk) at an offset that is a multiple of it; the last one may be
//! shorter. Such a block is a complete BLAKE3 subtree, so its chaining
//! value can be computed alone (`hazmat::set_input_offset`) and the
//! values merged into the root hash in BLAKE3's own tree order.

pub mod pool;
pub mod seal;

use blake3::hazmat::{merge_subtrees_non_root, merge_subtrees_root, ChainingValue, HasherExt, Mode};
use serde::{Deserialize, Serialize};

pub use blake3::Hash;

/// The plain BLAKE3 of some bytes (a one-block file's whole hash).
pub fn whole_hash(data: &[u8]) -> Hash {
    blake3::hash(data)
}

/// Block sizes a copy may use.
pub const MIN_BLOCK: u64 = 64 << 10;
pub const MAX_BLOCK: u64 = 64 << 20;
pub const DEFAULT_BLOCK: u64 = 4 << 20;

/// Blocks a file of `size` bytes has (none for an empty file).
pub fn block_count(size: u64, block: u64) -> u64 {
    size.div_ceil(block)
}

/// The length of block `index` of a file of `size` bytes.
pub fn block_len(size: u64, block: u64, index: u64) -> u64 {
    block.min(size.saturating_sub(index * block))
}

/// Whether `block` is a size a copy may use: a power of two from 64 KiB to 64 MiB.
pub fn check_block(block: u64) -> Result<(), String> {
    if !block.is_power_of_two() || !(MIN_BLOCK..=MAX_BLOCK).contains(&block) {
        return Err(format!("a block of {block} bytes: give a power of two from 64K to 64M (e.g. 4M)"));
    }
    Ok(())
}

/// A block's chaining value: BLAKE3 of its bytes as the subtree at `offset`.
pub fn block_cv(data: &[u8], offset: u64) -> ChainingValue {
    let mut h = blake3::Hasher::new();
    h.set_input_offset(offset);
    h.update(data);
    h.finalize_non_root()
}

/// The whole file's BLAKE3 from its blocks' chaining values, in order.
/// A file of one block (or none) has no parent node: its hash is the
/// plain hash of its bytes, which the caller gives as `single`.
pub fn file_hash(cvs: &[ChainingValue], size: u64, block: u64, single: Option<blake3::Hash>) -> Option<blake3::Hash> {
    if cvs.len() <= 1 {
        return match (size, single) {
            (0, _) => Some(blake3::hash(b"")),
            (_, s) => s,
        };
    }
    // the root splits at BLAKE3's left subtree length: a power of two of
    // bytes, so a whole number of blocks
    let left = blake3::hazmat::left_subtree_len(size);
    let n = (left / block) as usize;
    let (l, r) = (subtree(&cvs[..n], left, block), subtree(&cvs[n..], size - left, block));
    Some(merge_subtrees_root(&l, &r, Mode::Hash))
}

fn subtree(cvs: &[ChainingValue], len: u64, block: u64) -> ChainingValue {
    if cvs.len() == 1 {
        return cvs[0];
    }
    let left = blake3::hazmat::left_subtree_len(len);
    let n = (left / block) as usize;
    merge_subtrees_non_root(&subtree(&cvs[..n], left, block), &subtree(&cvs[n..], len - left, block), Mode::Hash)
}

/// Lowercase hex of a hash or chaining value.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What is known of a partial file, kept beside it (`.NAME.gridperf-manifest`):
/// the source it is a copy of (size and modification time: another source
/// starts the copy over), the block size, and each block's chaining value
/// once it arrived verified. A resume re-hashes each such block in the
/// partial file against it: a size is never trusted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    pub size: u64,
    pub mtime_ns: i128,
    pub block: u64,
    /// Per block: its chaining value (hex) once verified; null before.
    pub blocks: Vec<Option<String>>,
    /// The whole file's BLAKE3 of a one-block file (it has no tree).
    #[serde(default)]
    pub single: Option<String>,
}

impl Manifest {
    pub const VERSION: u32 = 1;

    pub fn new(size: u64, mtime_ns: i128, block: u64) -> Manifest {
        Manifest {
            version: Self::VERSION,
            size,
            mtime_ns,
            block,
            blocks: vec![None; block_count(size, block) as usize],
            single: None,
        }
    }

    /// Whether it describes a copy of this source with these blocks.
    pub fn matches(&self, size: u64, mtime_ns: i128, block: u64) -> bool {
        self.version == Self::VERSION
            && self.size == size
            && self.mtime_ns == mtime_ns
            && self.block == block
            && self.blocks.len() as u64 == block_count(size, block)
    }

    /// The chaining values, if every block has one.
    pub fn cvs(&self) -> Option<Vec<ChainingValue>> {
        self.blocks.iter().map(|b| b.as_deref().and_then(unhex32)).collect()
    }
}

/// 32 bytes from 64 hex digits.
pub fn unhex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Ranges of block indexes [start, end), from a list of indexes in order.
pub fn ranges(indexes: impl IntoIterator<Item = u64>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for i in indexes {
        match out.last_mut() {
            Some((_, end)) if *end == i => *end += 1,
            _ => out.push((i, i + 1)),
        }
    }
    out
}

/// The names a list holds more than once: two sources that land on one
/// destination (`copy a/x b/x HOST:dst/`), which would make one file of both.
pub fn named_twice<'a>(names: impl IntoIterator<Item = &'a str>) -> std::collections::HashSet<&'a str> {
    let mut seen = std::collections::HashSet::new();
    let mut twice = std::collections::HashSet::new();
    for n in names {
        if !seen.insert(n) {
            twice.insert(n);
        }
    }
    twice
}

/// A path as a copy names it beneath an agent's root (or a destination
/// directory): relative, its parts plain names (no `..`, `.`, empty part or
/// NUL), at most 4096 bytes. What it refuses, it says.
pub fn check_relative(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("an empty path".into());
    }
    if path.len() > 4096 {
        return Err(format!("a path of {} bytes: at most 4096", path.len()));
    }
    if path.starts_with('/') {
        return Err(format!("{path:?} is absolute: a copy's paths are relative to the agent's root"));
    }
    for part in path.split('/') {
        if part.is_empty() || part == "." || part == ".." || part.contains('\0') {
            return Err(format!("{path:?}: a part {part:?} is not a plain name (no '..', '.', '//' or NUL)"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes that differ from block to block.
    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i as u64).wrapping_mul(2654435761).to_le_bytes()[3]).collect()
    }

    #[test]
    fn the_file_hash_from_its_blocks_is_blake3_of_the_file() {
        let block = MIN_BLOCK as usize;
        for size in
            [1, 1000, 1024, 1025, block - 1, block, block + 1, 2 * block, 3 * block + 17, 5 * block, 8 * block + 1]
        {
            let bytes = data(size);
            let cvs: Vec<ChainingValue> =
                bytes.chunks(block).enumerate().map(|(i, c)| block_cv(c, (i * block) as u64)).collect();
            let single = (cvs.len() == 1).then(|| blake3::hash(&bytes));
            assert_eq!(file_hash(&cvs, size as u64, block as u64, single), Some(blake3::hash(&bytes)), "{size}");
        }
        assert_eq!(file_hash(&[], 0, MIN_BLOCK, None), Some(blake3::hash(b"")));
        assert_eq!(block_count(0, MIN_BLOCK), 0);
        assert_eq!((block_len(100_000, MIN_BLOCK, 1), block_len(100_000, MIN_BLOCK, 0)), (100_000 - 65_536, 65_536));
    }

    #[test]
    fn a_changed_byte_changes_the_blocks_value() {
        let mut bytes = data(MIN_BLOCK as usize);
        let before = block_cv(&bytes, MIN_BLOCK);
        bytes[1234] ^= 1;
        assert_ne!(block_cv(&bytes, MIN_BLOCK), before);
        // and the same bytes at another offset are another subtree
        assert_ne!(block_cv(&bytes, 0), block_cv(&bytes, MIN_BLOCK));
    }

    #[test]
    fn ranges_join_what_follows_on() {
        assert_eq!(ranges([0, 1, 2, 5, 7, 8]), [(0, 3), (5, 6), (7, 9)]);
    }

    #[test]
    fn only_plain_relative_paths_pass() {
        for ok in ["a", "dir/file.dat", "a/b/c", "..a", "a.."] {
            assert_eq!(check_relative(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("/etc/passwd", "absolute"),
            ("../x", "not a plain name"),
            ("a/../../x", "not a plain name"),
            ("a//b", "not a plain name"),
            ("./a", "not a plain name"),
            ("a/\0", "not a plain name"),
        ] {
            assert!(check_relative(bad).expect_err(bad).contains(why), "{bad}");
        }
        assert!(check_block(4 << 20).is_ok());
        for b in [0, 1000, 3 << 20, 128 << 20, 32 << 10] {
            assert!(check_block(b).is_err(), "{b}");
        }
    }

    #[test]
    fn a_manifest_matches_only_its_source() {
        let mut m = Manifest::new(3 * MIN_BLOCK + 5, 1_700_000_000_000_000_000, MIN_BLOCK);
        assert_eq!(m.blocks.len(), 4);
        assert!(m.matches(3 * MIN_BLOCK + 5, 1_700_000_000_000_000_000, MIN_BLOCK));
        assert!(!m.matches(3 * MIN_BLOCK + 5, 1_700_000_000_000_000_001, MIN_BLOCK), "touched");
        assert!(!m.matches(3 * MIN_BLOCK + 6, 1_700_000_000_000_000_000, MIN_BLOCK), "grown");
        assert_eq!(m.cvs(), None);
        for b in &mut m.blocks {
            *b = Some(hex(&[7; 32]));
        }
        assert_eq!(m.cvs(), Some(vec![[7; 32]; 4]));
        assert_eq!(unhex32("zz"), None);
    }
}

/// A checksum a catalogue expects beside BLAKE3 (Rucio, FTS and GridFTP
/// use adler32 and md5; sha256 where integrity policies ask for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Checksum {
    Md5,
    Sha256,
    Adler32,
}

impl Checksum {
    pub const VALID: &'static str = "md5, sha256, adler32";

    pub fn parse(s: &str) -> Result<Checksum, String> {
        match s {
            "md5" => Ok(Checksum::Md5),
            "sha256" => Ok(Checksum::Sha256),
            "adler32" => Ok(Checksum::Adler32),
            other => Err(format!("--checksum {other}: give one of {}", Checksum::VALID)),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Checksum::Md5 => "md5",
            Checksum::Sha256 => "sha256",
            Checksum::Adler32 => "adler32",
        }
    }

    pub fn summer(self) -> Summer {
        use md5::Digest as _;
        match self {
            Checksum::Md5 => Summer::Md5(md5::Md5::new()),
            Checksum::Sha256 => Summer::Sha256(sha2::Sha256::new()),
            Checksum::Adler32 => Summer::Adler32(adler2::Adler32::new()),
        }
    }
}

/// A checksum being computed over a file's bytes, in order.
pub enum Summer {
    Md5(md5::Md5),
    Sha256(sha2::Sha256),
    Adler32(adler2::Adler32),
}

impl Summer {
    pub fn update(&mut self, data: &[u8]) {
        use md5::Digest as _;
        match self {
            Summer::Md5(h) => h.update(data),
            Summer::Sha256(h) => h.update(data),
            Summer::Adler32(h) => h.write_slice(data),
        }
    }

    /// The checksum in lowercase hex (adler32: its 8 hex digits, as Rucio writes it).
    pub fn hex(self) -> String {
        use md5::Digest as _;
        match self {
            Summer::Md5(h) => hex(&h.finalize()),
            Summer::Sha256(h) => hex(&h.finalize()),
            Summer::Adler32(h) => format!("{:08x}", h.checksum()),
        }
    }
}

#[cfg(test)]
mod checksum_tests {
    use super::*;

    #[test]
    fn the_catalogues_checksums_of_known_inputs() {
        let sum = |c: Checksum, parts: &[&[u8]]| {
            let mut s = c.summer();
            for p in parts {
                s.update(p);
            }
            s.hex()
        };
        // RFC 1321, FIPS 180-2 and zlib's adler32 of "abc"
        assert_eq!(sum(Checksum::Md5, &[b"a", b"bc"]), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            sum(Checksum::Sha256, &[b"ab", b"c"]),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(sum(Checksum::Adler32, &[b"abc"]), "024d0127");
        assert_eq!(sum(Checksum::Adler32, &[]), "00000001");
        assert!(Checksum::parse("crc32").expect_err("unknown").contains("md5, sha256, adler32"));
    }
}
