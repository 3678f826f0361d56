//! Both ends of a copy's conversation against each other, in virtual time:
//! every frame takes a one-way latency, a TCP connection a round trip to
//! open, and the blocks their time on a link of a given rate. No thread, no
//! socket, no clock: what the tests count (round trips, flights, the order
//! of the frames) is the machines', exactly.
//!
//! Before the machines begin, the harness plays what the session does
//! without a key: the control connection opens (a round trip), the hello
//! goes with the request behind it, the welcome comes with ready behind it
//! (a round trip). The machines' own frames follow.

use super::{Event, Task};
use crate::model::{CopyStream, EndInfo};
use crate::proto::{Action, End, Failure, Input, Nanos};
use crate::wire::{AgentMsg, ClientMsg, CopyFile, CopyNeed, CopyOutcome};

/// Which end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Agent,
}

#[derive(Debug, Clone)]
enum Delivery {
    ToClient(Input<AgentMsg, Event>),
    ToAgent(Input<ClientMsg, Event>),
}

/// The files the harness's world holds: name and size; every block is
/// needed, every block verified.
#[derive(Debug, Clone)]
pub struct World {
    pub files: Vec<(String, u64)>,
    pub block: u64,
    /// The data path's rate, bits per second.
    pub rate_bps: u64,
}

impl World {
    fn infos(&self) -> Vec<CopyFile> {
        self.files
            .iter()
            .map(|(p, s)| CopyFile { path: p.clone(), size: *s, mtime_ns: 0, digest: None, origin: None })
            .collect()
    }

    fn needs(&self, list: &[CopyFile]) -> Vec<CopyNeed> {
        list.iter()
            .enumerate()
            .map(|(k, f)| CopyNeed {
                file: k as u32,
                ranges: vec![(0, crate::copy::block_count(f.size, self.block))],
                kept: 0,
                refused: None,
            })
            .collect()
    }

    fn bytes(&self, needs: &[CopyNeed]) -> u64 {
        let sizes: Vec<u64> = self.files.iter().map(|f| f.1).collect();
        needs
            .iter()
            .map(|n| {
                let size = sizes.get(n.file as usize).copied().unwrap_or(0);
                n.ranges
                    .iter()
                    .flat_map(|&(a, b)| a..b)
                    .map(|i| crate::copy::block_len(size, self.block, i))
                    .sum::<u64>()
            })
            .sum()
    }
}

/// How one end ended, if it did.
type Ending = Option<Result<(), Failure>>;

/// How a run of the pair ended.
#[derive(Debug)]
pub struct Ended {
    pub client: Ending,
    pub agent: Ending,
    /// When the client ended.
    pub at: Nanos,
    /// Groups of frames sent at one instant by one end, the session's included.
    pub flights: usize,
    /// Every frame, as (time, who sent it, what).
    pub log: Vec<(Nanos, Side, String)>,
}

impl Ended {
    /// The client's time, in round trips.
    pub fn round_trips(&self, latency: Nanos) -> f64 {
        self.at as f64 / (2 * latency) as f64
    }
}

/// The harness: two ends, a world, a latency.
pub struct Pair<C, A> {
    pub client: C,
    pub agent: A,
    pub world: World,
    pub latency: Nanos,
    now: Nanos,
    seq: u64,
    queue: Vec<(Nanos, u64, Delivery)>,
    flights: Vec<(Nanos, Side)>,
    log: Vec<(Nanos, Side, String)>,
    ended: (Ending, Ending),
    client_at: Nanos,
    /// When the data connections' hellos reach the agent.
    data_at_agent: Option<Nanos>,
    /// When each end began to receive blocks.
    receiving: [Option<Nanos>; 2],
    /// Blocks sent, waiting for their receiver: (who sent, when they arrive, the sender's event).
    in_flight: Vec<(Side, Nanos, Event)>,
    /// Stop the agent's sending with this reason (a failing pool).
    pub stop_sending: Option<String>,
    /// Drop every frame of this kind (by its debug words' start) the client sends.
    pub drop_client: Option<&'static str>,
    /// The sending agent's pool wants this data connection as it begins
    /// (a restart's, -P auto's), and tells what it did.
    pub pool_wants: Option<u32>,
    /// The connections the client was asked to open, and when.
    pub connects: Vec<(Nanos, u32)>,
}

impl<C, A> Pair<C, A>
where
    C: End<In = AgentMsg, Out = ClientMsg, Task = Task, Event = Event>,
    A: End<In = ClientMsg, Out = AgentMsg, Task = Task, Event = Event>,
{
    /// The session opened: `start` is the client's first actions, at the
    /// time the agent's ready arrives.
    pub fn run_with(
        client: C,
        agent: A,
        world: World,
        latency: Nanos,
        tweak: impl FnOnce(&mut Pair<C, A>),
        start: impl FnOnce(&mut C, Nanos) -> Vec<Action<ClientMsg, Task>>,
    ) -> (Pair<C, A>, Ended) {
        let mut p = Pair {
            client,
            agent,
            world,
            latency,
            now: 0,
            seq: 0,
            queue: Vec::new(),
            flights: Vec::new(),
            log: Vec::new(),
            ended: (None, None),
            client_at: 0,
            data_at_agent: None,
            receiving: [None, None],
            in_flight: Vec::new(),
            stop_sending: None,
            drop_client: None,
            pool_wants: None,
            connects: Vec::new(),
        };
        tweak(&mut p);
        // the control connection opens; hello and the request go together; welcome and ready come back
        p.flights.push((2 * latency, Side::Client));
        p.flights.push((3 * latency, Side::Agent));
        p.log.push((2 * latency, Side::Client, "Hello, Request".into()));
        p.log.push((3 * latency, Side::Agent, "Welcome, Ready".into()));
        p.now = 4 * latency;
        if let Some(d) = p.agent.deadline() {
            p.push(d, Delivery::ToAgent(Input::Deadline));
        }
        let first = start(&mut p.client, p.now);
        p.client_actions(first);
        p.go();
        let ended = Ended {
            client: p.ended.0.clone(),
            agent: p.ended.1.clone(),
            at: p.client_at,
            flights: p.flights.len(),
            log: p.log.clone(),
        };
        (p, ended)
    }

    fn push(&mut self, at: Nanos, d: Delivery) {
        self.seq += 1;
        self.queue.push((at, self.seq, d));
    }

    fn flight(&mut self, side: Side) {
        if !self.flights.contains(&(self.now, side)) {
            self.flights.push((self.now, side));
        }
    }

    fn go(&mut self) {
        let mut steps = 0;
        while let Some(i) = (0..self.queue.len()).min_by_key(|&i| (self.queue[i].0, self.queue[i].1)) {
            steps += 1;
            assert!(steps < 100_000, "the pair went on without end");
            let (at, _, d) = self.queue.swap_remove(i);
            self.now = at;
            match d {
                Delivery::ToClient(input) if self.ended.0.is_none() => {
                    if matches!(input, Input::Deadline) && self.client.deadline() != Some(at) {
                        continue;
                    }
                    let acts = self.client.handle(input, at);
                    self.client_actions(acts);
                }
                Delivery::ToAgent(input) if self.ended.1.is_none() => {
                    if matches!(input, Input::Deadline) && self.agent.deadline() != Some(at) {
                        continue;
                    }
                    let acts = self.agent.handle(input, at);
                    self.agent_actions(acts);
                }
                _ => {}
            }
        }
    }

    fn client_actions(&mut self, acts: Vec<Action<ClientMsg, Task>>) {
        for a in acts {
            match a {
                Action::Send(m) => {
                    let words = format!("{m:?}");
                    if self.drop_client.is_some_and(|d| words.starts_with(d)) {
                        continue;
                    }
                    self.flight(Side::Client);
                    self.log.push((self.now, Side::Client, words));
                    self.push(self.now + self.latency, Delivery::ToAgent(Input::Msg(m)));
                }
                Action::Do(t) => self.task(Side::Client, t),
                Action::Done => self.end(Side::Client, Ok(())),
                Action::Fail(f) => self.end(Side::Client, Err(f)),
            }
        }
        if let Some(d) = self.client.deadline() {
            self.push(d, Delivery::ToClient(Input::Deadline));
        }
    }

    fn agent_actions(&mut self, acts: Vec<Action<AgentMsg, Task>>) {
        for a in acts {
            match a {
                Action::Send(m) => {
                    self.flight(Side::Agent);
                    self.log.push((self.now, Side::Agent, format!("{m:?}")));
                    self.push(self.now + self.latency, Delivery::ToClient(Input::Msg(m)));
                }
                Action::Do(t) => self.task(Side::Agent, t),
                Action::Done => self.end(Side::Agent, Ok(())),
                Action::Fail(f) => self.end(Side::Agent, Err(f)),
            }
        }
        if let Some(d) = self.agent.deadline() {
            self.push(d, Delivery::ToAgent(Input::Deadline));
        }
    }

    fn end(&mut self, side: Side, r: Result<(), Failure>) {
        match side {
            Side::Client => {
                self.client_at = self.now;
                self.ended.0 = Some(r);
            }
            Side::Agent => self.ended.1 = Some(r),
        }
    }

    fn event(&mut self, side: Side, at: Nanos, e: Event) {
        let d = match side {
            Side::Client => Delivery::ToClient(Input::Event(e)),
            Side::Agent => Delivery::ToAgent(Input::Event(e)),
        };
        self.push(at, d);
    }

    /// The world's answer to a task: when it ends, and what comes of it.
    fn task(&mut self, side: Side, t: Task) {
        let (l, now) = (self.latency, self.now);
        match t {
            // SYN, SYN-ACK: open here after a round trip; the hello reaches the agent half a round trip later
            Task::OpenData { .. } => {
                self.data_at_agent = Some(now + 3 * l);
                self.event(side, now + 2 * l, Event::DataOpened);
            }
            Task::TakeData => {
                let at = self.data_at_agent.unwrap_or(Nanos::MAX / 2).max(now);
                self.event(side, at, Event::DataTaken);
            }
            Task::Prepare { list } => {
                let needs = self.world.needs(&list);
                self.event(side, now, Event::Prepared { needs });
            }
            Task::Expand { .. } => {
                let files = self.world.infos();
                self.event(side, now, Event::Expanded { files, skipped: Vec::new() });
            }
            Task::SendBlocks { needs } => {
                if let Some(why) = self.stop_sending.clone() {
                    self.event(side, now + 2 * l, Event::Stopped { why });
                    return;
                }
                let bytes = self.world.bytes(&needs);
                let xfer = (bytes as u128 * 8 * 1_000_000_000 / self.world.rate_bps.max(1) as u128) as Nanos;
                let sent = Event::Sent { changed: Vec::new(), streams: Vec::new(), events: Vec::new(), tail_blocks: 0 };
                self.in_flight.push((side, now + l + xfer, sent));
                self.deliver_blocks();
                if let (Side::Agent, Some(index)) = (side, self.pool_wants) {
                    let event = crate::model::CopyEvent {
                        t_s: 0.001,
                        kind: "restart".into(),
                        stream: Some(0),
                        new_stream: Some(index),
                        why: "slow".into(),
                    };
                    self.event(side, now + 1_000_000, Event::ConnectWanted { index });
                    self.event(side, now + 1_000_000, Event::Noted { event });
                }
            }
            Task::Receive => {
                self.receiving[(side == Side::Client) as usize] = Some(now);
                self.deliver_blocks();
            }
            Task::Finish { changed } if side == Side::Agent => {
                let outcomes = self
                    .world
                    .files
                    .iter()
                    .enumerate()
                    .map(|(k, (_, size))| CopyOutcome {
                        file: k as u32,
                        blake3: (!changed.contains(&(k as u32))).then(|| "ab".repeat(32)),
                        moved: *size,
                        resent: 0,
                        kept: 0,
                        error: None,
                        checksum: None,
                    })
                    .collect();
                self.event(side, now, Event::Finished { outcomes, streams: Vec::<CopyStream>::new() });
            }
            Task::Connect { index } => self.connects.push((now, index)),
            Task::Finish { .. } | Task::Note { .. } => {}
            // a copy between agents' tasks: played by `source/tests.rs`
            t @ (Task::SendTo { .. } | Task::TakeAcked | Task::Feed { .. } | Task::Lease { .. }) => {
                panic!("no push or pull asks for {t:?}")
            }
        }
    }

    /// Blocks whose receiver reads: acknowledged half a round trip after it reads the last.
    fn deliver_blocks(&mut self) {
        let l = self.latency;
        let mut keep = Vec::new();
        for (from, arrive, e) in std::mem::take(&mut self.in_flight) {
            let receiver = (from == Side::Agent) as usize;
            match self.receiving[receiver] {
                Some(r) => self.event(from, arrive.max(r) + l, e),
                None => keep.push((from, arrive, e)),
            }
        }
        self.in_flight = keep;
    }
}

/// The agent's record, for the report.
pub fn agent_info() -> EndInfo {
    EndInfo::default()
}
