//! A copy's data channel, encrypted (`gridperf copy --encrypt`): the key
//! agreement and the sealed frames, no I/O.
//!
//! The client and the agent each make an ephemeral X25519 key pair for the
//! one copy and send the public halves on the control channel (the
//! client's in the request, the agent's right after it is ready). Each
//! side mixes the shared secret with both public keys and, when the
//! session was authenticated (`serve --auth`, `--key`), with a secret
//! derived from the session's key and both nonces: a man in the middle
//! who relays the authentication but swaps the public keys cannot derive
//! the same keys, and the first frame fails. Without keys the copy is
//! still encrypted against eavesdroppers, not against an active attacker
//! (the report says which).
//!
//! Every data connection has two keys, one per way (blocks one way,
//! acknowledgments the other), derived from the copy's with the stream's
//! index; each frame is sealed with AES-256-GCM under a counter nonce
//! that both ends keep (TCP delivers in order), so a frame dropped,
//! replayed, reordered or moved to another stream fails to open. A
//! block's header (which names the file, the block and its BLAKE3
//! chaining value) is sealed apart from its bytes, so that the receiver
//! learns the length to read only from a header that was authenticated.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use ring::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use ring::rand::SystemRandom;

/// The bytes a sealed frame adds: the AEAD's tag.
pub const TAG_LEN: usize = 16;
/// The cipher's name, as the report shows it.
pub const CIPHER: &str = "AES-256-GCM, keys by X25519";

const CONTEXT: &str = "gridperf 2026-11 copy data channel v1";

/// One side's half of the key agreement.
pub struct Exchange {
    private: EphemeralPrivateKey,
    public: [u8; 32],
}

impl Exchange {
    /// A fresh key pair for one copy.
    pub fn new() -> Result<Exchange, String> {
        let rng = SystemRandom::new();
        let private = EphemeralPrivateKey::generate(&X25519, &rng).map_err(|_| "no random key pair".to_string())?;
        let public = private.compute_public_key().map_err(|_| "no public key".to_string())?;
        let public: [u8; 32] =
            public.as_ref().try_into().map_err(|_| "a public key of the wrong length".to_string())?;
        Ok(Exchange { private, public })
    }

    /// This side's public key.
    pub fn public(&self) -> [u8; 32] {
        self.public
    }

    /// The copy's keys, from the other side's public key. `client`: this
    /// side is the client. `session`: the authenticated session's secret,
    /// if the session was authenticated (both sides must agree on it).
    pub fn agree(self, theirs: &[u8; 32], client: bool, session: Option<&[u8; 32]>) -> Result<CopyKeys, String> {
        let (client_pub, agent_pub) = if client { (self.public, *theirs) } else { (*theirs, self.public) };
        let peer = UnparsedPublicKey::new(&X25519, theirs);
        agreement::agree_ephemeral(self.private, &peer, |shared| {
            let mut h = blake3::Hasher::new_derive_key(CONTEXT);
            h.update(shared);
            h.update(&client_pub);
            h.update(&agent_pub);
            h.update(&[u8::from(session.is_some())]);
            h.update(session.unwrap_or(&[0u8; 32]));
            CopyKeys { master: *h.finalize().as_bytes(), authenticated: session.is_some() }
        })
        .map_err(|_| "the other side's public key is not a valid X25519 key".to_string())
    }
}

/// Which way a frame goes on a data connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// Blocks, from the end that reads the files to the end that writes them.
    Blocks,
    /// Acknowledgments, back.
    Acks,
}

/// A copy's keys.
#[derive(Clone)]
pub struct CopyKeys {
    master: [u8; 32],
    /// Whether the agreement was bound to an authenticated session.
    pub authenticated: bool,
}

impl std::fmt::Debug for CopyKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CopyKeys(<secret>, authenticated: {})", self.authenticated)
    }
}

impl CopyKeys {
    /// The sealer of one way of one data connection.
    pub fn sealer(&self, stream: u32, way: Way) -> Sealer {
        let mut h = blake3::Hasher::new_keyed(&self.master);
        h.update(b"stream");
        h.update(&stream.to_le_bytes());
        h.update(match way {
            Way::Blocks => b"blocks",
            Way::Acks => b"acks..",
        });
        let key = UnboundKey::new(&AES_256_GCM, h.finalize().as_bytes()).expect("a 32-byte key is an AES-256 key");
        Sealer { key: LessSafeKey::new(key), counter: 0 }
    }

    /// Both ways of one data connection for the end that sends blocks
    /// (`sending`) or writes them: (the way it writes, the way it reads).
    pub fn stream(&self, stream: u32, sending: bool) -> (Sealer, Sealer) {
        let (out, inn) = if sending { (Way::Blocks, Way::Acks) } else { (Way::Acks, Way::Blocks) };
        (self.sealer(stream, out), self.sealer(stream, inn))
    }
}

/// One way of a data connection: a key and the count of frames so far.
pub struct Sealer {
    key: LessSafeKey,
    counter: u64,
}

impl Sealer {
    fn nonce(&mut self) -> Result<Nonce, String> {
        let n = self.counter;
        self.counter = n.checked_add(1).ok_or("2^64 frames on one connection")?;
        let mut b = [0u8; 12];
        b[4..].copy_from_slice(&n.to_be_bytes());
        Ok(Nonce::assume_unique_for_key(b))
    }

    /// Encrypts `data` in place; the tag to send after it.
    pub fn seal(&mut self, data: &mut [u8]) -> Result<[u8; TAG_LEN], String> {
        let nonce = self.nonce()?;
        let tag = self.key.seal_in_place_separate_tag(nonce, Aad::empty(), data).map_err(|_| "sealing failed")?;
        Ok(tag.as_ref().try_into().expect("a 16-byte tag"))
    }

    /// Decrypts `sealed` (the data, then its tag) in place; the data's length.
    pub fn open(&mut self, sealed: &mut [u8]) -> Result<usize, String> {
        let nonce = self.nonce()?;
        self.key.open_in_place(nonce, Aad::empty(), sealed).map(|d| d.len()).map_err(|_| {
            "a frame failed authentication: altered on the way, out of order, or keys that do not agree \
             (a man in the middle, or another copy's connection)"
                .to_string()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(session_c: Option<&[u8; 32]>, session_a: Option<&[u8; 32]>) -> (CopyKeys, CopyKeys) {
        let (c, a) = (Exchange::new().expect("c"), Exchange::new().expect("a"));
        let (cp, ap) = (c.public(), a.public());
        (c.agree(&ap, true, session_c).expect("agree"), a.agree(&cp, false, session_a).expect("agree"))
    }

    #[test]
    fn both_ends_agree_and_frames_open_only_in_order_on_their_own_way() {
        let (ck, ak) = pair(None, None);
        assert!(!ck.authenticated);
        let (mut c_out, mut c_in) = ck.stream(3, true);
        let (mut a_out, mut a_in) = ak.stream(3, false);
        let mut frames: Vec<Vec<u8>> = Vec::new();
        for text in [&b"first block"[..], b"second", b""] {
            let mut d = text.to_vec();
            let tag = c_out.seal(&mut d).expect("seal");
            assert!(text.is_empty() || d != text, "encrypted");
            d.extend_from_slice(&tag);
            frames.push(d);
        }
        // out of order: the second frame first fails
        let mut second = frames[1].clone();
        assert!(a_in.open(&mut second).is_err());
        let (_, mut a_in) = ak.stream(3, false);
        let mut f0 = frames[0].clone();
        assert_eq!(a_in.open(&mut f0), Ok(11));
        assert_eq!(&f0[..11], b"first block");
        // a bit flipped in the second frame fails
        let mut f1 = frames[1].clone();
        f1[2] ^= 1;
        assert!(a_in.open(&mut f1).is_err());
        // the acks way back
        let mut ack = b"ack".to_vec();
        let tag = a_out.seal(&mut ack).expect("seal");
        ack.extend_from_slice(&tag);
        assert_eq!(c_in.open(&mut ack.clone()), Ok(3));
        // another stream's keys do not open this one's frames
        let (_, mut other) = ak.stream(4, false);
        assert!(other.open(&mut frames[0].clone()).is_err());
        // a frame sealed one way does not open as the other way
        let (mut c_out2, _) = ck.stream(3, true);
        let mut d = b"x".to_vec();
        let tag = c_out2.seal(&mut d).expect("seal");
        d.extend_from_slice(&tag);
        let (_, mut c_in2) = ck.stream(3, true);
        assert!(c_in2.open(&mut d).is_err());
    }

    #[test]
    fn keys_bound_to_a_session_agree_only_when_both_hold_its_secret() {
        let s = [7u8; 32];
        let (ck, ak) = pair(Some(&s), Some(&s));
        assert!(ck.authenticated && ak.authenticated);
        let mut d = b"block".to_vec();
        let tag = ck.sealer(0, Way::Blocks).seal(&mut d).expect("seal");
        d.extend_from_slice(&tag);
        assert!(ak.sealer(0, Way::Blocks).open(&mut d.clone()).is_ok());
        // one side without the session's secret (a relay in the middle): nothing opens
        let (ck, ak) = pair(Some(&s), None);
        let mut d = b"block".to_vec();
        let tag = ck.sealer(0, Way::Blocks).seal(&mut d).expect("seal");
        d.extend_from_slice(&tag);
        assert!(ak.sealer(0, Way::Blocks).open(&mut d).is_err());
        let (ck, ak) = pair(Some(&s), Some(&[8u8; 32]));
        let mut d = b"block".to_vec();
        let tag = ck.sealer(0, Way::Blocks).seal(&mut d).expect("seal");
        d.extend_from_slice(&tag);
        assert!(ak.sealer(0, Way::Blocks).open(&mut d).is_err());
    }

    #[test]
    fn a_public_key_that_is_not_one_is_refused() {
        let c = Exchange::new().expect("c");
        // the all-zero point gives an all-zero secret: ring refuses it
        assert!(c.agree(&[0u8; 32], true, None).is_err());
    }
}
