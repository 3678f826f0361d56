//! The client's driver of a conversation after ready
//! ([`gridperf_core::proto::copy`], [`gridperf_core::proto::measure`]):
//! it sends the machine's frames, runs its tasks (the data connections, the
//! pool, the files; a nudge of a data socket) and hands it the agent's
//! frames, or its deadline when nothing came by then. Every decision of
//! what to send when is the machine's.

use crate::error::Result;
use crate::runner::{failure, Session};
pub(crate) use gridperf_core::proto::Clock;
use gridperf_core::proto::{Action, End, Input};
use gridperf_core::wire::{AgentMsg, ClientMsg};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What a client's machine asks for.
pub(crate) type Acts<T> = Vec<Action<ClientMsg, T>>;

/// A machine's tasks, as one kind of test runs them at the client.
pub(crate) trait Tasks<M: End> {
    /// Runs a task, or starts one that ends later ([`Tasks::wait`]); the
    /// machine's answer to what came of it.
    fn run(&mut self, t: M::Task, m: &mut M, s: &mut Session, clock: &Clock) -> Result<Acts<M::Task>>;
    /// Waits for the task started: the machine waits for it, not for a message.
    fn wait(&mut self, _m: &mut M, _clock: &Clock) -> Result<Acts<M::Task>> {
        Err(crate::error::Error::internal("the conversation waits for nothing"))
    }
    /// Whether the conversation pauses, back to the caller, when the machine
    /// waits for nothing (a step's exchanges are the caller's) instead of
    /// waiting for a task.
    fn pauses(&self) -> bool {
        false
    }
}

/// Drives `m` from its `first` actions to its end, or to a pause;
/// `longest`: the wait for a message when the machine keeps no deadline of
/// its own.
pub(crate) fn converse<M>(
    s: &mut Session,
    m: &mut M,
    first: Acts<M::Task>,
    clock: &Clock,
    longest: Duration,
    tasks: &mut dyn Tasks<M>,
) -> Result<()>
where
    M: End<In = AgentMsg, Out = ClientMsg>,
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
        } else if tasks.pauses() {
            return Ok(());
        } else {
            tasks.wait(m, clock)?
        };
        queue.extend(acts);
    }
}

/// Carries out the queued actions: `Some` once the conversation is done.
pub(crate) fn run_all<M: End>(
    s: &mut Session,
    m: &mut M,
    queue: &mut VecDeque<Action<ClientMsg, M::Task>>,
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
