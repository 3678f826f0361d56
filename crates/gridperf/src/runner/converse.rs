//! The client's driver of a copy's conversation
//! ([`gridperf_core::proto::copy`]): it sends the machine's frames, runs
//! its tasks (the data connections, the pool, the files) and hands it the
//! agent's frames, or its deadline when nothing came by then. Every
//! decision of what to send when is the machine's.

use crate::error::Result;
use crate::runner::{failure, Session};
use gridperf_core::proto::copy::{Event, Task};
pub(crate) use gridperf_core::proto::Clock;
use gridperf_core::proto::{Action, End, Input};
use gridperf_core::wire::{AgentMsg, ClientMsg};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What the client's machine asks for.
pub(crate) type Acts = Vec<Action<ClientMsg, Task>>;

/// A machine's tasks, as one kind of copy runs them.
pub(crate) trait Tasks<M> {
    /// Runs a task, or starts one that ends later ([`Tasks::wait`]); the
    /// machine's answer to what came of it.
    fn run(&mut self, t: Task, m: &mut M, s: &mut Session, clock: &Clock) -> Result<Acts>;
    /// Waits for the task started: the machine waits for it, not for a message.
    fn wait(&mut self, m: &mut M, clock: &Clock) -> Result<Acts>;
}

/// Drives `m` from its `first` actions to its end; `longest`: the wait for
/// a message when the machine keeps no deadline of its own.
pub(crate) fn converse<M>(
    s: &mut Session,
    m: &mut M,
    first: Acts,
    clock: &Clock,
    longest: Duration,
    tasks: &mut dyn Tasks<M>,
) -> Result<()>
where
    M: End<In = AgentMsg, Out = ClientMsg, Task = Task, Event = Event>,
{
    let mut queue: VecDeque<_> = first.into();
    loop {
        if let Some(done) = run_all(s, m, &mut queue, clock, tasks)? {
            return Ok(done);
        }
        let acts = if m.wants_msg() {
            let until = m.deadline().map_or_else(|| Instant::now() + longest, |d| clock.at(d));
            match s.frame_by(until)? {
                Some(msg) => m.handle(Input::Msg(msg), clock.now()),
                None => m.handle(Input::Deadline, clock.now()),
            }
        } else {
            tasks.wait(m, clock)?
        };
        queue.extend(acts);
    }
}

/// Carries out the queued actions: `Some` once the conversation is done.
pub(crate) fn run_all<M>(
    s: &mut Session,
    m: &mut M,
    queue: &mut VecDeque<Action<ClientMsg, Task>>,
    clock: &Clock,
    tasks: &mut dyn Tasks<M>,
) -> Result<Option<()>> {
    while let Some(a) = queue.pop_front() {
        match a {
            Action::Send(msg) => s.send_frame(&msg)?,
            Action::Do(t) => queue.extend(tasks.run(t, m, s, clock)?),
            Action::Done => return Ok(Some(())),
            Action::Fail(f) => return Err(failure(f)),
        }
    }
    Ok(None)
}
