//! The agent's side of a copy (`gridperf copy HOST:PATH ...`), beneath its
//! root (`serve --root`): a push writes there (partial files renamed into
//! place when every block is verified), a pull reads from there. The
//! client's file list, the needs and the outcome go on the control
//! channel in parts; the blocks on the data connections
//! (`datapath::copy`).

use super::data::{self, accept_all};
use super::reply::{new_token, send_error, Fail};
use super::Shared;
use crate::datapath::copy::{self as dp, BlockQueue, SourceFile, StreamWork};
use crate::host;
use gridperf_core::copy::seal;
use gridperf_core::proto;
use gridperf_core::wire::{
    self, AgentMsg, CopyDirection, CopyFile, CopySpec, DataHello, DataKind, ErrorCode, MAX_COPY_FILES,
};
use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Instant;

mod read;
mod source;
mod write;

/// Runs a copy for a client whose request was checked.
pub(super) fn run(
    shared: &Shared,
    ctl: &mut TcpStream,
    peer: SocketAddr,
    spec: &CopySpec,
    session_secret: Option<&[u8; 32]>,
) -> Result<(), Fail> {
    if let Some(why) = refusal(shared, peer, spec) {
        return Err(send_error(ctl, ErrorCode::Refused, why));
    }
    let root_path = shared.cfg.root.as_ref().ok_or_else(|| "no root".to_string())?;
    let root: OwnedFd = File::open(root_path).map_err(|e| format!("the root {}: {e}", root_path.display()))?.into();
    let waits = proto::copy::Waits {
        control: proto::nanos(shared.cfg.control_timeout),
        list: proto::nanos(shared.cfg.max_idle),
    };
    if spec.direction == CopyDirection::Send {
        return source::run(shared, ctl, peer, spec, &root, waits);
    }
    let o = open(ctl, peer, spec, session_secret)?;
    if spec.direction == CopyDirection::Push {
        write::run(shared, ctl, spec, &root, o, waits)
    } else {
        read::run(shared, ctl, peer, spec, &root, o, waits)
    }
}

/// Why this agent will not take part in the copy, if it will not: no
/// root, a read-only root asked to take files, files from beyond loopback
/// without keys or an allow-list (so for sending to another agent the
/// client names), or no encryption where the operator asks for it.
fn refusal(shared: &Shared, peer: SocketAddr, spec: &CopySpec) -> Option<String> {
    let push = spec.direction == CopyDirection::Push;
    let third_party_source = spec.direction == CopyDirection::Send;
    if shared.cfg.root.is_none() {
        return Some(
            "this agent moves no files: its operator may give it a directory with `gridperf serve --root DIR`".into(),
        );
    }
    if push && shared.cfg.read_only {
        return Some("this agent's root is read-only (serve --read-only): pull from it, never push".into());
    }
    if (push || third_party_source)
        && shared.cfg.auth.is_none()
        && shared.cfg.allow.is_empty()
        && !peer.ip().to_canonical().is_loopback()
    {
        return Some(
            "this agent takes files only from loopback without keys or an allow-list: its operator may require keys \
             with `serve --auth FILE`, or name the clients with `serve --allow CIDR`"
                .into(),
        );
    }
    if shared.cfg.encrypt && spec.encrypt.is_none() {
        return Some("this agent moves files only encrypted (serve --encrypt): give copy --encrypt".into());
    }
    None
}

/// A push's or a pull's data side, opened: the listener, who may connect
/// to it and with what token, this end's record, the copy's keys.
pub(super) struct Opened {
    listener: std::net::TcpListener,
    /// Who may open data connections: the client, or a copy between
    /// agents' source agents.
    senders: Vec<std::net::IpAddr>,
    token: u64,
    agent: gridperf_core::model::EndInfo,
    keys: Option<seal::CopyKeys>,
}

/// Opens the data listener, says ready, and (--encrypt) takes part in the
/// key agreement right after.
fn open(
    ctl: &mut TcpStream,
    peer: SocketAddr,
    spec: &CopySpec,
    session_secret: Option<&[u8; 32]>,
) -> Result<Opened, Fail> {
    // a third-party copy's destination takes the data from the source agents
    let mut senders: Vec<std::net::IpAddr> = Vec::new();
    for a in &spec.senders {
        senders.push(a.parse::<std::net::IpAddr>().map_err(|e| format!("sender {a}: {e}"))?.to_canonical());
    }
    if senders.is_empty() {
        senders.push(peer.ip().to_canonical());
    }
    let local_ip = ctl.local_addr().map_err(|e| e.to_string())?.ip().to_canonical();
    // room in the backlog for every connection that may run at once, and as many waiting
    let listener = data::listener(local_ip, spec.window, spec.window, spec.live_connections() as i32 * 2)
        .map_err(|e| format!("data listener: {e}"))?;
    let token = new_token(peer);
    let agent = host::end_info(None, false);
    data::ready(ctl, Some(&listener), Vec::new(), token, agent.clone())?;
    let keys = match &spec.encrypt {
        None => None,
        Some(theirs) => {
            let theirs = gridperf_core::auth::unhex(theirs)
                .ok_or_else(|| "an encryption key that is not 32 bytes of hex".to_string())?;
            let mine = seal::Exchange::new()?;
            let public = gridperf_core::auth::hex(&mine.public());
            let keys = match mine.agree(&theirs, false, session_secret) {
                Ok(k) => k,
                Err(e) => return Err(send_error(ctl, ErrorCode::BadMessage, e)),
            };
            wire::write_msg(ctl, &AgentMsg::CopyKey { public }).map_err(|e| e.to_string())?;
            Some(keys)
        }
    };
    Ok(Opened { listener, senders, token, agent, keys })
}

/// The first data connections, in order of their numbers, each tuned
/// (and greeted, from a source agent). The client's stream-go may come
/// before the connections (it does not wait for step-ready): it waits,
/// unread, for the conversation.
fn take_first(shared: &Shared, ctl: &mut TcpStream, spec: &CopySpec, o: &Opened) -> Result<Vec<TcpStream>, Fail> {
    let third_party = !spec.senders.is_empty();
    let until = Instant::now() + shared.cfg.control_timeout;
    // a third-party destination's sources number theirs from their own bases
    let first = if third_party { spec.connections.max(spec.streams) } else { spec.streams };
    let mut fits = |h: &DataHello, got: &[data::Conn]| {
        h.kind == DataKind::Copy && h.index < first && !got.iter().any(|(g, _)| g.index == h.index)
    };
    let mut conns =
        accept_all(&o.listener, ctl, &o.senders, o.token, spec.streams as usize, until, &shared.stop, true, &mut fits)?;
    conns.sort_by_key(|(h, _)| h.index);
    let mut out = Vec::new();
    for (_, s) in conns {
        if let Some(cc) = &spec.congestion {
            if let Err(e) = gridperf_sys::set_tcp_congestion(&s, cc) {
                return Err(send_error(ctl, ErrorCode::Unsupported, format!("TCP_CONGESTION {cc}: {e}")));
            }
        }
        tune_socket(&s, spec);
        if third_party {
            write::welcome(&s, o.token).map_err(|e| format!("a source agent's data connection: {e}"))?;
        }
        out.push(s);
    }
    Ok(out)
}

/// The copy's congestion control and pacing on a data connection the agent took.
fn tune_socket(s: &TcpStream, spec: &CopySpec) {
    dp::no_delay(s);
    if let Some(cc) = &spec.congestion {
        let _ = gridperf_sys::set_tcp_congestion(s, cc);
    }
    if let Some(p) = spec.pacing_bps {
        let _ = gridperf_sys::set_max_pacing_rate(s, p / 8);
    }
}

/// A sending agent's pool (a pull's, a source's) over `queue` on a thread
/// of its own, each connection from `open`, while this thread runs `talk`
/// (the conversation: what the pool wants said goes through the machine;
/// `finished` says whether the pool ended) until the pool ends. The bytes
/// are counted for the metrics; what came of the pool, or why the talk failed.
pub(super) fn run_pool(
    shared: &Shared,
    spec: &CopySpec,
    sources: &[SourceFile],
    queue: &BlockQueue,
    open: &(dyn Fn(u32) -> std::io::Result<dp::Link> + Sync),
    wants: (mpsc::Sender<Want>, mpsc::Receiver<Want>),
    talk: impl FnOnce(&mpsc::Receiver<Want>, &dyn Fn() -> bool) -> Result<(), Fail>,
) -> Result<proto::copy::Event, Fail> {
    let (tx, rx) = wants;
    let (budget, plan) = pool_plan(spec);
    let moved: Vec<AtomicU64> = (0..budget).map(|_| AtomicU64::new(0)).collect();
    let note = |e: &gridperf_core::model::CopyEvent| {
        let _ = tx.send(Want::Note(e.clone()));
    };
    let (plan_, moved_, note_, done) = (&plan, &moved, &note, tx.clone());
    let pool = std::thread::scope(|scope| -> Result<dp::PoolOut, Fail> {
        let h = scope.spawn(move || {
            let pool = dp::send_pool(sources, spec.block, queue, plan_, open, moved_, note_);
            let _ = done.send(Want::Done);
            pool
        });
        let talked = talk(&rx, &|| h.is_finished());
        let pool = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        talked.map(|()| pool)
    })?;
    shared.metrics.moved(moved.iter().map(|m| m.load(Ordering::Relaxed)).sum(), 0);
    Ok(sent_event(sources, queue, pool))
}

/// What a sending agent's pool came to: every block sent (what changed
/// meanwhile, its streams and events), or why it stopped.
fn sent_event(sources: &[SourceFile], queue: &BlockQueue, pool: dp::PoolOut) -> proto::copy::Event {
    if let Some(why) = queue.stopped() {
        return proto::copy::Event::Stopped { why };
    }
    let mut changed: Vec<u32> =
        sources.iter().enumerate().filter(|(_, s)| s.changed()).map(|(k, _)| k as u32).collect();
    changed.extend(queue.failed().iter().map(|(f, _)| *f));
    proto::copy::Event::Sent {
        changed,
        streams: streams_of(&pool.works),
        events: pool.events,
        tail_blocks: queue.tail_sent(),
    }
}
/// What a sending agent's pool threads want said to the client while it
/// sends (a pull's and a source's): said by the machine
/// ([`proto::copy::Event::ConnectWanted`], [`proto::copy::Event::Noted`]),
/// on the conversation's thread.
pub(super) enum Want {
    /// A pull's further data connection, which only the client can open.
    Connect(u32),
    Note(gridperf_core::model::CopyEvent),
    /// The pool ended.
    Done,
}

/// A sending agent's pool, as the request asks: the most connections over
/// the copy, and the plan.
fn pool_plan(spec: &CopySpec) -> (u32, dp::PoolPlan) {
    let budget = spec.connections.max(spec.streams);
    let plan = dp::PoolPlan {
        start: spec.streams,
        auto: spec.auto,
        restart: spec.restart,
        tail: spec.tail,
        connections: budget,
        restart_caveat: host::ssthresh_cached(),
    };
    (budget, plan)
}
/// What the client named, beneath the root, expanded into files (what
/// cannot be read is logged and left out; a name that is not there ends the copy).
pub(super) fn sources_of(
    shared: &Shared,
    ctl: &mut TcpStream,
    peer: SocketAddr,
    root: &OwnedFd,
    list: &[CopyFile],
) -> Result<(Vec<SourceFile>, Vec<dp::Skipped>), Fail> {
    let mut sources: Vec<SourceFile> = Vec::new();
    let mut skipped: Vec<dp::Skipped> = Vec::new();
    for f in list {
        let room = MAX_COPY_FILES as usize - sources.len();
        match dp::expand(root, &f.path, room) {
            Ok((found, skip)) => {
                sources.extend(found);
                for (path, why) in &skip {
                    shared.log.line(&format!("gridperf serve: {peer}: copy skips {}: {why}", wire::printable(path)));
                }
                // the client hears of them too (the last of the list, at most as many as files)
                skipped.extend(skip.into_iter().take(MAX_COPY_FILES as usize));
            }
            Err(e) => return Err(send_error(ctl, ErrorCode::Refused, format!("{}: {e}", wire::printable(&f.path)))),
        }
    }
    skipped.truncate(1000);
    Ok((sources, skipped))
}
/// The streams that ended well, for the client's verdict.
fn streams_of(works: &[std::io::Result<StreamWork>]) -> Vec<StreamWork> {
    works.iter().filter_map(|w| w.as_ref().ok().cloned()).collect()
}
