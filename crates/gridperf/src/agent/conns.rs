//! The connections an agent's port holds (the control port, or the
//! metrics port), counted in all, per address and per network (an IPv4
//! /24, an IPv6 /64). A connection is *unsettled* until its client has
//! shown it is one (said hello and asked for its test; sent its HTTP
//! head): when a limit is reached, the oldest unsettled connection is cut
//! to make room, so silent connections cannot keep a real client out
//! however many addresses they come from.
//!
//! Also here: the agent's log, limited, so that a flood of refusals cannot
//! fill a disk or take a CPU ([`Log`]), and the back-off an address earns
//! with failed authentications ([`Penalties`]).

use std::collections::HashMap;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// An unsettled connection younger than this is never cut: a client on a
/// long path needs a round trip or two to say who it is.
pub const SETTLE_GRACE: Duration = Duration::from_millis(500);

/// What a port lets its clients hold.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub total: usize,
    pub per_address: usize,
    /// Per IPv4 /24 or IPv6 /64.
    pub per_network: usize,
}

impl ConnLimits {
    /// The per-network cap for a total and a per-address cap: a quarter of
    /// the total, never below two addresses' worth.
    pub fn with_network(total: usize, per_address: usize) -> ConnLimits {
        ConnLimits { total, per_address, per_network: (total / 4).max(2 * per_address).min(total) }
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Its address holds this many, every one settled or just arrived.
    PerAddress(usize),
    /// Its network holds this many, every one settled or just arrived.
    PerNetwork(usize),
    /// The port holds this many, every one settled or just arrived.
    Full(usize),
}

struct Entry {
    ip: IpAddr,
    since: Instant,
    settled: bool,
    /// A clone, to cut the connection when it is evicted or the port stops.
    sock: Option<TcpStream>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    live: HashMap<u64, Entry>,
}

/// The connections of one port.
pub struct ConnTable {
    limits: ConnLimits,
    inner: Mutex<Inner>,
}

/// A connection admitted; it leaves the table when dropped.
pub struct Admitted {
    table: Arc<ConnTable>,
    id: u64,
}

impl Admitted {
    /// The client has shown it is one: it is no longer cut to make room.
    pub fn settle(&self) {
        if let Some(e) = self.table.lock().live.get_mut(&self.id) {
            e.settled = true;
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.table.lock().live.remove(&self.id);
    }
}

/// The network an address belongs to, for the per-network cap.
fn network(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            IpAddr::from([o[0], o[1], o[2], 0])
        }
        IpAddr::V6(v6) => {
            let mut s = v6.segments();
            s[4..].fill(0);
            IpAddr::from(s)
        }
    }
}

impl ConnTable {
    pub fn new(limits: ConnLimits) -> Arc<ConnTable> {
        Arc::new(ConnTable { limits, inner: Mutex::new(Inner::default()) })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a connection from `ip` (`sock`: a clone to cut it with),
    /// cutting the oldest unsettled one where a limit is reached.
    pub fn admit(self: &Arc<Self>, ip: IpAddr, sock: Option<TcpStream>) -> Result<Admitted, Refused> {
        self.admit_at(ip, sock, Instant::now())
    }

    fn admit_at(self: &Arc<Self>, ip: IpAddr, sock: Option<TcpStream>, now: Instant) -> Result<Admitted, Refused> {
        let ip = ip.to_canonical();
        let net = network(ip);
        let mut g = self.lock();
        // room for the address, in its network, then in all: where a limit
        // is reached the oldest unsettled connection within it goes
        type Within = Box<dyn Fn(&Entry) -> bool>;
        type Level = (Within, usize, fn(usize) -> Refused);
        let levels: [Level; 3] = [
            (Box::new(move |e: &Entry| e.ip == ip), self.limits.per_address, Refused::PerAddress),
            (Box::new(move |e: &Entry| network(e.ip) == net), self.limits.per_network, Refused::PerNetwork),
            (Box::new(|_: &Entry| true), self.limits.total, Refused::Full),
        ];
        for (within, cap, refused) in levels {
            let n = g.live.values().filter(|e| within(e)).count();
            if n < cap {
                continue;
            }
            let oldest = g
                .live
                .iter()
                .filter(|(_, e)| within(e) && !e.settled && now.saturating_duration_since(e.since) >= SETTLE_GRACE)
                .min_by_key(|(_, e)| e.since)
                .map(|(&id, _)| id);
            match oldest {
                Some(id) => {
                    if let Some(e) = g.live.remove(&id) {
                        if let Some(s) = e.sock {
                            let _ = s.shutdown(Shutdown::Both);
                        }
                    }
                }
                None => return Err(refused(n)),
            }
        }
        let id = g.next;
        g.next += 1;
        g.live.insert(id, Entry { ip, since: now, settled: false, sock });
        drop(g);
        Ok(Admitted { table: self.clone(), id })
    }

    /// Connections held now.
    pub fn len(&self) -> usize {
        self.lock().live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Cuts every connection (the port stops).
    pub fn shut_all(&self) {
        for e in self.lock().live.values() {
            if let Some(s) = &e.sock {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

/// The back-off an address earns by failing to authenticate: its first
/// FREE_FAILURES failures cost nothing (a user who forgot --key, then gave
/// the wrong one), then it is refused at once, without a word to the log,
/// for 0.1 s, doubling with each failure after, up to a minute. An address
/// that authenticates is forgiven; one that stops trying is forgotten a
/// minute after its back-off ends.
#[derive(Default)]
pub struct Penalties(Mutex<HashMap<IpAddr, (u32, Instant)>>);

/// The longest back-off.
pub const MAX_PENALTY: Duration = Duration::from_secs(60);
/// Failures an address may have before it waits.
pub const FREE_FAILURES: u32 = 2;

impl Penalties {
    fn lock(&self) -> MutexGuard<'_, HashMap<IpAddr, (u32, Instant)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a failure of `ip`; the back-off it now has.
    pub fn fail(&self, ip: IpAddr, now: Instant) -> Duration {
        let mut g = self.lock();
        g.retain(|_, (_, until)| now.saturating_duration_since(*until) < MAX_PENALTY);
        let e = g.entry(ip.to_canonical()).or_insert((0, now));
        e.0 = e.0.saturating_add(1);
        let over = e.0.saturating_sub(FREE_FAILURES);
        let wait = if over == 0 {
            Duration::ZERO
        } else {
            Duration::from_millis(100).saturating_mul(1u32 << (over.min(11) - 1)).min(MAX_PENALTY)
        };
        e.1 = now + wait;
        wait
    }

    /// How long `ip` must still wait, if it must.
    pub fn waiting(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        self.lock()
            .get(&ip.to_canonical())
            .and_then(|(_, until)| until.checked_duration_since(now))
            .filter(|d| !d.is_zero())
    }

    /// An address that authenticated is forgiven.
    pub fn forgive(&self, ip: IpAddr) {
        self.lock().remove(&ip.to_canonical());
    }
}

/// The agent's log: one line per event, at most `BURST` lines at once and
/// `PER_SECOND` a second after that; what is left out is counted and said
/// in one line once the flood has passed (or every ten seconds while it
/// lasts). Lines go to stderr.
pub struct Log {
    on: bool,
    state: Mutex<LogState>,
}

struct LogState {
    tokens: f64,
    last: Instant,
    dropped: u64,
    dropped_since: Option<Instant>,
}

const BURST: f64 = 50.0;
const PER_SECOND: f64 = 5.0;
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

impl Log {
    pub fn new(on: bool) -> Log {
        Log { on, state: Mutex::new(LogState { tokens: BURST, last: Instant::now(), dropped: 0, dropped_since: None }) }
    }

    /// Writes a line, unless the flood limit left it out (then it is counted).
    pub fn line(&self, text: &str) {
        if let Some(out) = self.take(Some(text), Instant::now()) {
            for l in out {
                eprintln!("{l}");
            }
        }
    }

    /// Says what was left out, if the flood has passed (call it now and then).
    pub fn tick(&self) {
        if let Some(out) = self.take(None, Instant::now()) {
            for l in out {
                eprintln!("{l}");
            }
        }
    }

    /// The lines to write now: the summary of what was left out (when it is
    /// due), and `text` if a token allows it.
    fn take(&self, text: Option<&str>, now: Instant) -> Option<Vec<String>> {
        if !self.on {
            return None;
        }
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let dt = now.saturating_duration_since(s.last).as_secs_f64();
        s.last = now;
        s.tokens = (s.tokens + dt * PER_SECOND).min(BURST);
        let mut out = Vec::new();
        let flood_over = s.tokens >= 1.0 && text.is_none();
        let summary_due = s.dropped_since.is_some_and(|t| now.saturating_duration_since(t) >= SUMMARY_EVERY);
        if s.dropped > 0 && (flood_over || summary_due) {
            let secs = s.dropped_since.map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64());
            out.push(format!(
                "gridperf serve: {} more lines like the above were left out of the log in {secs:.0} s (at most {PER_SECOND} a second after a burst of {BURST})",
                s.dropped
            ));
            s.dropped = 0;
            s.dropped_since = None;
        }
        if let Some(t) = text {
            if s.tokens >= 1.0 {
                s.tokens -= 1.0;
                out.push(t.to_string());
            } else {
                s.dropped += 1;
                s.dropped_since.get_or_insert(now);
            }
        }
        (!out.is_empty()).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn silent_connections_from_many_addresses_make_room_for_a_client() {
        let t = ConnTable::new(ConnLimits::with_network(64, 8));
        let t0 = Instant::now();
        let mut held = Vec::new();
        // 9 addresses of one /24, 8 silent connections each: the network's 16 fill, the rest are refused
        for a in 2..=10 {
            for _ in 0..8 {
                if let Ok(c) = t.admit_at(ip(&format!("127.0.0.{a}")), None, t0) {
                    held.push(c);
                }
            }
        }
        assert_eq!(held.len(), 16, "the /24's cap");
        // a client from the same network, a second later: the oldest silent one goes
        let later = t0 + Duration::from_secs(1);
        let client = t.admit_at(ip("127.0.0.1"), None, later).expect("a real client is let in");
        client.settle();
        assert_eq!(t.len(), 16);
        // they leave the table as they close
        held.clear();
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_settled_or_new_connection_is_never_cut() {
        let t = ConnTable::new(ConnLimits { total: 2, per_address: 2, per_network: 2 });
        let t0 = Instant::now();
        let a = t.admit_at(ip("10.0.0.1"), None, t0).expect("first");
        a.settle();
        let _b = t.admit_at(ip("10.0.0.2"), None, t0).expect("second");
        // the unsettled one is too young to be cut
        assert_eq!(
            t.admit_at(ip("10.0.0.3"), None, t0 + Duration::from_millis(100)).err(),
            Some(Refused::PerNetwork(2))
        );
        // older: it goes, the settled one stays
        let _c = t.admit_at(ip("10.0.0.3"), None, t0 + Duration::from_secs(1)).expect("room made");
        assert_eq!(t.len(), 2);
        assert!(t.lock().live.values().any(|e| e.settled && e.ip == ip("10.0.0.1")));
    }

    #[test]
    fn one_address_is_held_to_its_cap_and_other_networks_are_not_touched() {
        let t = ConnTable::new(ConnLimits::with_network(64, 8));
        let t0 = Instant::now();
        let mut held: Vec<_> = (0..8).map(|_| t.admit_at(ip("192.0.2.1"), None, t0).expect("within the cap")).collect();
        for h in &held[..7] {
            h.settle();
        }
        assert_eq!(t.admit_at(ip("192.0.2.1"), None, t0).err(), Some(Refused::PerAddress(8)));
        assert!(t.admit_at(ip("198.51.100.1"), None, t0).is_ok());
        // the one unsettled connection goes once it is past its grace
        let again = t.admit_at(ip("192.0.2.1"), None, t0 + Duration::from_secs(5)).expect("room made");
        assert_eq!(t.admit_at(ip("192.0.2.1"), None, t0 + Duration::from_secs(5)).err(), Some(Refused::PerAddress(8)));
        drop(again);
        held.clear();
        assert!(t.admit_at(ip("192.0.2.1"), None, t0).is_ok());
    }

    #[test]
    fn networks_are_a_v4_slash_24_and_a_v6_slash_64() {
        assert_eq!(network(ip("10.1.2.3")), ip("10.1.2.0"));
        assert_eq!(network(ip("::ffff:10.1.2.3")), ip("10.1.2.0"));
        assert_eq!(network(ip("2001:db8:1:2:3:4:5:6")), ip("2001:db8:1:2::"));
    }

    #[test]
    fn failed_authentications_back_off_doubling_to_a_minute() {
        let p = Penalties::default();
        let t0 = Instant::now();
        let a = ip("192.0.2.9");
        for _ in 0..FREE_FAILURES {
            assert_eq!(p.fail(a, t0), Duration::ZERO);
            assert!(p.waiting(a, t0).is_none());
        }
        assert_eq!(p.fail(a, t0), Duration::from_millis(100));
        assert_eq!(p.fail(a, t0), Duration::from_millis(200));
        assert_eq!(p.fail(a, t0), Duration::from_millis(400));
        for _ in 0..20 {
            p.fail(a, t0);
        }
        assert_eq!(p.fail(a, t0), MAX_PENALTY);
        assert!(p.waiting(a, t0 + Duration::from_secs(59)).is_some());
        assert!(p.waiting(ip("192.0.2.10"), t0).is_none());
        p.forgive(a);
        assert!(p.waiting(a, t0).is_none());
    }

    #[test]
    fn a_flood_of_lines_is_cut_to_its_rate_and_summarised() {
        let log = Log::new(true);
        let t0 = Instant::now();
        let mut written = 0;
        let mut summaries = Vec::new();
        // 5,000 lines in one second
        for k in 0..5000u32 {
            let now = t0 + Duration::from_micros(u64::from(k) * 200);
            for l in log.take(Some("refused"), now).unwrap_or_default() {
                if l.contains("left out") {
                    summaries.push(l);
                } else {
                    written += 1;
                }
            }
        }
        assert!((50..=56).contains(&written), "{written} lines written");
        // the flood has passed: one line says how many were left out
        let out = log.take(None, t0 + Duration::from_secs(3)).expect("a summary");
        assert_eq!(out.len(), 1);
        assert!(out[0].contains(&format!("{} more lines", 5000 - written)), "{}", out[0]);
        assert!(summaries.is_empty());
        assert!(log.take(None, t0 + Duration::from_secs(4)).is_none());
    }
}
