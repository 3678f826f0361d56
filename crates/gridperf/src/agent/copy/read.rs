//! The reading end of a pull: what the client named expanded and listed,
//! its needs taken, the blocks sent over this end's pool of connections
//! (restarts, the tail, -P auto), each further connection asked of the
//! client.

use super::{go, pool_plan, sent, sources_of, take_first, tell_sources, tune_socket, Opened};
use crate::agent::data;
use crate::agent::reply::{send_error, wire_code, Fail};
use crate::agent::Shared;
use crate::ctl;
use crate::datapath::copy::{self as dp, BlockQueue, Crypt};
use gridperf_core::wire::{self, AgentMsg, ClientMsg, CopyFile, CopyNeed, CopySpec, DataHello, DataKind, ErrorCode};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// The reading end: expand what was named, send the list, take the needs, send the blocks.
pub(super) fn run(
    shared: &Shared,
    ctl: &mut TcpStream,
    peer: SocketAddr,
    spec: &CopySpec,
    root: &OwnedFd,
    list: &[CopyFile],
    o: Opened,
) -> Result<(), Fail> {
    let idle = shared.cfg.max_idle;
    let (sources, skipped) = sources_of(shared, ctl, peer, root, list)?;
    let infos: Vec<CopyFile> = sources.iter().map(|s| s.info.clone()).collect();
    tell_sources(ctl, &infos, skipped)?;
    let needs = read_needs(ctl, &infos, spec.block, idle)?;
    let socks = take_first(shared, ctl, spec, &o)?;
    go(ctl, shared)?;
    let queue = BlockQueue::new(&needs);
    let first: Vec<u32> = (0..socks.len() as u32).collect();
    let conns = PullConnections {
        l: &o.listener,
        ctl: std::sync::Mutex::new(ctl.try_clone().map_err(|e| e.to_string())?),
        peer,
        token: o.token,
        spec,
        within: shared.cfg.control_timeout,
        arrived: std::sync::Mutex::new((socks.into_iter().enumerate().map(|(k, s)| (k as u32, s)).collect(), first)),
    };
    let (budget, plan) = pool_plan(spec);
    let moved: Vec<AtomicU64> = (0..budget).map(|_| AtomicU64::new(0)).collect();
    let keys = o.keys.as_ref();
    let open = |k: u32| -> std::io::Result<dp::Link> {
        let sock = conns.open(k)?;
        Ok(dp::Link { sock, idle, crypt: Crypt::of(keys, k, true), window: spec.window })
    };
    let tell = |e: &gridperf_core::model::CopyEvent| {
        let mut c = conns.ctl.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = wire::write_msg(&mut *c, &AgentMsg::CopyEvent { event: e.clone() });
    };
    let pool = dp::send_pool(&sources, spec.block, &queue, &plan, &open, &moved, &tell);
    shared.metrics.moved(moved.iter().map(|m| m.load(std::sync::atomic::Ordering::Relaxed)).sum(), 0);
    sent(ctl, idle, o.agent, &sources, &queue, pool)
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
