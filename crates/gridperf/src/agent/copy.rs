//! The agent's side of a copy (`gridperf copy HOST:PATH ...`), beneath its
//! root (`serve --root`): a push writes there (partial files renamed into
//! place when every block is verified), a pull reads from there. The
//! client's file list, the needs and the outcome go on the control
//! channel in parts; the blocks on the data connections
//! (`datapath::copy`).

use super::data::{self, accept_all};
use super::reply::{new_token, send_error, wire_code, Fail};
use super::Shared;
use crate::datapath::copy::{self as dp, BlockQueue, Crypt, SinkRules, SourceFile, StreamWork};
use crate::{ctl, host};
use gridperf_core::seal;
use gridperf_core::wire::{
    self, chunk_files, chunk_needs, AgentMsg, ClientMsg, CopyDirection, CopyFile, CopyNeed, CopySpec, DataHello,
    DataKind, ErrorCode, MAX_COPY_FILES,
};
use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// Runs a copy for a client whose request was checked.
pub(super) fn run(
    shared: &Shared,
    ctl: &mut TcpStream,
    peer: SocketAddr,
    spec: &CopySpec,
    session_secret: Option<&[u8; 32]>,
) -> Result<(), Fail> {
    let Some(root_path) = &shared.cfg.root else {
        return Err(send_error(
            ctl,
            ErrorCode::Refused,
            "this agent moves no files: its operator may give it a directory with `gridperf serve --root DIR`".into(),
        ));
    };
    let push = spec.direction == CopyDirection::Push;
    let third_party_source = spec.direction == CopyDirection::Send;
    if push && shared.cfg.read_only {
        return Err(send_error(
            ctl,
            ErrorCode::Refused,
            "this agent's root is read-only (serve --read-only): pull from it, never push".into(),
        ));
    }
    // writes from beyond loopback need keys, or an allow-list the operator
    // gave; so does sending to another agent the client names
    if (push || third_party_source)
        && shared.cfg.auth.is_none()
        && shared.cfg.allow.is_empty()
        && !peer.ip().to_canonical().is_loopback()
    {
        return Err(send_error(
            ctl,
            ErrorCode::Refused,
            "this agent takes files only from loopback without keys or an allow-list: its operator may require keys \
             with `serve --auth FILE`, or name the clients with `serve --allow CIDR`"
                .into(),
        ));
    }
    if shared.cfg.encrypt && spec.encrypt.is_none() {
        return Err(send_error(
            ctl,
            ErrorCode::Refused,
            "this agent moves files only encrypted (serve --encrypt): give copy --encrypt".into(),
        ));
    }
    let root: OwnedFd = File::open(root_path).map_err(|e| format!("the root {}: {e}", root_path.display()))?.into();
    if third_party_source {
        return send_to_agent(shared, ctl, peer, spec, &root);
    }
    // a third-party copy's destination takes the data from the source agents
    let mut senders: Vec<std::net::IpAddr> = Vec::new();
    for a in &spec.senders {
        senders.push(a.parse::<std::net::IpAddr>().map_err(|e| format!("sender {a}: {e}"))?.to_canonical());
    }
    if senders.is_empty() {
        senders.push(peer.ip().to_canonical());
    }
    let third_party = !spec.senders.is_empty();
    let local_ip = ctl.local_addr().map_err(|e| e.to_string())?.ip().to_canonical();
    // room in the backlog for every connection that may run at once, and as many waiting
    let l = data::listener(local_ip, spec.window, spec.window, spec.live_connections() as i32 * 2)
        .map_err(|e| format!("data listener: {e}"))?;
    let token = new_token(peer);
    let agent = host::end_info(None, false);
    data::ready(ctl, Some(&l), Vec::new(), token, agent.clone())?;
    // --encrypt: this end's half of the key agreement, right after ready
    let keys = match &spec.encrypt {
        None => None,
        Some(theirs) => {
            let theirs = gridperf_core::auth::unhex(theirs)
                .ok_or_else(|| "an encryption key that is not 32 bytes of hex".to_string())?;
            let mine = seal::Exchange::new()?;
            let public = gridperf_core::auth::hex(&mine.public());
            let keys = mine.agree(&theirs, false, session_secret);
            let keys = match keys {
                Ok(k) => k,
                Err(e) => return Err(send_error(ctl, ErrorCode::BadMessage, e)),
            };
            wire::write_msg(ctl, &AgentMsg::CopyKey { public }).map_err(|e| e.to_string())?;
            Some(keys)
        }
    };
    let idle = shared.cfg.max_idle;
    let list = read_list(ctl, spec.files, idle)?;
    let sockets = |ctl: &mut TcpStream| -> Result<Vec<TcpStream>, Fail> {
        let until = Instant::now() + shared.cfg.control_timeout;
        // a third-party destination's sources number theirs from their own bases
        let first = if third_party { spec.connections.max(spec.streams) } else { spec.streams };
        let mut fits = |h: &DataHello, got: &[data::Conn]| {
            h.kind == DataKind::Copy && h.index < first && !got.iter().any(|(g, _)| g.index == h.index)
        };
        // the client's stream-go may come before the connections (it does not wait for step-ready)
        let mut conns =
            accept_all(&l, ctl, &senders, token, spec.streams as usize, until, &shared.stop, true, &mut fits)?;
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
                welcome(&s, token).map_err(|e| format!("a source agent's data connection: {e}"))?;
            }
            out.push(s);
        }
        // every connection taken: the client may start
        wire::write_msg(ctl, &AgentMsg::StepReady).map_err(|e| e.to_string())?;
        Ok(out)
    };
    if push {
        // the writing end: prepare every file, say what is needed, take the blocks
        let rules = SinkRules {
            force: spec.force,
            resume: spec.resume,
            // the first destination computes the checksum, in order, reading back what others wrote
            checksum: spec.checksum.filter(|_| !spec.join),
            join: spec.join,
            adopt: third_party && !spec.join,
        };
        let (files, needs) = dp::prepare_all(&root, &list, spec.block, rules);
        let parts = chunk_needs(&needs);
        let n = parts.len();
        for (k, part) in parts.into_iter().enumerate() {
            wire::write_msg(ctl, &AgentMsg::CopyNeeds { needs: part, last: k + 1 == n }).map_err(|e| e.to_string())?;
        }
        let socks = sockets(ctl)?;
        go(ctl, shared)?;
        let (works, changed) = receive_all(shared, ctl, &l, &senders, token, spec, socks, &files, keys.as_ref())?;
        let outcomes = finish_all(&files, &changed);
        let chunks: Vec<Vec<wire::CopyOutcome>> = outcomes.chunks(2000).map(<[_]>::to_vec).collect();
        let n = chunks.len().max(1);
        for k in 0..n {
            let files = chunks.get(k).cloned().unwrap_or_default();
            let streams = if k + 1 == n { streams_of(&works) } else { Vec::new() };
            wire::write_msg(ctl, &AgentMsg::CopyResults { files, last: k + 1 == n, streams })
                .map_err(|e| e.to_string())?;
        }
        let mut agent = agent;
        agent.sockets = Vec::new();
        finish(ctl, idle, agent)
    } else {
        // the reading end: expand what was named, send the list, take the needs, send the blocks
        let (sources, skipped) = sources_of(shared, ctl, peer, &root, &list)?;
        let infos: Vec<CopyFile> = sources.iter().map(|s| s.info.clone()).collect();
        tell_sources(ctl, &infos, skipped)?;
        let needs = read_needs(ctl, &infos, spec.block, idle)?;
        let socks = sockets(ctl)?;
        go(ctl, shared)?;
        let queue = BlockQueue::new(&needs);
        let first: Vec<u32> = (0..socks.len() as u32).collect();
        let conns = PullConnections {
            l: &l,
            ctl: std::sync::Mutex::new(ctl.try_clone().map_err(|e| e.to_string())?),
            peer,
            token,
            spec,
            within: shared.cfg.control_timeout,
            arrived: std::sync::Mutex::new((
                socks.into_iter().enumerate().map(|(k, s)| (k as u32, s)).collect(),
                first,
            )),
        };
        let (budget, plan) = pool_plan(spec);
        let moved: Vec<AtomicU64> = (0..budget).map(|_| AtomicU64::new(0)).collect();
        let open = |k: u32| -> std::io::Result<dp::Link> {
            let sock = conns.open(k)?;
            Ok(dp::Link { sock, idle, crypt: Crypt::of(keys.as_ref(), k, true), window: spec.window })
        };
        let tell = |e: &gridperf_core::model::CopyEvent| {
            let mut c = conns.ctl.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = wire::write_msg(&mut *c, &AgentMsg::CopyEvent { event: e.clone() });
        };
        let pool = dp::send_pool(&sources, spec.block, &queue, &plan, &open, &moved, &tell);
        shared.metrics.moved(moved.iter().map(|m| m.load(std::sync::atomic::Ordering::Relaxed)).sum(), 0);
        sent(ctl, idle, agent, &sources, &queue, pool)
    }
}

/// A sending agent's end of a copy (a pull, a third-party source): the
/// queue's stop is the copy's error; else what changed, its streams and
/// events, then the client's finish.
fn sent(
    ctl: &mut TcpStream,
    idle: std::time::Duration,
    agent: gridperf_core::model::EndInfo,
    sources: &[SourceFile],
    queue: &BlockQueue,
    pool: dp::PoolOut,
) -> Result<(), Fail> {
    if let Some(why) = queue.stopped() {
        return Err(send_error(ctl, ErrorCode::Internal, format!("the copy stopped: {why}")));
    }
    let mut changed: Vec<u32> =
        sources.iter().enumerate().filter(|(_, s)| s.changed()).map(|(k, _)| k as u32).collect();
    changed.extend(queue.failed().iter().map(|(f, _)| *f));
    let sent = AgentMsg::CopySent {
        changed,
        streams: streams_of(&pool.works),
        events: pool.events,
        tail_blocks: queue.tail_sent(),
    };
    wire::write_msg(ctl, &sent).map_err(|e| e.to_string())?;
    finish(ctl, idle, agent)
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
fn sources_of(
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

/// The files this end will send, in CopySources parts, and what it left
/// out of the directories it listed (in the last part).
fn tell_sources(ctl: &mut TcpStream, infos: &[CopyFile], skipped: Vec<dp::Skipped>) -> Result<(), Fail> {
    let parts = chunk_files(infos);
    let n = parts.len().max(1);
    let mut skipped = Some(skipped);
    for k in 0..n {
        let files = parts.get(k).cloned().unwrap_or_default();
        let last = k + 1 == n;
        let skipped = if last { skipped.take().unwrap_or_default() } else { Vec::new() };
        wire::write_msg(ctl, &AgentMsg::CopySources { files, last, skipped }).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A third-party copy's source: the files named, each with its BLAKE3
/// (for the client to check that every source holds the same),
/// then, once the client names the destination agent, the blocks it
/// leases, sent straight to that agent over this end's pool of
/// connections (restarts, the tail and -P auto as in a pull). The client
/// hears of each lease's acknowledged blocks, the pool's events and the end.
fn send_to_agent(
    shared: &Shared,
    ctl: &mut TcpStream,
    peer: SocketAddr,
    spec: &CopySpec,
    root: &OwnedFd,
) -> Result<(), Fail> {
    let agent = host::end_info(None, false);
    data::ready(ctl, None, Vec::new(), new_token(peer), agent.clone())?;
    let idle = shared.cfg.max_idle;
    let within = shared.cfg.control_timeout;
    let list = read_list(ctl, spec.files, idle)?;
    let (mut sources, skipped) = sources_of(shared, ctl, peer, root, &list)?;
    // each file hashed once, before any byte moves: the client compares the sources' digests
    for s in &mut sources {
        let digest = s.digest(spec.block).map_err(|e| format!("{}: {e}", wire::printable(&s.info.path)))?;
        s.info.digest = Some(digest);
    }
    let infos: Vec<CopyFile> = sources.iter().map(|s| s.info.clone()).collect();
    tell_sources(ctl, &infos, skipped)?;
    let (to, token, base) = match ctl::read_msg_within::<ClientMsg>(ctl, idle) {
        Ok(ClientMsg::CopyTo { addr, token, base }) => match addr.parse::<SocketAddr>() {
            Ok(a) if base < wire::MAX_COPY_CONNECTIONS => (a, token, base),
            _ => return Err(send_error(ctl, ErrorCode::BadMessage, format!("copy-to {addr:?} base {base}"))),
        },
        Ok(ClientMsg::Abort { reason }) => return Err(Fail::Told(format!("client aborted: {reason}"))),
        Ok(other) => return Err(send_error(ctl, ErrorCode::BadMessage, format!("expected copy-to, got {other:?}"))),
        Err(e) => return Err(send_error(ctl, wire_code(&e), format!("waiting for copy-to: {e}"))),
    };
    shared.log.line(&format!("gridperf serve: {peer}: copy sends {} files to the agent at {to}", infos.len()));
    let (budget, plan) = pool_plan(spec);
    let dial = dp::Dial {
        window: spec.window,
        congestion: spec.congestion.clone(),
        pacing_bps: spec.pacing_bps,
        within,
        // from the address the client reached this agent at: the one the destination expects
        bind: Some(ctl.local_addr().map_err(|e| e.to_string())?.ip().to_canonical()),
        welcome: true,
    };
    let open = |k: u32| -> std::io::Result<dp::Link> {
        let sock = dp::dial(to, token, base + k, &dial).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(dp::Link { sock, idle, crypt: None, window: spec.window })
    };
    let ctl_shared = std::sync::Mutex::new(ctl.try_clone().map_err(|e| e.to_string())?);
    let talk = || ctl_shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let tell = |e: &gridperf_core::model::CopyEvent| {
        let _ = wire::write_msg(&mut *talk(), &AgentMsg::CopyEvent { event: e.clone() });
    };
    let queue = BlockQueue::fed();
    let moved: Vec<AtomicU64> = (0..budget).map(|_| AtomicU64::new(0)).collect();
    let ended = std::sync::atomic::AtomicBool::new(false);
    let pool = std::thread::scope(|scope| {
        // the leases: asked for while this end's queue runs low, with the
        // blocks acknowledged since the last, until the client says last
        scope.spawn(|| {
            let most = spec.auto.map_or(spec.streams, |(_, hi)| hi.max(spec.streams)) as usize;
            let (low, high) = (most, 3 * most);
            let mut last_said = Instant::now();
            while !ended.load(std::sync::atomic::Ordering::Relaxed) {
                let len = queue.len();
                let want = if len < low { (high - len) as u32 } else { 0 };
                if want == 0 && last_said.elapsed() < std::time::Duration::from_millis(500) {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    continue;
                }
                let done = CopyNeed::of_blocks(queue.take_acked());
                let mut c = talk();
                let asked = wire::write_msg(&mut *c, &AgentMsg::CopyLease { done, want });
                let answer = asked
                    .map_err(|e| e.to_string())
                    .and_then(|()| ctl::read_msg_within::<ClientMsg>(&c, idle).map_err(|e| e.to_string()));
                drop(c);
                last_said = Instant::now();
                match answer {
                    Ok(ClientMsg::CopyLeased { blocks, last }) => {
                        let fits = blocks.iter().all(|n| {
                            infos.get(n.file as usize).is_some_and(|f| {
                                let count = gridperf_core::copy::block_count(f.size, spec.block);
                                n.ranges.iter().all(|&(a, b)| a < b && b <= count)
                            })
                        });
                        if !fits {
                            queue.stop("the client leased blocks beyond its files".into());
                            return;
                        }
                        let none = blocks.is_empty();
                        queue.feed(&blocks);
                        if last {
                            queue.end_feed();
                            return;
                        }
                        if none && want > 0 {
                            // others hold what is left: ask again in a while
                            std::thread::sleep(std::time::Duration::from_millis(200));
                        }
                    }
                    Ok(ClientMsg::Abort { reason }) => {
                        queue.stop(format!("client aborted: {reason}"));
                        return;
                    }
                    Ok(other) => {
                        queue.stop(format!("expected copy-leased, got {other:?}"));
                        return;
                    }
                    Err(e) => {
                        queue.stop(format!("waiting for a lease: {e}"));
                        return;
                    }
                }
            }
        });
        let pool = dp::send_pool(&sources, spec.block, &queue, &plan, &open, &moved, &tell);
        ended.store(true, std::sync::atomic::Ordering::Relaxed);
        pool
    });
    shared.metrics.moved(moved.iter().map(|m| m.load(std::sync::atomic::Ordering::Relaxed)).sum(), 0);
    sent(ctl, idle, agent, &sources, &queue, pool)
}

/// The writing end's connections of a push: the first ones, then any the
/// client opens while the copy runs (a restart, `-P auto`), each with its
/// own number below `spec.connections`, taken as they come; until the
/// client says the copy is done. A connection that breaks or is reset is
/// not an error here (the client sends its blocks again on another: a file
/// is whole when every block is verified), but one that carried what was
/// not sent (altered on the way, or not a block) ends the copy at once,
/// every partial file kept.
#[allow(clippy::too_many_arguments)]
fn receive_all(
    shared: &Shared,
    ctl: &mut TcpStream,
    l: &std::net::TcpListener,
    senders: &[std::net::IpAddr],
    token: u64,
    spec: &CopySpec,
    socks: Vec<TcpStream>,
    files: &[Option<dp::SinkFile>],
    keys: Option<&seal::CopyKeys>,
) -> Result<(Vec<std::io::Result<StreamWork>>, Vec<u32>), Fail> {
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

/// A third-party copy's destination greets a source agent's data
/// connection with the token it carried: the source sends nothing until
/// it sees it (a client cannot aim a source agent's data at anything but
/// an agent expecting it).
fn welcome(mut s: &TcpStream, token: u64) -> std::io::Result<()> {
    use std::io::Write;
    s.write_all(&token.to_be_bytes())
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

/// A pull's sending connections, as the agent's pool asks for them: the
/// first ones taken already; another (a restart's, -P auto's) asked of the
/// client on the control connection and taken from the listener within
/// the control deadline (connections may come in any order).
struct PullConnections<'a> {
    l: &'a std::net::TcpListener,
    ctl: std::sync::Mutex<TcpStream>,
    peer: SocketAddr,
    token: u64,
    spec: &'a CopySpec,
    within: std::time::Duration,
    /// Connections taken, by index, not yet handed out; indexes seen.
    arrived: std::sync::Mutex<(std::collections::HashMap<u32, TcpStream>, Vec<u32>)>,
}

impl PullConnections<'_> {
    fn open(&self, k: u32) -> std::io::Result<TcpStream> {
        fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
            m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
        }
        if let Some(s) = lock(&self.arrived).0.remove(&k) {
            return Ok(s);
        }
        wire::write_msg(&mut *lock(&self.ctl), &AgentMsg::CopyConnect { index: k })
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let until = Instant::now() + self.within;
        let most = self.spec.connections.max(self.spec.streams);
        while Instant::now() < until {
            if let Some(s) = lock(&self.arrived).0.remove(&k) {
                return Ok(s);
            }
            let ready = gridperf_sys::poll_readable(&[self.l.as_raw_fd()], 50)?;
            if !ready[0] {
                continue;
            }
            let mut got = lock(&self.arrived);
            let seen = got.1.clone();
            let mut fits = |h: &DataHello| h.kind == DataKind::Copy && h.index < most && !seen.contains(&h.index);
            if let Some((h, s)) = data::accept_one(self.l, &[self.peer.ip().to_canonical()], self.token, &mut fits) {
                tune_socket(&s, self.spec);
                got.1.push(h.index);
                got.0.insert(h.index, s);
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the client did not open data connection {k} within {} s", self.within.as_secs()),
        ))
    }
}

/// The streams that ended well, for the client's verdict.
fn streams_of(works: &[std::io::Result<StreamWork>]) -> Vec<StreamWork> {
    works.iter().filter_map(|w| w.as_ref().ok().cloned()).collect()
}

/// Every file's end: renamed into place if whole (and its source unchanged), else kept partial.
fn finish_all(files: &[Option<dp::SinkFile>], changed: &[u32]) -> Vec<wire::CopyOutcome> {
    files
        .iter()
        .enumerate()
        .filter_map(|(k, f)| f.as_ref().map(|f| f.finish(k as u32, changed.contains(&(k as u32)))))
        .collect()
}

/// Waits for StreamGo.
fn go(ctl: &mut TcpStream, shared: &Shared) -> Result<(), Fail> {
    match ctl::read_msg_within::<ClientMsg>(ctl, shared.cfg.control_timeout) {
        Ok(ClientMsg::StreamGo) => Ok(()),
        Ok(ClientMsg::Abort { reason }) => Err(Fail::Told(format!("client aborted: {reason}"))),
        Ok(other) => Err(send_error(ctl, ErrorCode::BadMessage, format!("expected stream-go, got {other:?}"))),
        Err(e) => Err(send_error(ctl, wire_code(&e), format!("waiting for stream-go: {e}"))),
    }
}

/// Waits for Finish, answers with the agent's record.
fn finish(ctl: &mut TcpStream, idle: std::time::Duration, agent: gridperf_core::model::EndInfo) -> Result<(), Fail> {
    match ctl::read_msg_within::<ClientMsg>(ctl, idle) {
        Ok(ClientMsg::Finish) => wire::write_msg(ctl, &AgentMsg::Report { agent }).map_err(|e| e.to_string().into()),
        Ok(ClientMsg::Abort { reason }) => Err(Fail::Told(format!("client aborted: {reason}"))),
        Ok(other) => Err(send_error(ctl, ErrorCode::BadMessage, format!("expected finish, got {other:?}"))),
        Err(e) => Err(send_error(ctl, wire_code(&e), format!("waiting for finish: {e}"))),
    }
}

/// The client's file list: `count` entries in CopyFiles parts.
fn read_list(ctl: &mut TcpStream, count: u32, idle: std::time::Duration) -> Result<Vec<CopyFile>, Fail> {
    let mut list = Vec::new();
    while list.len() < count as usize {
        match ctl::read_msg_within::<ClientMsg>(ctl, idle) {
            Ok(ClientMsg::CopyFiles { files }) if !files.is_empty() && list.len() + files.len() <= count as usize => {
                list.extend(files)
            }
            Ok(ClientMsg::CopyFiles { files }) => {
                return Err(send_error(
                    ctl,
                    ErrorCode::BadMessage,
                    format!("a list of {} more files after {}: the request said {count}", files.len(), list.len()),
                ))
            }
            Ok(ClientMsg::Abort { reason }) => return Err(Fail::Told(format!("client aborted: {reason}"))),
            Ok(other) => {
                return Err(send_error(ctl, ErrorCode::BadMessage, format!("expected copy-files, got {other:?}")))
            }
            Err(e) => return Err(send_error(ctl, wire_code(&e), format!("waiting for the file list: {e}"))),
        }
    }
    for f in &list {
        if let Err(why) = gridperf_core::copy::check_relative(&f.path) {
            return Err(send_error(ctl, ErrorCode::Refused, format!("{why}: nothing was touched")));
        }
    }
    Ok(list)
}

/// The client's needs (a pull): CopyNeeds parts until the last, each of a file in the list.
fn read_needs(
    ctl: &mut TcpStream,
    files: &[CopyFile],
    block: u64,
    idle: std::time::Duration,
) -> Result<Vec<CopyNeed>, Fail> {
    let mut needs: Vec<CopyNeed> = Vec::new();
    loop {
        match ctl::read_msg_within::<ClientMsg>(ctl, idle) {
            Ok(ClientMsg::CopyNeeds { needs: part, last }) => {
                for n in part {
                    let blocks = files.get(n.file as usize).map(|f| gridperf_core::copy::block_count(f.size, block));
                    let fits = blocks.is_some_and(|b| n.ranges.iter().all(|&(s, e)| s < e && e <= b));
                    if !fits {
                        return Err(send_error(
                            ctl,
                            ErrorCode::BadMessage,
                            format!("a need of file {} beyond its blocks (or not in the list)", n.file),
                        ));
                    }
                    needs.push(n);
                }
                if last {
                    return Ok(needs);
                }
            }
            Ok(ClientMsg::Abort { reason }) => return Err(Fail::Told(format!("client aborted: {reason}"))),
            Ok(other) => {
                return Err(send_error(ctl, ErrorCode::BadMessage, format!("expected copy-needs, got {other:?}")))
            }
            Err(e) => return Err(send_error(ctl, wire_code(&e), format!("waiting for the needs: {e}"))),
        }
    }
}
