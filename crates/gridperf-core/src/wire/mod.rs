//! The control channel: length-prefixed JSON frames carrying a typed,
//! versioned message set. See docs/protocol.md for the conversation.
//!
//! A frame is a 4-byte big-endian length followed by that many bytes of
//! JSON. Frames longer than [`MAX_FRAME`] are refused before anything is
//! allocated, so a peer that sends garbage (or a 4 GB length) costs nothing.
//! Unknown fields are ignored, so a newer peer can add optional fields
//! without a version bump; a new message type or a changed meaning bumps
//! [`PROTOCOL_VERSION`].

pub mod block;
mod copy;
mod hello;
mod request;
pub mod udp;

pub use copy::*;
pub use hello::*;
pub use request::*;

use crate::model::{EndInfo, StepFigures};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use thiserror::Error;

/// The control-channel protocol version. Both ends must speak the same one.
pub const PROTOCOL_VERSION: u32 = 7;

/// The word every Hello carries, so a stray client is told apart from an old gridperf.
pub const MAGIC: &str = "gridperf";

/// Largest control frame accepted, in bytes (1 MiB).
pub const MAX_FRAME: usize = 1 << 20;

/// Largest frame a client may send (16 KiB): every client message is a few
/// hundred bytes, and a JSON parser holds many times a frame while it reads
/// one (60 clients' 1 MiB hellos took an agent to 883 MB).
pub const MAX_CLIENT_FRAME: usize = 16 << 10;

/// The largest frame a message type comes in: what a reader of it allows.
pub trait Framed {
    const MAX_FRAME: usize;
}

impl Framed for ClientMsg {
    const MAX_FRAME: usize = MAX_CLIENT_FRAME;
}

impl Framed for AgentMsg {
    const MAX_FRAME: usize = MAX_FRAME;
}

/// The agent's default TCP port for the control channel.
pub const DEFAULT_PORT: u16 = 5301;

/// The most interval figures one StreamIntervals frame carries (each at
/// most 21 bytes of JSON: 840 kB, within [`MAX_FRAME`]).
pub const INTERVALS_PER_FRAME: usize = 40_000;

/// The messages that carry a finished stream test's ends to the client:
/// each end's intervals in frames of their own, then the ends without them.
pub fn stream_done_messages(mut ends: Vec<crate::model::StreamEnd>) -> Vec<AgentMsg> {
    let mut out = Vec::new();
    for e in &mut ends {
        let intervals = std::mem::take(&mut e.intervals);
        for chunk in intervals.chunks(INTERVALS_PER_FRAME) {
            out.push(AgentMsg::StreamIntervals { index: e.index, intervals: chunk.to_vec() });
        }
    }
    out.push(AgentMsg::StreamDone { ends });
    out
}

/// The most characters of a peer's text shown or logged.
pub const MAX_PEER_TEXT: usize = 2000;

/// A peer's text (an agent's error, a client's abort reason) made safe for
/// a terminal or a log line: every control character, newlines included
/// (a forged log line) and ESC (a terminal's escape sequences), is shown
/// as `\u{..}`, and at most [`MAX_PEER_TEXT`] characters are kept.
pub fn printable(s: &str) -> String {
    escape_controls(s, |_| false)
}

/// The same for text of several lines (a table, an error with a log in
/// it): newlines and tabs stay, every other control character is escaped.
pub fn printable_lines(s: &str) -> String {
    escape_controls(s, |c| c == '\n' || c == '\t')
}

fn escape_controls(s: &str, keep: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_PEER_TEXT * 2));
    for (n, c) in s.chars().enumerate() {
        if n == MAX_PEER_TEXT && !keep('\n') {
            out.push_str("...");
            break;
        }
        if c.is_control() && !keep(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// What went wrong on the control channel.
#[derive(Debug, Error)]
pub enum WireError {
    #[error("the peer closed the control connection")]
    Closed,
    #[error("no answer from the peer within the deadline")]
    Timeout,
    #[error("control frame of {len} bytes exceeds the limit of {max} bytes (is the peer a gridperf agent of the same version?)")]
    TooLarge { len: usize, max: usize },
    #[error("malformed control message: {0}")]
    Malformed(String),
    #[error("control channel I/O error: {0}")]
    Io(#[from] io::Error),
}

fn map_io(e: io::Error) -> WireError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => WireError::Timeout,
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => WireError::Closed,
        _ => WireError::Io(e),
    }
}

/// Encodes a message as one frame (length prefix included).
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, WireError> {
    let body = serde_json::to_vec(msg).map_err(|e| WireError::Malformed(e.to_string()))?;
    if body.len() > MAX_FRAME {
        return Err(WireError::TooLarge { len: body.len(), max: MAX_FRAME });
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Decodes one frame's body.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, WireError> {
    serde_json::from_slice(body).map_err(|e| WireError::Malformed(e.to_string()))
}

/// Writes one message in a single write.
pub fn write_msg<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), WireError> {
    let frame = encode(msg)?;
    w.write_all(&frame).map_err(map_io)?;
    w.flush().map_err(map_io)
}

/// Reads one frame's body. The reader's own timeout (SO_RCVTIMEO) is the deadline.
pub fn read_frame<R: Read>(r: &mut R) -> Result<Vec<u8>, WireError> {
    read_frame_max(r, MAX_FRAME)
}

/// Reads one frame's body of at most `max` bytes: a longer one is refused
/// before anything is allocated.
pub fn read_frame_max<R: Read>(r: &mut R, max: usize) -> Result<Vec<u8>, WireError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) => return Err(WireError::Closed),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(map_io(e)),
        }
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(WireError::TooLarge { len, max });
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).map_err(map_io)?;
    Ok(body)
}

/// Reads one message, in a frame no longer than its type allows. The
/// reader's own timeout (SO_RCVTIMEO) is the deadline.
pub fn read_msg<R: Read, T: DeserializeOwned + Framed>(r: &mut R) -> Result<T, WireError> {
    decode(&read_frame_max(r, T::MAX_FRAME)?)
}

/// One point of a test: the agent echoes messages of `size` bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRequest {
    pub proto: String,
    pub size: u64,
    /// For TCP and sendfile: the exact number of messages to echo, after which
    /// the agent reports StepDone by itself. None: echo until StepEnd.
    pub exchanges: Option<u64>,
}

/// Messages from the client to the agent. (A request is much larger than
/// the other messages; there is one per test, so it is not boxed.)
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ClientMsg {
    Hello {
        magic: String,
        version: u32,
        software: String,
    },
    /// The answer to an agent's challenge (crate::auth): the key's name,
    /// the client's nonce and its proof, in hex.
    Auth {
        key: String,
        nonce: String,
        proof: String,
    },
    Request(TestRequest),
    Step(StepRequest),
    /// Ends a step that has no exchange count.
    StepEnd,
    /// Ends the test; the agent answers with Report.
    Finish,
    /// Starts a stream test's data transfer (all data connections are open).
    StreamGo,
    /// A copy's files, in order (push: where each goes, its size and time;
    /// pull: what to read, a file or a directory).
    CopyFiles {
        files: Vec<CopyFile>,
    },
    /// Pull: the blocks the client still needs of each file; `last` on the final part.
    CopyNeeds {
        needs: Vec<CopyNeed>,
        last: bool,
    },
    /// Push: every block is sent; these files' sources changed meanwhile.
    CopyDone {
        changed: Vec<u32>,
    },
    /// A third-party source: send to the agent at `addr` (its data port),
    /// each data connection's hello carrying `token` and an index from `base`.
    CopyTo {
        addr: String,
        token: u64,
        base: u32,
    },
    /// A third-party source: blocks to send (as ranges, by file); `last`:
    /// no more will come, finish what is taken. None now and not last:
    /// others still hold blocks that may come back; ask again.
    CopyLeased {
        blocks: Vec<CopyNeed>,
        last: bool,
    },
    Abort {
        reason: String,
    },
}

/// Why the agent refused or stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorCode {
    VersionMismatch,
    Busy,
    BadMessage,
    Unsupported,
    TooLarge,
    Timeout,
    Internal,
    /// The client is not allowed: no key, a wrong key, an address or a
    /// request beyond the agent's limits.
    Refused,
    /// Anything a newer agent says that this client does not know.
    #[serde(other)]
    Other,
}

/// Messages from the agent to the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum AgentMsg {
    Welcome {
        magic: String,
        version: u32,
        software: String,
        /// A fresh nonce (hex) when this agent wants a key (serve --auth):
        /// the client answers with Auth before anything else.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        challenge: Option<String>,
    },
    /// The key was accepted; the agent's own proof that it holds it (hex).
    AuthOk {
        proof: String,
    },
    /// The test waits in the agent's queue; `ahead` tests are before it.
    Queued {
        ahead: u32,
    },
    /// The data sockets are open: connect to these ports on the agent's
    /// address, and begin every data connection with a [`DataHello`]
    /// carrying `token`.
    Ready {
        /// The TCP data listener, if the test has TCP connections.
        tcp_port: Option<u16>,
        /// The UDP sockets: an echo test's one, or a UDP stream test's one per stream, in stream order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        udp_ports: Vec<u16>,
        token: u64,
        agent: EndInfo,
    },
    StepReady,
    StepDone {
        figures: StepFigures,
    },
    Report {
        agent: EndInfo,
    },
    /// During a stream test: bytes the agent received on each stream in the
    /// interval that ended `t_ms` after the start (receiving streams only, in
    /// stream order; sending streams show 0).
    StreamInterval {
        t_ms: u64,
        bytes: Vec<u64>,
    },
    /// After a stream test: part of the agent's TCP_INFO timeline of one stream.
    StreamSamples {
        index: u32,
        samples: Vec<crate::analysis::flow::TcpSample>,
    },
    /// After a stream test: part of the intervals of one of the agent's
    /// streams (bytes per interval), in order, before StreamDone, whose ends
    /// then carry none (a test of 128 streams in 10 ms intervals has more
    /// figures than one frame holds).
    StreamIntervals {
        index: u32,
        intervals: Vec<u64>,
    },
    /// After a stream test: the agent's figures for each stream.
    StreamDone {
        ends: Vec<crate::model::StreamEnd>,
    },
    /// Pull: the files the agent will send, what the client named expanded
    /// (`path` relative to the named path's parent); `last` on the final part.
    CopySources {
        files: Vec<CopyFile>,
        last: bool,
        /// What the agent left out of a directory it lists (a link, a
        /// device, what it cannot read), each with why; in the last part.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        skipped: Vec<(String, String)>,
    },
    /// Push: the blocks the agent still needs of each file.
    CopyNeeds {
        needs: Vec<CopyNeed>,
        last: bool,
    },
    /// A copy asked to be encrypted: the agent's X25519 public key (hex),
    /// right after Ready.
    CopyKey {
        public: String,
    },
    /// Pull: every block is sent; these files' sources changed meanwhile;
    /// the agent's streams (its disk, hashing and socket time).
    CopySent {
        changed: Vec<u32>,
        #[serde(default)]
        streams: Vec<crate::model::CopyStream>,
        /// What the agent's pool of connections did (restarts, -P auto, broken ones).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        events: Vec<crate::model::CopyEvent>,
        /// Blocks the agent sent again at the tail.
        #[serde(default)]
        tail_blocks: u64,
    },
    /// Pull: open data connection `index` (a restart's, or -P auto's), with
    /// the copy's token; the agent takes it within its control deadline.
    CopyConnect {
        index: u32,
    },
    /// A third-party source: the blocks acknowledged since the last lease
    /// (ranges, by file) and how many more it wants; the client answers
    /// with CopyLeased.
    CopyLease {
        done: Vec<CopyNeed>,
        want: u32,
    },
    /// Pull: something the agent's pool of connections did, as it happened.
    CopyEvent {
        event: crate::model::CopyEvent,
    },
    /// Push: how each file ended at the agent; the agent's streams on the last part.
    CopyResults {
        files: Vec<CopyOutcome>,
        last: bool,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        streams: Vec<crate::model::CopyStream>,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
}

#[cfg(test)]
mod printable_tests {
    use super::*;

    #[test]
    fn a_stream_done_of_128_streams_in_10_ms_intervals_fits_the_frames() {
        // 128 streams, an hour in 10 ms intervals of 20-digit figures: 1.1 GB of JSON in one frame before
        let ends: Vec<crate::model::StreamEnd> = (0..128)
            .map(|i| crate::model::StreamEnd { index: i, intervals: vec![u64::MAX; 3_000], ..Default::default() })
            .collect();
        let whole = encode(&AgentMsg::StreamDone { ends: ends.clone() });
        assert!(matches!(whole, Err(WireError::TooLarge { .. })), "the defect: one frame cannot hold it");
        let msgs = stream_done_messages(ends.clone());
        for m in &msgs {
            let body = encode(m).expect("every frame fits");
            assert!(body.len() <= MAX_FRAME);
        }
        // and the client gets every figure back, in order
        let mut back: Vec<Vec<u64>> = vec![Vec::new(); 128];
        for m in &msgs {
            if let AgentMsg::StreamIntervals { index, intervals } = m {
                back[*index as usize].extend(intervals);
            }
        }
        assert!(back.iter().zip(&ends).all(|(b, e)| *b == e.intervals));
        assert!(
            matches!(msgs.last(), Some(AgentMsg::StreamDone { ends }) if ends.iter().all(|e| e.intervals.is_empty()))
        );
    }

    #[test]
    fn a_peers_escape_codes_and_forged_lines_are_shown_not_obeyed() {
        assert_eq!(printable("busy\x1b[2J\x1b[31mpwned"), "busy\\u{1b}[2J\\u{1b}[31mpwned");
        assert_eq!(printable("ok\ngridperf serve: 10.0.0.1: rtt"), "ok\\u{a}gridperf serve: 10.0.0.1: rtt");
        assert_eq!(printable("a\rb\u{7}c"), "a\\u{d}b\\u{7}c");
        assert_eq!(printable("plain words, ünïcode"), "plain words, ünïcode");
        assert_eq!(printable(&"x".repeat(5000)).len(), MAX_PEER_TEXT + 3);
        assert_eq!(printable_lines("row 1\trow\nrow 2\x1b]0;title\x07"), "row 1\trow\nrow 2\\u{1b}]0;title\\u{7}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_roundtrip() {
        let msg = ClientMsg::Hello { magic: MAGIC.into(), version: PROTOCOL_VERSION, software: "t".into() };
        let frame = encode(&msg).expect("encode");
        assert_eq!(u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize, frame.len() - 4);
        let back: ClientMsg = read_msg(&mut &frame[..]).expect("decode");
        assert_eq!(back, msg);
    }

    #[test]
    fn a_4gb_length_is_refused_without_allocating() {
        let frame = [0xff, 0xff, 0xff, 0xff, b'{'];
        match read_msg::<_, ClientMsg>(&mut &frame[..]) {
            Err(WireError::TooLarge { len, max }) => assert_eq!((len, max), (u32::MAX as usize, MAX_CLIENT_FRAME)),
            other => panic!("{other:?}"),
        }
        match read_msg::<_, AgentMsg>(&mut &frame[..]) {
            Err(WireError::TooLarge { len, max }) => assert_eq!((len, max), (u32::MAX as usize, MAX_FRAME)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn garbage_and_truncation() {
        let mut frame = 5u32.to_be_bytes().to_vec();
        frame.extend_from_slice(b"hello");
        assert!(matches!(read_msg::<_, ClientMsg>(&mut &frame[..]), Err(WireError::Malformed(_))));
        let truncated = [0u8, 0, 0, 9, b'{'];
        assert!(matches!(read_msg::<_, ClientMsg>(&mut &truncated[..]), Err(WireError::Closed)));
        assert!(matches!(read_msg::<_, ClientMsg>(&mut &[][..]), Err(WireError::Closed)));
    }

    #[test]
    fn unknown_message_types_and_fields() {
        // a newer client's message type: a clear Malformed, not a panic
        let body = br#"{"type":"teleport","to":"mars"}"#;
        let e = decode::<ClientMsg>(body).expect_err("unknown type");
        assert!(e.to_string().contains("teleport"), "{e}");
        // an added optional field is ignored
        let body = br#"{"type":"step","proto":"tcp","size":64,"exchanges":null,"new_field":1}"#;
        assert!(decode::<ClientMsg>(body).is_ok());
        // an error code from a newer agent
        let body = br#"{"type":"error","code":"solar-flare","message":"m"}"#;
        assert_eq!(
            decode::<AgentMsg>(body).expect("decodes"),
            AgentMsg::Error { code: ErrorCode::Other, message: "m".into() }
        );
    }
}
