//! Fuzzing on stable Rust, bounded in time, shared by the crates' fuzz
//! tests: a target's corpus (`fuzz/corpus/TARGET/` of the crate that
//! tests it) is fed, mutated, to a check that must answer every input with
//! a value or an error, never a panic, a hang or an allocation out of
//! proportion. No coverage feedback: a mutator, seeded by the corpus.
//!
//! `FUZZ_SECONDS` sets each target's time (default 3); an input that panics
//! is written to target/fuzz-crashes/ and fails the test.
#![doc(hidden)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// xorshift64*: fast, seeded, reproducible.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Bytes that matter to JSON, numbers and our units.
pub const INTERESTING: &[&[u8]] = &[
    b"\"",
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"-1",
    b"0",
    b"1e999",
    b"18446744073709551616",
    b"4294967296",
    b"null",
    b"true",
    b"\"tcp\"",
    b"\"udp\"",
    b"\xff",
    b"\x00",
    b"NaN",
    b"..",
    b"/",
    b"%",
    b"k",
    b"KiB",
    b"ms",
    b"G",
    b"\xe2\x80\xae",
];

pub fn mutate(rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(8) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next_u64() as u8;
            }
            2 => v.insert(at, rng.next_u64() as u8),
            3 if !v.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                v.drain(at.min(end)..end);
            }
            4 => {
                let s = INTERESTING[rng.below(INTERESTING.len())];
                v.splice(at..at, s.iter().copied());
            }
            5 if !v.is_empty() => {
                // repeat a chunk: deep nesting, long arrays
                let start = rng.below(v.len());
                let end = (start + 1 + rng.below(32)).min(v.len());
                let chunk = v[start..end].to_vec();
                for _ in 0..rng.below(64) {
                    v.splice(at..at, chunk.iter().copied());
                }
            }
            6 if !corpus.is_empty() => {
                // splice in part of another seed
                let other = &corpus[rng.below(corpus.len())];
                let from = rng.below(other.len());
                let to = (from + rng.below(other.len() - from + 1)).min(other.len());
                v.splice(at..at, other[from..to].iter().copied());
            }
            _ => {
                if let Some(i) = (!v.is_empty()).then(|| rng.below(v.len())) {
                    // a digit run: numbers at and past every bound
                    v.splice(i..i, std::iter::repeat_n(b'9', 1 + rng.below(24)));
                }
            }
        }
    }
    v.truncate(1 << 20);
    v
}

/// A target's corpus beneath a crate's directory.
pub fn corpus_dir(crate_dir: &Path, target: &str) -> PathBuf {
    crate_dir.join("fuzz/corpus").join(target)
}

fn load(crate_dir: &Path, target: &str) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(corpus_dir(crate_dir, target))
        .map(|d| d.flatten().filter_map(|e| std::fs::read(e.path()).ok()).collect())
        .unwrap_or_default();
    out.sort();
    assert!(!out.is_empty(), "no corpus for {target} in {}", corpus_dir(crate_dir, target).display());
    out
}

pub fn budget() -> Duration {
    let s: f64 = std::env::var("FUZZ_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3.0);
    Duration::from_secs_f64(s)
}

/// Feeds `target` mutations of its corpus (beneath `crate_dir`) for the
/// budget; fails on a panic or an input that takes a second. The inputs it ran.
pub fn fuzz(crate_dir: &Path, target: &str, check: fn(&[u8])) -> u64 {
    let corpus = load(crate_dir, target);
    for seed in &corpus {
        check(seed);
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ target.len() as u64);
    let until = Instant::now() + budget();
    let mut runs = 0u64;
    let mut slowest = Duration::ZERO;
    while Instant::now() < until {
        let pick = rng.below(corpus.len());
        let input = mutate(&mut rng, &corpus[pick], &corpus);
        let t0 = Instant::now();
        if std::panic::catch_unwind(|| check(&input)).is_err() {
            let dir = crate_dir.join("../../target/fuzz-crashes");
            let _ = std::fs::create_dir_all(&dir);
            let path = dir.join(format!("{target}-{runs}"));
            let _ = std::fs::write(&path, &input);
            panic!("{target}: input {runs} panicked; it is in {}", path.display());
        }
        slowest = slowest.max(t0.elapsed());
        runs += 1;
    }
    eprintln!("fuzz {target}: {runs} inputs in {:?}, none panicked; slowest {slowest:?}", budget());
    assert!(slowest < Duration::from_secs(1), "{target}: one input took {slowest:?}");
    runs
}
