//! The client's [`Steps`] against the agent's [`Echo`], in virtual time:
//! every frame takes a one-way latency, and a step's exchanges a round trip
//! each. The agent's echo task is played as the agent runs it: a counted
//! step ends when its last exchange arrives; a step the client ends, when
//! its step-end arrives (the echo reads it between messages). A frame that
//! arrives while an end does not read its control channel waits there, in
//! order. No thread, no socket, no clock: the round trips the tests count
//! are the machines'.

use super::client::{StepTask, Steps};
use super::{Echo, Event, Task};
use crate::model::plan::Proto;
use crate::model::{EndInfo, StepFigures};
use crate::proto::{Action, End, Failure, Input, Nanos};
use crate::wire::{AgentMsg, ClientMsg, StepRequest};
use std::collections::VecDeque;

/// One step of a test, as the client plays it.
#[derive(Debug, Clone)]
pub struct Planned {
    pub proto: Proto,
    pub size: u64,
    /// The exchanges the client makes.
    pub exchanges: u64,
    /// Whether the agent counts them (and ends the step itself).
    pub counted_by_agent: bool,
}

/// How a run of the pair went.
#[derive(Debug, Default)]
pub struct Run {
    /// When the client had the last step's figures.
    pub at: Nanos,
    /// Each step's figures, as the client read them.
    pub figures: Vec<StepFigures>,
    /// Every frame, as (time sent, who sent it: 'c' or 'a', what).
    pub log: Vec<(Nanos, char, String)>,
    /// How it ended, if it failed.
    pub failed: Option<Failure>,
}

/// The agent's echo task, as it runs.
enum Echoing {
    Idle,
    /// Ends by itself at this time.
    Counted(Nanos, u64),
    /// Ends when step-end arrives.
    UntilEnd,
}

/// Runs `plan` with one-way `latency`, asking for each next step behind the
/// last one's step-end when `pipelined`.
pub fn run(plan: &[Planned], pipelined: bool, latency: Nanos) -> Run {
    const WITHIN: Nanos = 10_000_000_000;
    let mut client = Steps::new(WITHIN);
    let mut agent = Echo::new(vec![Proto::Tcp, Proto::Udp], 1 << 20, WITHIN, EndInfo::default(), 0);
    let mut out = Run::default();
    // frames on the wire: (arrival, to the agent?, frame)
    let mut to_agent: VecDeque<(Nanos, ClientMsg)> = VecDeque::new();
    let mut to_client: VecDeque<(Nanos, AgentMsg)> = VecDeque::new();
    let mut echoing = Echoing::Idle;
    let mut now: Nanos = 0;
    let req = |p: &Planned| StepRequest {
        proto: p.proto.name().into(),
        size: p.size,
        exchanges: p.counted_by_agent.then_some(p.exchanges),
    };
    let mut k = 0;
    let mut acts = client.step(req(&plan[0]), now);
    // the client's exchanges end at this time, once step-ready came
    let mut exchanges_end: Option<Nanos> = None;
    loop {
        for a in std::mem::take(&mut acts) {
            match a {
                Action::Send(m) => {
                    out.log.push((now, 'c', format!("{m:?}")));
                    to_agent.push_back((now + latency, m));
                }
                Action::Do(StepTask::Nudge) | Action::Done => {}
                Action::Fail(f) => {
                    out.failed = Some(f);
                    return out;
                }
            }
        }
        if let Some(f) = client.take_figures() {
            out.figures.push(f);
            out.at = now;
            k += 1;
            if k == plan.len() {
                return out;
            }
            if !client.wants_msg() {
                acts = client.step(req(&plan[k]), now);
                continue;
            }
        }
        if client.stepping() && exchanges_end.is_none() {
            exchanges_end = Some(now + plan[k].exchanges * 2 * latency);
        }
        // the next thing to happen (at one instant: in this order)
        let agent_reads = agent.wants_msg() || matches!(echoing, Echoing::UntilEnd);
        let echo_end = match echoing {
            Echoing::Counted(t, _) => Some(t),
            _ => None,
        };
        let candidates = [
            exchanges_end,
            echo_end,
            to_agent.front().map(|f| f.0).filter(|_| agent_reads),
            to_client.front().map(|f| f.0).filter(|_| client.wants_msg()),
        ];
        let Some((which, at)) =
            candidates.iter().enumerate().filter_map(|(i, t)| t.map(|t| (i, t))).min_by_key(|&(i, t)| (t, i))
        else {
            out.failed = Some(Failure::Net(format!("stuck at {now}: nobody waits for anything")));
            return out;
        };
        now = now.max(at);
        let agent_acts = match which {
            0 => {
                exchanges_end = None;
                let following = plan.get(k + 1).filter(|_| pipelined).map(req);
                acts = client.end(plan[k].counted_by_agent, following, now);
                continue;
            }
            1 => {
                let n = if let Echoing::Counted(_, n) = echoing { n } else { 0 };
                echoing = Echoing::Idle;
                agent.handle(Input::Event(Event::Stepped(StepFigures { echoed: n, ..StepFigures::default() })), now)
            }
            2 => {
                let (_, m) = to_agent.pop_front().expect("a frame");
                if matches!(echoing, Echoing::UntilEnd) {
                    // the echo task reads the control channel: step-end ends it
                    echoing = Echoing::Idle;
                    if m != ClientMsg::StepEnd {
                        out.failed = Some(Failure::Net(format!("the echo read {m:?} where step-end belongs")));
                        return out;
                    }
                    let echoed = plan[k].exchanges;
                    agent.handle(Input::Event(Event::Stepped(StepFigures { echoed, ..StepFigures::default() })), now)
                } else {
                    agent.handle(Input::Msg(m), now)
                }
            }
            _ => {
                let (_, m) = to_client.pop_front().expect("a frame");
                acts = client.handle(Input::Msg(m), now);
                continue;
            }
        };
        for a in agent_acts {
            match a {
                Action::Send(m) => {
                    out.log.push((now, 'a', format!("{m:?}")));
                    to_client.push_back((now + latency, m));
                }
                Action::Do(Task::Echo { exchanges, .. }) => {
                    echoing = match exchanges {
                        // its last exchange arrives 2n one-way trips after step-ready went
                        Some(n) => Echoing::Counted(now + 2 * n * latency, n),
                        None => Echoing::UntilEnd,
                    }
                }
                Action::Do(_) | Action::Done => {}
                Action::Fail(f) => {
                    out.failed = Some(f);
                    return out;
                }
            }
        }
    }
}
