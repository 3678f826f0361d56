//! A copy between agents, this agent a source: the files named, each
//! with its BLAKE3 (for the client to check that every source holds the
//! same), then, once the client names the destination agent, the blocks it
//! leases, sent straight to that agent over this end's pool of connections
//! (restarts, the tail and -P auto as in a pull). The client hears of each
//! lease's acknowledged blocks, the pool's events and the end.

use super::{pool_plan, read_list, sent, sources_of, tell_sources};
use crate::agent::data;
use crate::agent::reply::{new_token, send_error, wire_code, Fail};
use crate::agent::Shared;
use crate::datapath::copy::{self as dp, BlockQueue};
use crate::{ctl, host};
use gridperf_core::wire::{self, AgentMsg, ClientMsg, CopyFile, CopyNeed, CopySpec, ErrorCode};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// A third-party copy's source: the files named, each with its BLAKE3
/// (for the client to check that every source holds the same),
/// then, once the client names the destination agent, the blocks it
/// leases, sent straight to that agent over this end's pool of
/// connections (restarts, the tail and -P auto as in a pull). The client
/// hears of each lease's acknowledged blocks, the pool's events and the end.
pub(super) fn run(
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
        scope.spawn(|| lease(spec, &infos, &queue, &ended, idle, &talk));
        let pool = dp::send_pool(&sources, spec.block, &queue, &plan, &open, &moved, &tell);
        ended.store(true, std::sync::atomic::Ordering::Relaxed);
        pool
    });
    shared.metrics.moved(moved.iter().map(|m| m.load(std::sync::atomic::Ordering::Relaxed)).sum(), 0);
    sent(ctl, idle, agent, &sources, &queue, pool)
}

/// The leases: asked for while this end's queue runs low, with the blocks
/// acknowledged since the last, until the client says last (or the queue
/// is stopped, with why).
fn lease<'a>(
    spec: &CopySpec,
    infos: &[CopyFile],
    queue: &BlockQueue,
    ended: &std::sync::atomic::AtomicBool,
    idle: std::time::Duration,
    talk: &dyn Fn() -> std::sync::MutexGuard<'a, TcpStream>,
) {
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
}
