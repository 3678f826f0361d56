//! The reading end of a pull: what the client named expanded and listed,
//! its needs taken, the blocks sent over this end's pool of connections
//! (restarts, the tail, -P auto), each further connection asked of the
//! client.

use super::{run_pool, sources_of, take_first, tune_socket, Opened, Want};
use crate::agent::converse::{converse, Clock, Tasks};
use crate::agent::data;
use crate::agent::reply::Fail;
use crate::agent::Shared;
use crate::datapath::copy::{self as dp, BlockQueue, Crypt};
use gridperf_core::proto::copy::{self as proto, Event, Task};
use gridperf_core::proto::{Action, End, Input};
use gridperf_core::wire::{self, CopyFile, CopyNeed, CopySpec, DataHello, DataKind};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Instant;

/// What the machine asks for.
type Acts = crate::agent::converse::Acts<Task>;

/// The reading end: what is said when is [`proto::Read`]'s; this end
/// expands what was named, takes the connections and sends the blocks.
pub(super) fn run(
    shared: &Shared,
    ctl: &mut TcpStream,
    peer: SocketAddr,
    spec: &CopySpec,
    root: &OwnedFd,
    o: Opened,
    waits: proto::Waits,
) -> Result<(), Fail> {
    let clock = Clock::start();
    let mut m = proto::Read::new(spec.files, spec.block, o.agent.clone(), waits, clock.now());
    let mut work = Work { shared, peer, spec, root, o: &o, sources: Vec::new(), socks: Vec::new() };
    converse(ctl, &mut m, Vec::new(), &clock, shared.cfg.max_idle, &mut work)
}

/// A pull's tasks at the sending end.
struct Work<'a> {
    shared: &'a Shared,
    peer: SocketAddr,
    spec: &'a CopySpec,
    root: &'a OwnedFd,
    o: &'a Opened,
    sources: Vec<dp::SourceFile>,
    socks: Vec<TcpStream>,
}

impl Tasks<proto::Read> for Work<'_> {
    fn run(&mut self, t: Task, m: &mut proto::Read, ctl: &mut TcpStream, clock: &Clock) -> Result<Acts, Fail> {
        let event = match t {
            Task::Expand { names } => {
                let (sources, skipped) = sources_of(self.shared, ctl, self.peer, self.root, &names)?;
                let files: Vec<CopyFile> = sources.iter().map(|s| s.info.clone()).collect();
                self.sources = sources;
                Event::Expanded { files, skipped }
            }
            Task::TakeData => {
                self.socks = take_first(self.shared, ctl, self.spec, self.o)?;
                Event::DataTaken
            }
            Task::SendBlocks { needs } => self.send(ctl, &needs, m, clock)?,
            other => return Err(Fail::Untold(format!("internal: a pull's sending end has no task {other:?}"))),
        };
        Ok(m.handle(Input::Event(event), clock.now()))
    }
}

impl Work<'_> {
    /// The blocks `needs` asks for over this end's pool (restarts, the tail,
    /// -P auto), each further connection asked of the client through the
    /// machine: every block acknowledged, or why the sending stopped.
    fn send(
        &mut self,
        ctl: &mut TcpStream,
        needs: &[CopyNeed],
        m: &mut proto::Read,
        clock: &Clock,
    ) -> Result<Event, Fail> {
        let (shared, spec, o) = (self.shared, self.spec, self.o);
        let idle = shared.cfg.max_idle;
        let socks = std::mem::take(&mut self.socks);
        let queue = BlockQueue::new(needs);
        let first: Vec<u32> = (0..socks.len() as u32).collect();
        let (tx, rx) = std::sync::mpsc::channel::<Want>();
        let conns = PullConnections {
            l: &o.listener,
            ask: tx.clone(),
            peer: self.peer,
            token: o.token,
            spec,
            within: shared.cfg.control_timeout,
            arrived: std::sync::Mutex::new((
                socks.into_iter().enumerate().map(|(k, s)| (k as u32, s)).collect(),
                first,
            )),
        };
        let keys = o.keys.as_ref();
        let open = |k: u32| -> std::io::Result<dp::Link> {
            let sock = conns.open(k)?;
            Ok(dp::Link { sock, idle, crypt: Crypt::of(keys, k, true), window: spec.window })
        };
        run_pool(shared, spec, &self.sources, &queue, &open, (tx, rx), |rx, finished| {
            // what the pool wants said goes through the machine, in order, until it ends
            let mut written: Result<(), Fail> = Ok(());
            loop {
                let event = match rx.recv_timeout(std::time::Duration::from_secs(1)) {
                    Ok(Want::Connect(index)) => Event::ConnectWanted { index },
                    Ok(Want::Note(event)) => Event::Noted { event },
                    Ok(Want::Done) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) if finished() => break,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                };
                for a in m.handle(Input::Event(event), clock.now()) {
                    match a {
                        // a control connection that fails leaves the pool to its own deadlines
                        Action::Send(msg) if written.is_ok() => {
                            written = wire::write_msg(ctl, &msg).map_err(|e| Fail::from(e.to_string()))
                        }
                        Action::Send(_) => {}
                        other => written = Err(Fail::Untold(format!("internal: while sending, {other:?}"))),
                    }
                }
            }
            written
        })
    }
}

/// A pull's sending connections, as the agent's pool asks for them: the
/// first ones taken already; another (a restart's, -P auto's) asked of the
/// client on the control connection and taken from the listener within
/// the control deadline (connections may come in any order).
struct PullConnections<'a> {
    l: &'a std::net::TcpListener,
    /// The pool's wants, for this end's thread to say (through the machine).
    ask: std::sync::mpsc::Sender<Want>,
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
        self.ask.send(Want::Connect(k)).map_err(|_| std::io::Error::other("the copy's control connection is gone"))?;
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
