//! The sending end's pool of connections: restarts, -P auto, the tail.

use super::*;
use gridperf_core::copy::pool::ConnWindow;
use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the pool of sending connections may do over a copy.
#[derive(Debug, Clone)]
pub struct PoolPlan {
    /// Connections at first.
    pub start: u32,
    /// `-P auto`: the fewest and the most at once; None keeps `start`.
    pub auto: Option<(u32, u32)>,
    /// Restart a slow connection (gridperf_core::copy::pool's rules).
    pub restart: bool,
    /// Send the last blocks again on idle connections.
    pub tail: bool,
    /// The most connections over the copy (their numbers stay below it).
    pub connections: u32,
    /// Said with the first restart: why a new connection may start no
    /// faster (this host's TCP metrics cache), if it would.
    pub restart_caveat: Option<String>,
}

/// What the pool did: each connection's result (by number), and its events.
pub struct PoolOut {
    pub works: Vec<io::Result<StreamWork>>,
    pub events: Vec<gridperf_core::model::CopyEvent>,
}

/// How often the pool looks at its connections.
const POOL_TICK: Duration = Duration::from_millis(100);
/// The judging window: this many smoothed round trips, at least MIN_WINDOW.
const WINDOW_RTTS: u32 = 8;
const MIN_WINDOW: Duration = Duration::from_secs(1);
/// A block is sent again at the tail once it has waited this many of its
/// sender's round trips (at least TAIL_MIN) for its acknowledgment.
const TAIL_MIN: Duration = Duration::from_millis(200);

/// One live connection of the pool.
struct Live<'s> {
    id: u32,
    slot: u32,
    ctl: Arc<ConnCtl>,
    started: Instant,
    replaces: Option<(u32, f64)>,
    /// A clone of its socket once connected: its TCP_INFO, and a shutdown to wake it.
    sock: Arc<Mutex<Option<TcpStream>>>,
    handle: std::thread::ScopedJoinHandle<'s, io::Result<StreamWork>>,
    /// Set as its thread returns (or unwinds), just before it wakes the pool.
    ended: Arc<AtomicBool>,
    /// (when, bytes acknowledged, TCP_INFO) over the last window.
    hist: VecDeque<(Instant, u64, Option<gridperf_core::analysis::flow::TcpSample>)>,
}

/// Held by a worker thread; dropped as it returns or unwinds: marks it
/// ended, then wakes the thread that waits for it, which sees the flag at
/// once (woken before the worker had returned, `is_finished` still said no
/// and the waiter slept its whole tick). The copy's pool of connections and
/// its progress loop both wait this way.
pub struct Ended {
    pub flag: Arc<AtomicBool>,
    pub waiter: std::thread::Thread,
}

impl Ended {
    /// A guard that wakes the current thread; and the flag it sets.
    pub fn wakes_me() -> (Ended, Arc<AtomicBool>) {
        let flag = Arc::new(AtomicBool::new(false));
        (Ended { flag: flag.clone(), waiter: std::thread::current() }, flag)
    }
}

impl Drop for Ended {
    fn drop(&mut self) {
        self.flag.store(true, Ordering::SeqCst);
        self.waiter.unpark();
    }
}

/// Runs a copy's sending connections from one queue: `plan.start` of
/// them, opened by `open(number)`, then (as the plan allows) restarts of
/// slow ones, more or fewer with `-P auto`, and the tail. `moved[number]`
/// counts each one's acknowledged bytes. `event` hears each event as it
/// happens. Returns when every block is acknowledged, or the copy stopped,
/// or every connection failed (then the queue is stopped with why).
// Long by design: the pool's loop holds the thread scope its connections
// are spawned in (a restart and -P auto spawn from inside it); what it
// judges is in `Live::window`, `pool_window` and gridperf_core::copy::pool.
pub fn send_pool(
    files: &[SourceFile],
    block: u64,
    queue: &BlockQueue,
    plan: &PoolPlan,
    open: &(dyn Fn(u32) -> io::Result<Link> + Sync),
    moved: &[AtomicU64],
    event: &(dyn Fn(&gridperf_core::model::CopyEvent) + Sync),
) -> PoolOut {
    use gridperf_core::copy::pool::{AutoStreams, Change, Decision, Restarts};
    use gridperf_core::model::CopyEvent;
    let t0 = Instant::now();
    let budget = plan.connections.min(moved.len() as u32);
    let mut works: Vec<Option<io::Result<StreamWork>>> = Vec::new();
    let mut events: Vec<CopyEvent> = Vec::new();
    let note = |events: &mut Vec<CopyEvent>, kind: &str, stream: Option<u32>, new_stream: Option<u32>, why: String| {
        let e = CopyEvent { t_s: t0.elapsed().as_secs_f64(), kind: kind.into(), stream, new_stream, why };
        event(&e);
        events.push(e);
    };
    std::thread::scope(|scope| {
        let mut next_id = 0u32;
        let mut next_slot = 0u32;
        let spawn = |id: u32, slot: u32, replaces: Option<(u32, f64)>, tail: Option<Duration>| -> Live<'_> {
            let ctl = Arc::new(ConnCtl::default());
            ctl.tail_ns.store(tail.map_or(0, |t| t.as_nanos() as u64), Ordering::Relaxed);
            let sock: Arc<Mutex<Option<TcpStream>>> = Arc::default();
            let (c, s) = (ctl.clone(), sock.clone());
            let (wake, ended) = Ended::wakes_me();
            let handle = scope.spawn(move || {
                let _wake = wake;
                let link = open(id)?;
                *lock(&s) = Some(link.sock.try_clone()?);
                let mut w = send_stream(id, files, block, queue, link, &moved[id as usize], &c)?;
                w.slot = slot;
                Ok(w)
            });
            Live { id, slot, ctl, started: Instant::now(), replaces, sock, handle, ended, hist: VecDeque::new() }
        };
        let mut tail = plan.tail.then_some(TAIL_MIN);
        let mut live: Vec<Live> = Vec::new();
        while next_id < plan.start.min(budget) {
            live.push(spawn(next_id, next_slot, None, tail));
            next_id += 1;
            next_slot += 1;
        }
        let mut restarts = Restarts::default();
        let mut auto = plan.auto.map(|(lo, hi)| AutoStreams::new(lo, hi));
        let mut last_error: Option<String> = None;
        let mut done_at: Option<Instant> = None;
        loop {
            // a tick, or sooner when a connection ends (the last one's end
            // is the copy's: waiting out the tick was up to 100 ms of it)
            std::thread::park_timeout(POOL_TICK);
            // the connections that ended
            for (id, r) in reap(&mut live) {
                if let Err(e) = &r {
                    if !queue.done() {
                        let why = format!("{e} (its unacknowledged blocks went back to the queue)");
                        last_error = Some(e.to_string());
                        note(&mut events, "broken", Some(id), None, why);
                    }
                }
                if works.len() <= id as usize {
                    works.resize_with(id as usize + 1, || None);
                }
                works[id as usize] = Some(r);
            }
            if queue.done() {
                if live.is_empty() {
                    break;
                }
                // every block is acknowledged: a connection still running
                // after a grace tick is only sending what another delivered
                // (a slow one, stuck in a write): reset it
                let since = *done_at.get_or_insert_with(Instant::now);
                if since.elapsed() >= 2 * POOL_TICK {
                    for l in &live {
                        if !l.ctl.cancel.load(Ordering::SeqCst) {
                            l.close("closed at the end: its last blocks arrived first on another connection".into());
                        }
                    }
                }
                continue;
            }
            if live.is_empty() {
                let why = last_error.take().unwrap_or_else(|| "no connection left".into());
                queue.stop(format!("every data connection failed; the last: {why}"));
                continue;
            }
            // each connection over the last window
            let now = Instant::now();
            let srtts: Vec<f64> = live
                .iter()
                .filter_map(|l| l.hist.back().and_then(|h| h.2.as_ref()).map(|t| f64::from(t.srtt_us)))
                .collect();
            let srtt_us = gridperf_core::analysis::stats::median(&srtts).unwrap_or(0.0);
            let window = MIN_WINDOW.max(Duration::from_micros((srtt_us * f64::from(WINDOW_RTTS)) as u64));
            if plan.tail {
                let t = TAIL_MIN.max(Duration::from_micros((srtt_us * 4.0) as u64));
                tail = Some(t);
                for l in &live {
                    l.ctl.tail_ns.store(t.as_nanos() as u64, Ordering::Relaxed);
                }
            }
            for l in live.iter_mut() {
                let tcp = lock(&l.sock)
                    .as_ref()
                    .and_then(|s| gridperf_sys::tcp_info(s).ok())
                    .map(|(info, _)| crate::datapath::stream::sample(&info, l.started.elapsed().as_nanos() as u64));
                l.hist.push_back((now, moved[l.id as usize].load(Ordering::Relaxed), tcp));
                while l.hist.len() > 2 && now.duration_since(l.hist[1].0) >= window {
                    l.hist.pop_front();
                }
            }
            let views: Vec<ConnWindow> = live.iter().filter_map(Live::window).collect();
            if plan.tail {
                queue.set_slow(gridperf_core::copy::pool::tail_holders(&views));
            }
            let now_ns = t0.elapsed().as_nanos() as u64;
            let window_ns = window.as_nanos() as u64;
            let pending = !queue.is_empty();
            if plan.restart {
                match restarts.decide(now_ns, window_ns, &views, pending) {
                    Some(Decision::Restart { id, why }) if next_id < budget => {
                        if let Some(pos) = live.iter().position(|l| l.id == id) {
                            let slot = live[pos].slot;
                            let rate = views.iter().find(|v| v.id == id).map_or(0.0, |v| v.rate_bps);
                            live[pos].close(format!("restarted: {why}"));
                            live.push(spawn(next_id, slot, Some((id, rate)), tail));
                            let why = match &plan.restart_caveat {
                                Some(c) if restarts.count() == 1 => format!("{why}; {c}"),
                                _ => why,
                            };
                            note(&mut events, "restart", Some(id), Some(next_id), why);
                            next_id += 1;
                        }
                    }
                    Some(Decision::Restart { id, why }) => {
                        note(&mut events, "give-up", Some(id), None, format!("no connection left to open: {why}"))
                    }
                    Some(Decision::GiveUp { id, why }) => note(&mut events, "give-up", Some(id), None, why),
                    Some(Decision::Stop { why }) => note(&mut events, "stop-restarts", None, None, why),
                    None => {}
                }
            }
            if let Some(a) = auto.as_mut() {
                match a.decide(&pool_window(&live, &views, now_ns, window_ns, pending)) {
                    Some(Change::Add { n, why }) => {
                        let mut opened = Vec::new();
                        for _ in 0..n {
                            if next_id >= budget {
                                break;
                            }
                            live.push(spawn(next_id, next_slot, None, tail));
                            opened.push(next_id.to_string());
                            next_id += 1;
                            next_slot += 1;
                        }
                        if !opened.is_empty() {
                            note(&mut events, "add", None, None, format!("{why}: opened {}", opened.join(", ")));
                        }
                    }
                    Some(Change::Remove { n, why }) => {
                        // the newest first: the oldest have ramped up furthest
                        let mut open: Vec<&Live> =
                            live.iter().filter(|l| !l.ctl.cancel.load(Ordering::SeqCst)).collect();
                        open.sort_by_key(|l| std::cmp::Reverse(l.started));
                        for l in open.into_iter().take(n as usize) {
                            l.close(format!("removed by -P auto: {why}"));
                            note(&mut events, "remove", Some(l.id), None, why.clone());
                        }
                    }
                    None => {}
                }
            }
        }
    });
    let works = works.into_iter().flatten().collect();
    PoolOut { works, events }
}

/// The connections that ended, out of `live`: each one's number and result.
fn reap(live: &mut Vec<Live<'_>>) -> Vec<(u32, io::Result<StreamWork>)> {
    let mut out = Vec::new();
    let mut k = 0;
    while k < live.len() {
        if !live[k].ended.load(Ordering::SeqCst) && !live[k].handle.is_finished() {
            k += 1;
            continue;
        }
        let l = live.swap_remove(k);
        let r = l.handle.join().unwrap_or_else(|_| Err(io::Error::other("a stream panicked")));
        out.push((
            l.id,
            r.map(|mut w| {
                w.slot = l.slot;
                w
            }),
        ));
    }
    out
}

/// The pool over the last window, for -P auto: its connections still
/// running, the youngest one's age, their rate, retransmissions, and how
/// much of the time they were bound by a window or a send buffer.
fn pool_window(
    live: &[Live<'_>],
    views: &[ConnWindow],
    now_ns: u64,
    window_ns: u64,
    pending: bool,
) -> gridperf_core::copy::pool::PoolWindow {
    let youngest = live.iter().map(|l| l.started.elapsed()).min().unwrap_or_default();
    let buffer_limited =
        if views.is_empty() { 0.0 } else { views.iter().map(|v| v.buffer_limited).sum::<f64>() / views.len() as f64 };
    gridperf_core::copy::pool::PoolWindow {
        now_ns,
        window_ns,
        live: live.iter().filter(|l| !l.ctl.cancel.load(Ordering::SeqCst)).count() as u32,
        youngest_ns: youngest.as_nanos() as u64,
        rate_bps: views.iter().map(|v| v.rate_bps).sum(),
        retrans: views.iter().map(|v| v.retrans).sum(),
        buffer_limited,
        pending,
    }
}

impl Live<'_> {
    /// Closes this connection for `why`, waking it from a blocked write.
    fn close(&self, why: String) {
        self.ctl.close(why);
        if let Some(s) = lock(&self.sock).as_ref() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// This connection over the last window: its rate (TCP's own count of
    /// bytes acknowledged: blocks are acknowledged whole, a few a window on
    /// a slow connection), retransmissions, and how much of the time it
    /// was bound by a window or a send buffer. None before two samples.
    fn window(&self) -> Option<ConnWindow> {
        let (a, b) = (self.hist.front()?, self.hist.back()?);
        let dt = b.0.duration_since(a.0).as_secs_f64();
        if dt <= 0.0 {
            return None;
        }
        let (ta, tb) = (a.2.as_ref(), b.2.as_ref());
        let retrans = match (ta, tb) {
            (Some(x), Some(y)) => y.total_retrans.saturating_sub(x.total_retrans),
            _ => 0,
        };
        let clock = match (ta, tb) {
            (Some(x), Some(y)) if y.busy_us > x.busy_us => {
                let lim =
                    (y.rwnd_limited_us + y.sndbuf_limited_us).saturating_sub(x.rwnd_limited_us + x.sndbuf_limited_us);
                lim as f64 / (y.busy_us - x.busy_us) as f64
            }
            _ => 0.0,
        };
        // the kernel's clocks run only when a send finds the window shut (a
        // paced sender rarely does): the samples show the data in flight
        // reaching the receiver's window, as stream's verdict reads them
        let tcp: Vec<&gridperf_core::analysis::flow::TcpSample> =
            self.hist.iter().skip(1).filter_map(|h| h.2.as_ref()).collect();
        let at_window = tcp
            .iter()
            .filter(|t| t.snd_wnd > 0 && u64::from(t.unacked) * u64::from(t.mss) * 100 >= u64::from(t.snd_wnd) * 85)
            .count();
        let sampled = if tcp.is_empty() { 0.0 } else { at_window as f64 / tcp.len() as f64 };
        let bytes = match (ta, tb) {
            (Some(x), Some(y)) => y.bytes_acked.saturating_sub(x.bytes_acked),
            _ => b.1.saturating_sub(a.1),
        };
        Some(ConnWindow {
            id: self.id,
            slot: self.slot,
            age_ns: self.started.elapsed().as_nanos() as u64,
            rate_bps: bytes as f64 * 8.0 / dt,
            retrans,
            buffer_limited: clock.max(sampled).min(1.0),
            replaces: self.replaces,
        })
    }
}
