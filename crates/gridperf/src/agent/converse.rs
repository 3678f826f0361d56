//! The agent's driver of a conversation after ready
//! ([`gridperf_core::proto::copy`], [`gridperf_core::proto::measure`]): it
//! sends the machine's frames, runs its tasks and hands it the client's
//! frames, or its deadline when nothing came by then. What to say when,
//! and every refusal's words, are the machine's.

use crate::agent::reply::{send_error, wire_code, Fail};
use crate::ctl;
pub(crate) use gridperf_core::proto::Clock;
use gridperf_core::proto::{Action, End, Input};
use gridperf_core::wire::{self, AgentMsg, ClientMsg, WireError};
use std::collections::VecDeque;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// What the agent's machine asks for.
pub(crate) type Acts<T> = Vec<Action<AgentMsg, T>>;

/// A machine's tasks, as one kind of test runs them at the agent.
pub(crate) trait Tasks<M: End> {
    /// Runs a task; the machine's answer to what came of it.
    fn run(&mut self, t: M::Task, m: &mut M, ctl: &mut TcpStream, clock: &Clock) -> Result<Acts<M::Task>, Fail>;
    /// Whether the agent is shutting down: looked at before each wait for the client.
    fn stopping(&self) -> bool {
        false
    }
}

/// Drives `m` to its end. A failure the machine decided was told to the
/// client by the machine; a task's failure is the task's to tell.
pub(crate) fn converse<M>(
    ctl: &mut TcpStream,
    m: &mut M,
    first: Acts<M::Task>,
    clock: &Clock,
    longest: Duration,
    tasks: &mut dyn Tasks<M>,
) -> Result<(), Fail>
where
    M: End<In = ClientMsg, Out = AgentMsg>,
{
    let mut queue: VecDeque<Action<AgentMsg, M::Task>> = first.into();
    loop {
        while let Some(a) = queue.pop_front() {
            match a {
                Action::Send(msg) => wire::write_msg(ctl, &msg).map_err(|e| e.to_string())?,
                Action::Do(t) => queue.extend(tasks.run(t, m, ctl, clock)?),
                Action::Done => return Ok(()),
                Action::Fail(f) => return Err(Fail::Told(f.to_string())),
            }
        }
        if !m.wants_msg() {
            return Err(Fail::Untold("internal: the conversation waits for nothing".into()));
        }
        if tasks.stopping() {
            return Err(send_error(ctl, gridperf_core::wire::ErrorCode::Busy, "the agent is shutting down".into()));
        }
        let until = m.deadline().map_or_else(|| Instant::now() + longest, |d| clock.at(d));
        let input = match ctl::read_msg_by::<ClientMsg>(ctl, until) {
            Ok(msg) => Input::Msg(msg),
            Err(WireError::Timeout) => Input::Deadline,
            Err(e) => return Err(send_error(ctl, wire_code(&e), format!("reading the client's next message: {e}"))),
        };
        queue.extend(m.handle(input, clock.now()));
    }
}
