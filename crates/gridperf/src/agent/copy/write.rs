//! The writing end of a push (the client's, or the source agents' in a
//! copy between agents): every file prepared, what is needed said, the
//! blocks taken on connections as they come, each file renamed into place
//! once every block is verified.

use super::{finish, go, streams_of, take_first, tune_socket, Opened};
use crate::agent::data;
use crate::agent::reply::{send_error, Fail};
use crate::agent::Shared;
use crate::ctl;
use crate::datapath::copy::{self as dp, SinkRules, StreamWork};
use gridperf_core::wire::{self, chunk_needs, AgentMsg, ClientMsg, CopyFile, CopySpec, DataHello, DataKind, ErrorCode};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// The writing end: prepare every file, say what is needed, take the blocks.
pub(super) fn run(
    shared: &Shared,
    ctl: &mut TcpStream,
    spec: &CopySpec,
    root: &OwnedFd,
    list: &[CopyFile],
    o: Opened,
) -> Result<(), Fail> {
    let third_party = !spec.senders.is_empty();
    let rules = SinkRules {
        force: spec.force,
        resume: spec.resume,
        // the first destination computes the checksum, in order, reading back what others wrote
        checksum: spec.checksum.filter(|_| !spec.join),
        join: spec.join,
        adopt: third_party && !spec.join,
    };
    let (files, needs) = dp::prepare_all(root, list, spec.block, rules);
    let parts = chunk_needs(&needs);
    let n = parts.len();
    for (k, part) in parts.into_iter().enumerate() {
        wire::write_msg(ctl, &AgentMsg::CopyNeeds { needs: part, last: k + 1 == n }).map_err(|e| e.to_string())?;
    }
    let socks = take_first(shared, ctl, spec, &o)?;
    go(ctl, shared)?;
    let (works, changed) = receive_all(shared, ctl, &o, spec, socks, &files)?;
    let outcomes = finish_all(&files, &changed);
    let chunks: Vec<Vec<wire::CopyOutcome>> = outcomes.chunks(2000).map(<[_]>::to_vec).collect();
    let n = chunks.len().max(1);
    for k in 0..n {
        let files = chunks.get(k).cloned().unwrap_or_default();
        let streams = if k + 1 == n { streams_of(&works) } else { Vec::new() };
        wire::write_msg(ctl, &AgentMsg::CopyResults { files, last: k + 1 == n, streams }).map_err(|e| e.to_string())?;
    }
    let mut agent = o.agent;
    agent.sockets = Vec::new();
    finish(ctl, shared.cfg.max_idle, agent)
}

/// The writing end's connections of a push: the first ones, then any the
/// client opens while the copy runs (a restart, `-P auto`), each with its
/// own number below `spec.connections`, taken as they come; until the
/// client says the copy is done. A connection that breaks or is reset is
/// not an error here (the client sends its blocks again on another: a file
/// is whole when every block is verified), but one that carried what was
/// not sent (altered on the way, or not a block) ends the copy at once,
/// every partial file kept.
fn receive_all(
    shared: &Shared,
    ctl: &mut TcpStream,
    o: &Opened,
    spec: &CopySpec,
    socks: Vec<TcpStream>,
    files: &[Option<dp::SinkFile>],
) -> Result<Received, Fail> {
    let (l, senders, token, keys) = (&o.listener, &o.senders, o.token, o.keys.as_ref());
    let idle = shared.cfg.max_idle;
    let most = if spec.connections == 0 { spec.streams } else { spec.connections };
    let moved: Vec<AtomicU64> = (0..most).map(|_| AtomicU64::new(0)).collect();
    let mut seen: Vec<u32> = (0..socks.len() as u32).collect();
    let live = spec.live_connections() as usize;
    let mut waiting: std::collections::VecDeque<(u32, TcpStream)> = std::collections::VecDeque::new();
    let received = std::thread::scope(|scope| {
        let mut set = dp::ReceiveSet::new(scope, files, spec.block, idle, spec.window, keys, &moved);
        for (k, s) in socks.into_iter().enumerate() {
            set.start(k as u32, s);
        }
        let mut quiet_since = Instant::now();
        let outcome: Result<Vec<u32>, Fail> = loop {
            // what arrived was not what was sent: say so before the client asks, keep every partial file
            if let Some(e) = set.reap() {
                set.shut();
                finish_all(files, &(0..files.len() as u32).collect::<Vec<_>>());
                let why = format!("a stream at the writing end: {e}; nothing renamed, partial files kept for a resume");
                break Err(send_error(ctl, ErrorCode::BadMessage, why));
            }
            if set.running() > 0 {
                quiet_since = Instant::now();
            } else if quiet_since.elapsed() > idle {
                set.shut();
                break Err(Fail::Told(format!(
                    "the client opened no data connection and said nothing for {} s: partial files kept",
                    idle.as_secs()
                )));
            }
            if shared.stop.load(std::sync::atomic::Ordering::Relaxed) {
                set.shut();
                break Err(send_error(ctl, ErrorCode::Busy, "the agent is shutting down".into()));
            }
            let ready = match gridperf_sys::poll_readable(&[l.as_raw_fd(), ctl.as_raw_fd()], 100) {
                Ok(r) => r,
                Err(e) => {
                    set.shut();
                    break Err(Fail::Told(format!("waiting on the copy's connections: {e}")));
                }
            };
            // connections beyond what runs at once wait, without a thread or a buffer, for one to end
            while set.running() < live {
                let Some((k, s)) = waiting.pop_front() else { break };
                set.start(k, s);
            }
            if ready[0] {
                let mut fits = |h: &DataHello| h.kind == DataKind::Copy && h.index < most && !seen.contains(&h.index);
                if let Some((h, s)) = data::accept_one(l, senders, token, &mut fits) {
                    tune_socket(&s, spec);
                    if !spec.senders.is_empty() && welcome(&s, token).is_err() {
                        continue;
                    }
                    seen.push(h.index);
                    if set.running() < live {
                        set.start(h.index, s);
                    } else if waiting.len() < live {
                        waiting.push_back((h.index, s));
                    }
                    // beyond both: closed (its blocks go again on another)
                }
            }
            if !ready[1] {
                continue;
            }
            match ctl::read_msg_within::<ClientMsg>(ctl, idle) {
                Ok(ClientMsg::CopyDone { changed }) => break Ok(changed),
                Ok(ClientMsg::Abort { reason }) => {
                    set.shut();
                    finish_all(files, &(0..files.len() as u32).collect::<Vec<_>>());
                    break Err(Fail::Told(format!("client aborted: {reason} (partial files kept for a resume)")));
                }
                Ok(other) => {
                    set.shut();
                    break Err(send_error(ctl, ErrorCode::BadMessage, format!("expected copy-done, got {other:?}")));
                }
                Err(e) => {
                    // the client vanished: what arrived stays, partial, for a resume
                    set.shut();
                    break Err(Fail::Told(format!("the client went away during the copy: {e}; partial files kept")));
                }
            }
        };
        // the client says done once every block is acknowledged: what its
        // connections still carry is not needed
        let works = set.finish();
        outcome.map(|changed| (works, changed))
    });
    shared.metrics.moved(0, moved.iter().map(|m| m.load(std::sync::atomic::Ordering::Relaxed)).sum());
    received
}

/// The streams' results, and the files whose source changed (the client's copy-done).
type Received = (Vec<std::io::Result<StreamWork>>, Vec<u32>);

/// A third-party copy's destination greets a source agent's data
/// connection with the token it carried: the source sends nothing until
/// it sees it (a client cannot aim a source agent's data at anything but
/// an agent expecting it).
pub(super) fn welcome(mut s: &TcpStream, token: u64) -> std::io::Result<()> {
    use std::io::Write;
    s.write_all(&token.to_be_bytes())
}
/// Every file's end: renamed into place if whole (and its source unchanged), else kept partial.
pub(super) fn finish_all(files: &[Option<dp::SinkFile>], changed: &[u32]) -> Vec<wire::CopyOutcome> {
    files
        .iter()
        .enumerate()
        .filter_map(|(k, f)| f.as_ref().map(|f| f.finish(k as u32, changed.contains(&(k as u32)))))
        .collect()
}
