//! The test a client asks an agent to run: one typed request per kind of
//! measurement, each with its own checks. A request names only what its
//! kind uses (a stream request has no message sizes, an echo request no
//! streams), so a combination the agent cannot run cannot be sent; what
//! is left to check (ranges, buffers, what this kernel offers) is checked
//! here, once, by the agent on what arrives and by the client on what a
//! user typed.

use super::ErrorCode;
use crate::model::plan::Proto;
use crate::model::Measure;
use serde::{Deserialize, Serialize};

/// Socket buffers (SO_SNDBUF / SO_RCVBUF) a request may ask for: 1 byte to 1 GiB.
pub const MAX_BUFFER: u64 = 1 << 30;
/// The longest per-message timeout an echo test may ask for.
pub const MAX_TIMEOUT_MS: u64 = 60_000;

/// Streams per direction an agent runs at most.
pub const MAX_STREAMS: u32 = 128;
/// The largest write (TCP) a stream test takes; UDP datagrams are at most 65507 bytes.
pub const MAX_WRITE: u64 = 16 << 20;
/// The longest stream test (its time and its omitted start together).
pub const MAX_DURATION_MS: u64 = 3_600_000;
/// The shortest TCP_INFO sampling and report interval.
pub const MIN_SAMPLE_MS: u64 = 10;
/// The longest sampling or report interval, and the longest linger after a
/// stream's time (ms).
pub const MAX_PERIOD_MS: u64 = 60_000;
/// The longest sleep between a sender's writes (--gap), in microseconds.
pub const MAX_GAP_US: u64 = 1_000_000;
/// The highest rate a stream may be paced at or a UDP stream sent at, in
/// bits per second (400 Gbit/s: beyond any NIC).
pub const MAX_RATE_BPS: u64 = 400_000_000_000;
/// TCP_INFO samples kept per stream (10 ms for an hour would be 360 000).
pub const MAX_SAMPLES: usize = 100_000;
/// The bytes of a UDP stream datagram's header (stream, sequence, send time).
pub const UDP_STREAM_HEADER: u64 = 20;

/// Requests per consumer, request size and consumers a fanout point may have.
pub const FANOUT_MAX_MESSAGES: u64 = 1 << 20;
pub const FANOUT_MAX_SIZE: u64 = 16 << 20;
pub const FANOUT_MAX_NODES: u32 = 64;

/// A test request: what to run, and how long the client will wait for a
/// free slot (0: answer "busy" at once).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestRequest {
    pub queue_ms: u64,
    pub test: Test,
}

/// The test itself, one variant per kind of measurement.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Test {
    /// Round trips: each message echoed, timed by the client.
    Rtt(EchoSpec),
    /// The Table 1 loop: the same echo, timed as a whole by the client.
    Transfer(EchoSpec),
    /// Bulk flows between the ends.
    Stream(StreamSpec),
    /// The agent is a fanout consumer: it echoes on every data connection.
    Fanout(FanoutSpec),
    /// Files moved to or from beneath the agent's root (`serve --root`).
    Copy(super::CopySpec),
}

/// Why an agent will not run a request: the code for the client's exit
/// status, and a message that says what is valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

impl Refusal {
    fn new(code: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal { code, message: message.into() }
    }
    fn unsupported(message: impl Into<String>) -> Refusal {
        Refusal::new(ErrorCode::Unsupported, message)
    }
    fn too_large(message: impl Into<String>) -> Refusal {
        Refusal::new(ErrorCode::TooLarge, message)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// What the checks need to know of the host that runs the test.
#[derive(Debug, Clone, Default)]
pub struct HostLimits {
    /// The congestion controls this kernel offers (net.ipv4.tcp_available_congestion_control).
    pub congestion: Vec<String>,
    /// The CPUs a test may be pinned to (empty: not known, not checked).
    pub cpus: Vec<usize>,
}

impl Test {
    pub fn measure(&self) -> Measure {
        match self {
            Test::Rtt(_) => Measure::Rtt,
            Test::Transfer(_) => Measure::Transfer,
            Test::Stream(_) => Measure::Stream,
            Test::Fanout(_) => Measure::Fanout,
            Test::Copy(_) => Measure::Copy,
        }
    }

    /// Checks the request against what an agent runs and this host offers.
    pub fn validate(&self, host: &HostLimits) -> Result<(), Refusal> {
        match self {
            Test::Rtt(e) | Test::Transfer(e) => e.validate(),
            Test::Stream(s) => s.validate(host).map(|_| ()).map_err(Refusal::unsupported),
            Test::Fanout(f) => f.validate(),
            Test::Copy(c) => c.validate(),
        }
    }

    /// The test's kind, as metrics and logs name it.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Test::Rtt(_) => "rtt",
            Test::Transfer(_) => "transfer",
            Test::Stream(_) => "stream",
            Test::Fanout(_) => "fanout",
            Test::Copy(_) => "copy",
        }
    }

    /// A line for the agent's log.
    pub fn describe(&self) -> String {
        match self {
            Test::Rtt(e) | Test::Transfer(e) => {
                let protos: Vec<&str> = e.protos.iter().map(|p| p.name()).collect();
                format!("{} {} up to {} B", self.measure(), protos.join(","), e.max_size)
            }
            Test::Stream(s) => format!("stream {} x {} {:?}", s.streams, s.proto, s.direction),
            Test::Fanout(f) => format!("fanout consumer, {} x {} B", f.messages, f.size),
            Test::Copy(c) => format!("copy {:?} of {} files, {} streams", c.direction, c.files, c.streams),
        }
    }
}

fn check_buffer(what: &str, b: Option<u64>) -> Result<(), String> {
    match b {
        Some(b) if b == 0 || b > MAX_BUFFER => Err(format!("a {what} of {b} bytes: give 1 byte to 1 GiB")),
        _ => Ok(()),
    }
}

/// An echo test (`rtt`, `transfer`): messages of up to `max_size` bytes
/// over each protocol, each echoed by the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EchoSpec {
    /// The protocols, each once; their data sockets are opened in this order.
    pub protos: Vec<Proto>,
    /// The largest message of the run, so the agent can refuse or allocate once.
    pub max_size: u64,
    /// TCP_NODELAY on the agent's data sockets.
    pub nodelay: bool,
    /// Spin on non-blocking receives instead of sleeping.
    pub busy_poll: bool,
    /// Pin the agent's measuring thread to this CPU.
    pub cpu: Option<usize>,
    pub sndbuf: Option<u64>,
    pub rcvbuf: Option<u64>,
    /// The client's UDP port (on the control connection's address): with UDP, and only then.
    pub udp_port: Option<u16>,
    /// The client's per-message timeout; the agent waits longer than this before giving up.
    pub timeout_ms: u64,
}

impl EchoSpec {
    pub fn validate(&self) -> Result<(), Refusal> {
        if self.protos.is_empty() {
            return Err(Refusal::new(ErrorCode::BadMessage, "the request names no protocol"));
        }
        for (k, p) in self.protos.iter().enumerate() {
            if self.protos[..k].contains(p) {
                return Err(Refusal::unsupported(format!(
                    "protocol {p} named twice: give each of {} at most once",
                    Proto::VALID
                )));
            }
            if self.max_size == 0 || self.max_size > p.max_message() {
                return Err(Refusal::too_large(format!(
                    "a {p} message of {} bytes is refused: this agent takes 1 to {} bytes for {p}",
                    self.max_size,
                    p.max_message()
                )));
            }
        }
        for (what, b) in [("send buffer", self.sndbuf), ("receive buffer", self.rcvbuf)] {
            check_buffer(what, b).map_err(Refusal::too_large)?;
        }
        let udp = self.protos.contains(&Proto::Udp);
        match (udp, self.udp_port) {
            (true, None) => {
                return Err(Refusal::new(ErrorCode::BadMessage, "UDP requested without the client's UDP port"))
            }
            (false, Some(_)) => {
                return Err(Refusal::new(ErrorCode::BadMessage, "a UDP port given for a test without UDP"))
            }
            _ => {}
        }
        if self.timeout_ms == 0 || self.timeout_ms > MAX_TIMEOUT_MS {
            return Err(Refusal::unsupported(format!(
                "a per-message timeout of {} ms: give 1 to {MAX_TIMEOUT_MS}",
                self.timeout_ms
            )));
        }
        Ok(())
    }
}

/// The consumer's part of a fanout point: on every data connection the
/// client opens, echo `messages` requests of `size` bytes, blocking, as
/// the document's clients do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FanoutSpec {
    pub size: u64,
    pub messages: u64,
    /// SO_SNDBUF and SO_RCVBUF on the agent's sockets.
    pub buffer: Option<u64>,
    pub nodelay: bool,
    /// A consumer gives up on a connection silent this long (the client's
    /// watchdog tore it down).
    pub idle_ms: u64,
}

impl FanoutSpec {
    pub fn validate(&self) -> Result<(), Refusal> {
        if self.size == 0 || self.size > FANOUT_MAX_SIZE || self.messages == 0 || self.messages > FANOUT_MAX_MESSAGES {
            return Err(Refusal::too_large(format!(
                "fanout requests: 1 to {FANOUT_MAX_MESSAGES} of 1 to {FANOUT_MAX_SIZE} bytes, not {} of {}",
                self.messages, self.size
            )));
        }
        check_buffer("buffer", self.buffer).map_err(Refusal::too_large)
    }
}

/// Which way a stream test's data flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Client to agent.
    Up,
    /// Agent to client (--reverse).
    Down,
    /// Both at once, `streams` each way (--bidir).
    Both,
}

/// A bulk-flow test (`gridperf stream`). Rates are bits per second, sizes bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamSpec {
    /// "tcp" or "udp".
    pub proto: String,
    /// Streams per direction.
    pub streams: u32,
    pub direction: Direction,
    /// How long the senders send (and, with `bytes`, the most they may take).
    pub duration_ms: u64,
    /// Bytes each sender sends, if the test is bounded by bytes (-n).
    pub bytes: Option<u64>,
    /// Bytes per write (TCP) or per datagram (UDP).
    pub write_size: u64,
    /// SO_SNDBUF and SO_RCVBUF on both ends' data sockets (-w).
    pub window: Option<u64>,
    /// TCP congestion control on both ends' data sockets.
    pub congestion: Option<String>,
    /// SO_MAX_PACING_RATE per sending socket.
    pub pacing_bps: Option<u64>,
    /// A sleep between writes, in microseconds (application-level pacing).
    pub gap_us: Option<u64>,
    /// "sendfile" or "msg" (MSG_ZEROCOPY) on the senders.
    pub zerocopy: Option<String>,
    /// UDP: each stream's target rate.
    pub udp_rate_bps: Option<u64>,
    /// How often each end samples TCP_INFO, and reports intervals.
    pub sample_ms: u64,
    pub interval_ms: u64,
    /// How long a receiver keeps reading after the senders' time is up
    /// (data in flight on a long path; UDP has no end marker).
    pub linger_ms: u64,
    /// The first part of the test, left out of the figures (--omit); the
    /// senders send for omit + duration.
    #[serde(default)]
    pub omit_ms: u64,
    /// SO_SNDBUF on the sending sockets only, and SO_RCVBUF on the
    /// receiving sockets only (instead of `window` on both); one direction.
    /// `gridperf tune` sets one end's buffer to see how much of it becomes
    /// window, or data in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_buffer: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recv_buffer: Option<u64>,
    /// The CPU the agent's stream threads run on (`--cpu C,S`: S), if pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<usize>,
    /// UDP receivers keep samples of the one-way transit (`lab clone`'s
    /// queue probe); an agent that predates it keeps none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transit: bool,
}

/// The most a paced TCP sender keeps written and not yet sent, in its
/// rate's time: beyond, the socket's buffer (4 MiB) held what the pacing
/// let out over half a minute at 1 Mbit/s, and the stream ran long past its
/// time.
pub const PACED_UNSENT_MS: u64 = 50;

impl StreamSpec {
    /// A paced TCP sender's bound on what it has written and not yet sent
    /// (TCP_NOTSENT_LOWAT): PACED_UNSENT_MS at its rate, at least 4 KiB, at
    /// most a write. None when it is not paced.
    pub fn paced_unsent_bytes(&self) -> Option<u64> {
        self.pacing_bps.map(|p| (p / 8 * PACED_UNSENT_MS / 1000).clamp(4096, self.write_size.max(4096)))
    }

    /// How long a paced stream's last bytes take to leave once its time is
    /// up (what may wait unsent, and a 64 KiB segment, at its rate): the
    /// receivers wait this beyond the linger. 0 unpaced; at most a minute.
    pub fn paced_drain_ms(&self) -> u64 {
        match (self.paced_unsent_bytes(), self.pacing_bps) {
            (Some(unsent), Some(p)) if p > 0 => ((unsent + 65_536) * 8 * 1000 / p).min(60_000),
            _ => 0,
        }
    }

    /// One TCP stream `direction` for `duration_ms`, with `gridperf
    /// stream`'s defaults otherwise: writes of 128 KiB, buffers autotuned,
    /// TCP_INFO every 100 ms, 1 s intervals, a 5 s linger.
    pub fn tcp(direction: Direction, duration_ms: u64) -> StreamSpec {
        StreamSpec {
            proto: "tcp".into(),
            streams: 1,
            direction,
            duration_ms,
            bytes: None,
            write_size: 128 << 10,
            window: None,
            congestion: None,
            pacing_bps: None,
            gap_us: None,
            zerocopy: None,
            udp_rate_bps: None,
            sample_ms: 100,
            interval_ms: 1000,
            linger_ms: 5000,
            omit_ms: 0,
            send_buffer: None,
            recv_buffer: None,
            cpu: None,
            transit: false,
        }
    }

    /// The protocol, once the spec is checked.
    pub fn protocol(&self) -> Option<Proto> {
        match self.proto.as_str() {
            "tcp" => Some(Proto::Tcp),
            "udp" => Some(Proto::Udp),
            _ => None,
        }
    }

    /// Checks a stream spec: the agent checks what a client sends, the
    /// client what a user typed, with the same rules. Returns the protocol.
    pub fn validate(&self, host: &HostLimits) -> Result<Proto, String> {
        let Some(proto) = self.protocol() else {
            return Err(format!("stream protocol {:?}: give tcp or udp", self.proto));
        };
        if self.streams == 0 || self.streams > MAX_STREAMS {
            return Err(format!("{} streams: this agent runs 1 to {MAX_STREAMS} per direction", self.streams));
        }
        if self.duration_ms == 0 || self.duration_ms.saturating_add(self.omit_ms) > MAX_DURATION_MS {
            return Err(format!(
                "a test of {} ms (and {} ms omitted): give 1 ms to 1 hour in all",
                self.duration_ms, self.omit_ms
            ));
        }
        let max_write = if proto == Proto::Udp { Proto::Udp.max_message() } else { MAX_WRITE };
        let min_write = if proto == Proto::Udp { UDP_STREAM_HEADER } else { 1 };
        if self.write_size < min_write || self.write_size > max_write {
            return Err(format!("writes of {} bytes: {proto} takes {min_write} to {max_write}", self.write_size));
        }
        if self.pacing_bps == Some(0) {
            return Err("a pacing rate of 0 would send nothing: give a rate above 0, or leave pacing off".into());
        }
        if proto == Proto::Udp && self.udp_rate_bps.unwrap_or(0) == 0 {
            return Err("a UDP stream needs a rate above 0 (-b)".into());
        }
        if self.bytes == Some(0) {
            return Err("-n 0 bytes would send nothing".into());
        }
        if self.window.is_some_and(|w| w == 0 || w > MAX_BUFFER) {
            return Err("a window (-w) of 1 byte to 1 GiB".into());
        }
        for (what, b) in [("send buffer", self.send_buffer), ("receive buffer", self.recv_buffer)] {
            if b.is_some_and(|w| w == 0 || w > MAX_BUFFER) {
                return Err(format!("a {what} of 1 byte to 1 GiB"));
            }
            if b.is_some() && (self.window.is_some() || self.direction == Direction::Both) {
                return Err(format!("a {what} of its own is for one direction, without a window (-w) for both"));
            }
            if b.is_some() && proto != Proto::Tcp {
                return Err(format!("a {what} of its own is for TCP streams"));
            }
        }
        if self.sample_ms < MIN_SAMPLE_MS || self.interval_ms < MIN_SAMPLE_MS {
            return Err(format!("sampling and report intervals of at least {MIN_SAMPLE_MS} ms"));
        }
        for (what, v) in
            [("sampling interval", self.sample_ms), ("report interval", self.interval_ms), ("linger", self.linger_ms)]
        {
            if v > MAX_PERIOD_MS {
                return Err(format!("a {what} of {v} ms: at most {MAX_PERIOD_MS} ms"));
            }
        }
        if self.omit_ms > MAX_DURATION_MS {
            return Err(format!("{} ms omitted: at most 1 hour", self.omit_ms));
        }
        if let Some(g) = self.gap_us.filter(|&g| g > MAX_GAP_US) {
            return Err(format!("a gap of {g} us between writes: at most {MAX_GAP_US} us (1 s)"));
        }
        for (what, r) in [("pacing rate", self.pacing_bps), ("UDP rate", self.udp_rate_bps)] {
            if let Some(r) = r.filter(|&r| r > MAX_RATE_BPS) {
                return Err(format!("a {what} of {r} bit/s: at most {MAX_RATE_BPS} (400 Gbit/s)"));
            }
        }
        if let Some(z) = &self.zerocopy {
            if z != "sendfile" && z != "msg" {
                return Err(format!("zero-copy {z:?}: give sendfile or msg"));
            }
            if proto == Proto::Udp {
                return Err("zero-copy sending is for TCP streams".into());
            }
        }
        if let Some(cpu) = self.cpu {
            if !host.cpus.is_empty() && !host.cpus.contains(&cpu) {
                return Err(format!("CPU {cpu}: the agent's host has CPUs {:?}", host.cpus));
            }
        }
        if let Some(cc) = &self.congestion {
            if !host.congestion.iter().any(|c| c == cc) {
                return Err(format!(
                    "congestion control {cc:?} is not available here; this kernel offers {}",
                    host.congestion.join(", ")
                ));
            }
        }
        Ok(proto)
    }

    /// The stream indices and who sends on each: (index, the client sends).
    /// Streams 0..P go the spec's way (up or down); with Both, P..2P go down.
    pub fn layout(&self) -> Vec<(u32, bool)> {
        let p = self.streams;
        match self.direction {
            Direction::Up => (0..p).map(|i| (i, true)).collect(),
            Direction::Down => (0..p).map(|i| (i, false)).collect(),
            Direction::Both => (0..p).map(|i| (i, true)).chain((p..2 * p).map(|i| (i, false))).collect(),
        }
    }

    /// The SO_SNDBUF and SO_RCVBUF a socket asks for: -w on both, or the
    /// send buffer on a sending socket and the receive buffer on a receiving
    /// one (`sending` None: a listener for both roles).
    pub fn buffers(&self, sending: Option<bool>) -> (Option<u64>, Option<u64>) {
        match self.window {
            Some(w) => (Some(w), Some(w)),
            None => (
                self.send_buffer.filter(|_| sending != Some(false)),
                self.recv_buffer.filter(|_| sending != Some(true)),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stream_field_has_an_upper_bound() {
        let host = HostLimits::default();
        let udp = |f: fn(&mut StreamSpec)| {
            let mut s = StreamSpec {
                proto: "udp".into(),
                udp_rate_bps: Some(1_000_000),
                write_size: 1400,
                ..StreamSpec::tcp(Direction::Down, 1000)
            };
            f(&mut s);
            s.validate(&host)
        };
        let tcp = |f: fn(&mut StreamSpec)| {
            let mut s = StreamSpec::tcp(Direction::Down, 1000);
            f(&mut s);
            s.validate(&host)
        };
        assert!(tcp(|_| {}).is_ok() && udp(|_| {}).is_ok());
        let cases: [(&str, Result<Proto, String>); 8] = [
            ("gap", tcp(|s| s.gap_us = Some(u64::MAX))),
            ("linger", tcp(|s| s.linger_ms = u64::MAX)),
            ("report interval", tcp(|s| s.interval_ms = u64::MAX)),
            ("sampling interval", tcp(|s| s.sample_ms = u64::MAX)),
            ("pacing rate", tcp(|s| s.pacing_bps = Some(u64::MAX))),
            ("UDP rate", udp(|s| s.udp_rate_bps = Some(u64::MAX))),
            ("omitted", tcp(|s| s.omit_ms = u64::MAX)),
            (
                "1 hour",
                tcp(|s| {
                    s.duration_ms = u64::MAX;
                    s.omit_ms = 2;
                }),
            ),
        ];
        for (what, r) in cases {
            let e = r.expect_err(what);
            assert!(e.contains(what), "{what}: {e}");
        }
        // the largest allowed pass
        assert!(tcp(|s| {
            s.gap_us = Some(MAX_GAP_US);
            s.linger_ms = MAX_PERIOD_MS;
            s.pacing_bps = Some(MAX_RATE_BPS)
        })
        .is_ok());
    }
    use crate::wire::{decode, encode, ClientMsg};

    fn echo(protos: &[Proto]) -> EchoSpec {
        EchoSpec {
            protos: protos.to_vec(),
            max_size: 64,
            nodelay: true,
            busy_poll: false,
            cpu: None,
            sndbuf: None,
            rcvbuf: None,
            udp_port: protos.contains(&Proto::Udp).then_some(4000),
            timeout_ms: 1000,
        }
    }

    fn stream() -> StreamSpec {
        StreamSpec { linger_ms: 1000, ..StreamSpec::tcp(Direction::Up, 1000) }
    }

    #[test]
    fn each_kind_travels_with_its_own_fields() {
        for test in [
            Test::Rtt(echo(&[Proto::Tcp, Proto::Udp])),
            Test::Transfer(echo(&[Proto::Sendfile])),
            Test::Stream(stream()),
            Test::Fanout(FanoutSpec { size: 4096, messages: 16, buffer: None, nodelay: false, idle_ms: 5000 }),
        ] {
            let msg = ClientMsg::Request(TestRequest { queue_ms: 0, test: test.clone() });
            let frame = encode(&msg).expect("encode");
            let body: serde_json::Value = serde_json::from_slice(&frame[4..]).expect("json");
            assert_eq!(body["test"]["kind"], test.measure().name(), "{body}");
            assert_eq!(decode::<ClientMsg>(&frame[4..]).expect("decode"), msg);
        }
    }

    #[test]
    fn an_unknown_kind_or_protocol_names_the_valid_ones() {
        let body = br#"{"type":"request","queue_ms":0,"test":{"kind":"teleport"}}"#;
        let e = decode::<ClientMsg>(body).expect_err("unknown kind").to_string();
        assert!(e.contains("teleport") && e.contains("rtt") && e.contains("fanout"), "{e}");
        let body = br#"{"type":"request","queue_ms":0,"test":{"kind":"rtt","protos":["quic"],"max_size":1,
            "nodelay":true,"busy_poll":false,"cpu":null,"sndbuf":null,"rcvbuf":null,"udp_port":null,"timeout_ms":1}}"#;
        let e = decode::<ClientMsg>(body).expect_err("unknown protocol").to_string();
        assert!(e.contains("quic") && e.contains("sendfile"), "{e}");
    }

    #[test]
    fn echo_requests_are_checked() {
        let host = HostLimits::default();
        assert!(Test::Rtt(echo(&[Proto::Tcp, Proto::Udp, Proto::Sendfile])).validate(&host).is_ok());
        let refused = |e: EchoSpec| Test::Rtt(e).validate(&host).expect_err("refused");
        let r = refused(echo(&[Proto::Tcp, Proto::Tcp]));
        assert!(r.code == ErrorCode::Unsupported && r.message.contains("twice"), "{r:?}");
        assert_eq!(refused(echo(&[])).code, ErrorCode::BadMessage);
        let r = refused(EchoSpec { max_size: 65_508, ..echo(&[Proto::Udp]) });
        assert!(r.code == ErrorCode::TooLarge && r.message.contains("65507"), "{r:?}");
        let r = refused(EchoSpec { max_size: 10 << 30, ..echo(&[Proto::Tcp]) });
        assert!(r.message.contains("10737418240") && r.message.contains("67108864"), "{r:?}");
        assert_eq!(refused(EchoSpec { sndbuf: Some(2 << 30), ..echo(&[Proto::Tcp]) }).code, ErrorCode::TooLarge);
        assert_eq!(refused(EchoSpec { udp_port: None, ..echo(&[Proto::Udp]) }).code, ErrorCode::BadMessage);
        assert_eq!(refused(EchoSpec { udp_port: Some(1), ..echo(&[Proto::Tcp]) }).code, ErrorCode::BadMessage);
        let r = refused(EchoSpec { timeout_ms: 61_000, ..echo(&[Proto::Tcp]) });
        assert!(r.message.contains("1 to 60000"), "{r:?}");
    }

    #[test]
    fn stream_requests_are_checked() {
        let host = HostLimits { congestion: vec!["reno".into(), "cubic".into()], cpus: vec![0, 1] };
        assert_eq!(stream().validate(&host), Ok(Proto::Tcp));
        for (spec, want) in [
            (StreamSpec { streams: 100_000, ..stream() }, "1 to 128"),
            (StreamSpec { proto: "sctp".into(), ..stream() }, "tcp or udp"),
            (StreamSpec { duration_ms: u64::MAX, omit_ms: 10, ..stream() }, "1 hour"),
            (StreamSpec { send_buffer: Some(1 << 20), window: Some(1 << 20), ..stream() }, "one direction"),
            (StreamSpec { recv_buffer: Some(1 << 20), direction: Direction::Both, ..stream() }, "one direction"),
            (StreamSpec { recv_buffer: Some(0), ..stream() }, "1 byte to 1 GiB"),
            (StreamSpec { congestion: Some("bbr".into()), ..stream() }, "reno, cubic"),
            (StreamSpec { pacing_bps: Some(0), ..stream() }, "pacing rate of 0"),
            (StreamSpec { proto: "udp".into(), write_size: 1472, ..stream() }, "rate above 0"),
            (StreamSpec { zerocopy: Some("splice".into()), ..stream() }, "sendfile or msg"),
            (StreamSpec { sample_ms: 1, ..stream() }, "10 ms"),
            (StreamSpec { cpu: Some(7), ..stream() }, "CPUs [0, 1]"),
        ] {
            let e = spec.validate(&host).expect_err(want);
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn the_stream_layout_and_buffers() {
        let s = StreamSpec { streams: 2, direction: Direction::Both, ..stream() };
        assert_eq!(s.layout(), [(0, true), (1, true), (2, false), (3, false)]);
        let s = StreamSpec { send_buffer: Some(10), recv_buffer: Some(20), ..stream() };
        assert_eq!(s.buffers(Some(true)), (Some(10), None));
        assert_eq!(s.buffers(Some(false)), (None, Some(20)));
        assert_eq!(s.buffers(None), (Some(10), Some(20)));
        assert_eq!(StreamSpec { window: Some(5), ..stream() }.buffers(Some(true)), (Some(5), Some(5)));
    }

    #[test]
    fn fanout_requests_are_checked() {
        let f = FanoutSpec { size: 4096, messages: 16, buffer: None, nodelay: false, idle_ms: 5000 };
        assert!(f.validate().is_ok());
        assert_eq!(FanoutSpec { size: 0, ..f.clone() }.validate().expect_err("0").code, ErrorCode::TooLarge);
        assert_eq!(
            FanoutSpec { messages: 1 << 21, ..f.clone() }.validate().expect_err("many").code,
            ErrorCode::TooLarge
        );
        assert_eq!(FanoutSpec { buffer: Some(0), ..f }.validate().expect_err("buffer").code, ErrorCode::TooLarge);
    }
}
