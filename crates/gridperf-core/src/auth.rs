//! Who may use an agent: shared keys and a challenge, no I/O.
//!
//! A key is a name and 32 secret bytes. The client's key file holds one
//! (`gridperf-key NAME HEX`); the agent's authorized file holds the keys it
//! accepts, one per line (`NAME HEX`, the same line as the client's without
//! its first word). The conversation, after the hello:
//!
//! 1. the agent's welcome carries a fresh 32-byte challenge (the nonce);
//! 2. the client answers with its key's name, a nonce of its own, and
//!    MAC(key, "client" | agent nonce | client nonce | name);
//! 3. the agent checks it and answers MAC(key, "agent" | the same), which
//!    the client checks in turn.
//!
//! The MAC is BLAKE3 in keyed mode. The key never crosses the wire; an
//! answer is bound to the agent's nonce of that one connection, so a
//! recorded one is worth nothing on the next (replay); and the client knows
//! it reached an agent that holds its key, not an impostor. Shared keys
//! rather than key pairs: a site gives each client a line of its own and
//! takes it away again, with nothing beyond the one hash function gridperf
//! already uses; the price is that the agent's file is secret too (gridperf
//! refuses one that others may read).

use std::fmt;

/// Bytes of a key and of a nonce.
pub const KEY_LEN: usize = 32;

/// A named shared key.
#[derive(Clone, PartialEq, Eq)]
pub struct Key {
    pub name: String,
    secret: [u8; KEY_LEN],
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?}, <secret>)", self.name)
    }
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b)) {
        return Err(format!("key name {name:?}: use 1 to 64 letters, digits, or - _ . @"));
    }
    Ok(())
}

impl Key {
    /// A key from its name and 32 random bytes.
    pub fn new(name: &str, secret: [u8; KEY_LEN]) -> Result<Key, String> {
        check_name(name)?;
        Ok(Key { name: name.to_string(), secret })
    }

    /// The client's key file: one line `gridperf-key NAME HEX`.
    pub fn parse_client_file(text: &str) -> Result<Key, String> {
        let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#'));
        match line.map(|l| l.split_whitespace().collect::<Vec<_>>()).as_deref() {
            Some(["gridperf-key", name, hex]) => parse_line(name, hex),
            _ => Err("a key file holds one line: gridperf-key NAME HEX (as `gridperf keygen` writes it)".into()),
        }
    }

    /// The agent's authorized file: `NAME HEX` per line (a leading
    /// `gridperf-key` is allowed), `#` comments; names unique.
    pub fn parse_authorized(text: &str) -> Result<Vec<Key>, String> {
        let mut keys: Vec<Key> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let key = match words.as_slice() {
                ["gridperf-key", name, hex] | [name, hex] => parse_line(name, hex),
                _ => Err("give NAME HEX".into()),
            }
            .map_err(|e| format!("line {}: {e}", n + 1))?;
            if keys.iter().any(|k| k.name == key.name) {
                return Err(format!("line {}: key {:?} is given twice", n + 1, key.name));
            }
            keys.push(key);
        }
        if keys.is_empty() {
            return Err("no key in it: an agent that accepts no key serves no one".into());
        }
        Ok(keys)
    }

    /// The client's key file's text.
    pub fn client_line(&self) -> String {
        format!("gridperf-key {} {}\n", self.name, hex(&self.secret))
    }

    /// The line for the agent's authorized file.
    pub fn authorized_line(&self) -> String {
        format!("{} {}\n", self.name, hex(&self.secret))
    }

    fn mac(&self, role: &str, agent_nonce: &[u8; KEY_LEN], client_nonce: &[u8; KEY_LEN]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.secret);
        h.update(b"gridperf-auth-1 ");
        h.update(role.as_bytes());
        h.update(agent_nonce);
        h.update(client_nonce);
        h.update(self.name.as_bytes());
        h.finalize()
    }

    /// The client's proof, as hex.
    pub fn client_proof(&self, agent_nonce: &[u8; KEY_LEN], client_nonce: &[u8; KEY_LEN]) -> String {
        self.mac("client", agent_nonce, client_nonce).to_hex().to_string()
    }

    /// The agent's proof, as hex.
    pub fn agent_proof(&self, agent_nonce: &[u8; KEY_LEN], client_nonce: &[u8; KEY_LEN]) -> String {
        self.mac("agent", agent_nonce, client_nonce).to_hex().to_string()
    }

    /// A secret both ends of an authenticated session hold and no one
    /// else (it binds a copy's encryption keys to the session: `seal`).
    pub fn session_secret(&self, agent_nonce: &[u8; KEY_LEN], client_nonce: &[u8; KEY_LEN]) -> [u8; KEY_LEN] {
        *self.mac("session", agent_nonce, client_nonce).as_bytes()
    }

    /// Whether `proof` (hex) is the client's, compared in constant time.
    pub fn client_proves(&self, agent_nonce: &[u8; KEY_LEN], client_nonce: &[u8; KEY_LEN], proof: &str) -> bool {
        blake3::Hash::from_hex(proof).is_ok_and(|p| p == self.mac("client", agent_nonce, client_nonce))
    }

    /// Whether `proof` (hex) is the agent's, compared in constant time.
    pub fn agent_proves(&self, agent_nonce: &[u8; KEY_LEN], client_nonce: &[u8; KEY_LEN], proof: &str) -> bool {
        blake3::Hash::from_hex(proof).is_ok_and(|p| p == self.mac("agent", agent_nonce, client_nonce))
    }
}

fn parse_line(name: &str, hex_text: &str) -> Result<Key, String> {
    let secret =
        unhex(hex_text).ok_or_else(|| format!("key {name:?}: the secret is not {} hex digits", 2 * KEY_LEN))?;
    Key::new(name, secret)
}

/// Bytes as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 32 bytes from 64 hex digits.
pub fn unhex(text: &str) -> Option<[u8; KEY_LEN]> {
    if text.len() != 2 * KEY_LEN || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; KEY_LEN];
    for (k, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * k..2 * k + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, b: u8) -> Key {
        Key::new(name, [b; KEY_LEN]).expect("key")
    }

    #[test]
    fn files_round_trip_and_bad_ones_say_what_is_wrong() {
        let k = key("site-a", 7);
        assert_eq!(Key::parse_client_file(&k.client_line()), Ok(k.clone()));
        let file = format!("# site a\n{}\n{}", k.authorized_line(), key("b", 9).client_line());
        assert_eq!(Key::parse_authorized(&file).map(|v| v.len()), Ok(2));
        assert!(Key::parse_authorized("").expect_err("an error").contains("no key"));
        let twice = format!("{}{}", k.authorized_line(), k.authorized_line());
        assert!(Key::parse_authorized(&twice).expect_err("an error").contains("given twice"));
        assert!(Key::parse_client_file("gridperf-key a 00ff").expect_err("an error").contains("64 hex digits"));
        assert!(Key::parse_client_file("a b c d").expect_err("an error").contains("gridperf-key NAME HEX"));
        assert!(Key::new("bad name", [0; KEY_LEN]).is_err());
        assert!(!format!("{k:?}").contains("0707"), "a key's secret is not printed");
    }

    #[test]
    fn a_proof_holds_for_its_nonces_its_key_and_its_role_only() {
        let (k, other) = (key("a", 1), key("a", 2));
        let (an, cn) = ([3u8; KEY_LEN], [4u8; KEY_LEN]);
        let p = k.client_proof(&an, &cn);
        assert!(k.client_proves(&an, &cn, &p));
        assert!(!other.client_proves(&an, &cn, &p), "another secret");
        assert!(!k.client_proves(&[5u8; KEY_LEN], &cn, &p), "another agent nonce: a replay");
        assert!(!k.client_proves(&an, &[6u8; KEY_LEN], &p), "another client nonce");
        assert!(!k.agent_proves(&an, &cn, &p), "the client's proof is not the agent's");
        assert!(!k.client_proves(&an, &cn, "zz"), "not hex");
        assert!(k.agent_proves(&an, &cn, &k.agent_proof(&an, &cn)));
        assert!(!key("b", 1).client_proves(&an, &cn, &p), "the name is in the proof");
    }
}

/// An address block, as `--allow` takes it: `10.0.0.0/8`, `2001:db8::/32`,
/// or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: std::net::IpAddr,
    pub prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Cidr, String> {
        let bad = || format!("{s:?}: give an address block such as 10.0.0.0/8, 2001:db8::/32 or 192.0.2.7");
        let (a, p) = match s.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s.trim(), None),
        };
        let addr: std::net::IpAddr = a.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p.parse::<u8>().ok().filter(|&p| p <= max).ok_or_else(bad)?,
            None => max,
        };
        Ok(Cidr { addr: addr.to_canonical(), prefix })
    }
}

impl Cidr {
    /// Whether `ip` (an IPv4-mapped IPv6 address counts as IPv4) is in the block.
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let bits = |a: u128, b: u128, width: u32| {
            let p = u32::from(self.prefix);
            p == 0 || (a ^ b) >> (width - p) == 0
        };
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(i)) => bits(u32::from(n).into(), u32::from(i).into(), 32),
            (IpAddr::V6(n), IpAddr::V6(i)) => bits(u128::from(n), u128::from(i), 128),
            _ => false,
        }
    }
}

#[cfg(test)]
mod cidr_tests {
    use super::Cidr;

    #[test]
    fn blocks_hold_what_they_say_and_bad_ones_say_what_is_valid() {
        let c: Cidr = "10.0.0.0/8".parse().expect("cidr");
        assert!(c.contains("10.200.1.2".parse().expect("ip")));
        assert!(c.contains("::ffff:10.1.1.1".parse().expect("ip")), "an IPv4-mapped client");
        assert!(!c.contains("11.0.0.1".parse().expect("ip")));
        assert!(!c.contains("::1".parse().expect("ip")));
        let one: Cidr = "127.0.0.1".parse().expect("one address");
        assert!(one.contains("127.0.0.1".parse().expect("ip")) && !one.contains("127.0.0.2".parse().expect("ip")));
        let v6: Cidr = "2001:db8::/32".parse().expect("cidr");
        assert!(v6.contains("2001:db8:1::5".parse().expect("ip")) && !v6.contains("2001:db9::1".parse().expect("ip")));
        let all: Cidr = "0.0.0.0/0".parse().expect("cidr");
        assert!(all.contains("192.0.2.1".parse().expect("ip")));
        for bad in ["10.0.0.0/33", "10.0.0/8", "x", "::/129"] {
            assert!(bad.parse::<Cidr>().expect_err(bad).contains("address block"), "{bad}");
        }
    }
}
