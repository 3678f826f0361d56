//! The agent's measurement machines, message by message.

use super::*;
use crate::proto::{Action, End, Failure, Input};

const S: Nanos = 1_000_000_000;

fn step(proto: &str, size: u64, exchanges: Option<u64>) -> Input<ClientMsg, Event> {
    Input::Msg(ClientMsg::Step(StepRequest { proto: proto.into(), size, exchanges }))
}

fn figures(echoed: u64) -> StepFigures {
    StepFigures { echoed, bytes_in: echoed * 64, ..StepFigures::default() }
}

fn echo() -> Echo {
    Echo::new(vec![Proto::Tcp, Proto::Udp], 65_536, 10 * S, EndInfo::default(), 0)
}

/// The error frame an agent's actions send and the failure they end in.
fn refused(acts: &[Action<AgentMsg, Task>]) -> (ErrorCode, String) {
    match acts {
        [Action::Send(AgentMsg::Error { code, message }), Action::Fail(Failure::Net(m))] if m == message => {
            (*code, message.clone())
        }
        other => panic!("not a refusal: {other:?}"),
    }
}

#[test]
fn an_echo_test_answers_each_step_and_finish_in_order() {
    let mut e = echo();
    assert!(e.wants_msg());
    assert_eq!(e.deadline(), Some(10 * S), "the first step within the control deadline");
    let acts = e.handle(step("tcp", 64, Some(1000)), S);
    assert_eq!(
        acts,
        vec![
            Action::Send(AgentMsg::StepReady),
            Action::Do(Task::Echo { proto: Proto::Tcp, size: 64, exchanges: Some(1000) })
        ]
    );
    assert!(!e.wants_msg(), "during a step the echo reads the control channel itself");
    assert_eq!(e.deadline(), None, "a step lasts as long as the client's count or its step-end");
    let acts = e.handle(Input::Event(Event::Stepped(figures(1000))), 3 * S);
    assert_eq!(acts, vec![Action::Send(AgentMsg::StepDone { figures: figures(1000) })]);
    assert_eq!(e.deadline(), Some(13 * S), "the next step or finish within the deadline, from the step's end");
    // a UDP step ends by the client's word: a count is not kept for it
    let acts = e.handle(step("udp", 1000, Some(5)), 4 * S);
    assert_eq!(acts[1], Action::Do(Task::Echo { proto: Proto::Udp, size: 1000, exchanges: None }));
    e.handle(Input::Event(Event::Stepped(figures(7))), 5 * S);
    // finish: the sockets as they are now, then the report with them
    assert_eq!(e.handle(Input::Msg(ClientMsg::Finish), 6 * S), vec![Action::Do(Task::ReadSockets)]);
    let sock = SocketInfo { proto: Some(Proto::Tcp), ..SocketInfo::default() };
    let acts = e.handle(Input::Event(Event::Sockets(vec![sock.clone()])), 6 * S);
    let agent = EndInfo { sockets: vec![sock], ..EndInfo::default() };
    assert_eq!(acts, vec![Action::Send(AgentMsg::Report { agent }), Action::Done]);
    assert!(!e.wants_msg());
}

#[test]
fn a_pipelined_step_is_answered_after_the_step_before() {
    // the client sends step-end and the next step in one flight; the echo
    // reads step-end, the next step waits on the control channel until the
    // machine asks for a message: step-done goes first, then step-ready
    let mut e = echo();
    e.handle(step("udp", 64, None), 0);
    let mut sent = Vec::new();
    for a in e.handle(Input::Event(Event::Stepped(figures(10))), S) {
        sent.push(a);
    }
    assert!(e.wants_msg());
    sent.extend(e.handle(step("udp", 128, None), S));
    let frames: Vec<&AgentMsg> = sent
        .iter()
        .filter_map(|a| match a {
            Action::Send(m) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(frames, vec![&AgentMsg::StepDone { figures: figures(10) }, &AgentMsg::StepReady]);
}

#[test]
fn an_echo_test_refuses_what_it_did_not_open_or_announce() {
    let (code, m) = refused(&echo().handle(step("sendfile", 64, None), 0));
    assert_eq!(code, ErrorCode::BadMessage);
    assert!(m.contains("\"sendfile\", which this test did not open (it opened tcp, udp)"), "{m}");
    let (code, m) = refused(&echo().handle(step("carrier-pigeon", 64, None), 0));
    assert_eq!(code, ErrorCode::BadMessage, "{m}");
    for size in [0, 65_537] {
        let (code, m) = refused(&echo().handle(step("tcp", size, None), 0));
        assert_eq!(code, ErrorCode::TooLarge);
        assert!(m.contains(&format!("step size {size} is outside 1..=65536")), "{m}");
    }
    let (code, m) = refused(&echo().handle(Input::Msg(ClientMsg::StreamGo), 0));
    assert_eq!(code, ErrorCode::BadMessage);
    assert!(m.contains("a step or finish is valid"), "{m}");
}

#[test]
fn an_echo_test_ends_on_silence_and_on_the_clients_abort() {
    let mut e = echo();
    e.handle(step("tcp", 64, None), 0);
    e.handle(Input::Event(Event::Stepped(figures(1))), S);
    let (code, m) = refused(&e.handle(Input::Deadline, 11 * S));
    assert_eq!(code, ErrorCode::Timeout);
    assert!(m.contains("between steps: nothing from the client within 10.0 s"), "{m}");
    assert!(!e.wants_msg() && e.deadline().is_none(), "over");
    // an abort is the client's reason: nothing to tell it
    let acts = echo().handle(Input::Msg(ClientMsg::Abort { reason: "user\u{7} interrupt".into() }), 0);
    match &acts[..] {
        [Action::Fail(Failure::Net(m))] => {
            assert!(m.starts_with("client aborted: user") && !m.contains('\u{7}'), "{m}")
        }
        other => panic!("{other:?}"),
    }
    // what a driver must not hand it: said, not obeyed
    let acts = echo().handle(Input::Event(Event::Streamed(Vec::new())), 0);
    assert!(matches!(&acts[..], [Action::Fail(Failure::Net(m))] if m.starts_with("internal:")), "{acts:?}");
}

#[test]
fn a_stream_test_says_ready_streams_on_go_and_reports_on_finish() {
    let (mut s, first) = Stream::new(10 * S, EndInfo::default(), 0);
    assert_eq!(first, vec![Action::Send(AgentMsg::StepReady)]);
    assert!(s.wants_msg());
    assert_eq!(s.deadline(), Some(10 * S));
    assert_eq!(s.handle(Input::Msg(ClientMsg::StreamGo), S), vec![Action::Do(Task::Stream)]);
    assert!(!s.wants_msg() && s.deadline().is_none(), "the streams' own deadline is the task's");
    let sock = SocketInfo { proto: Some(Proto::Tcp), ..SocketInfo::default() };
    assert!(s.handle(Input::Event(Event::Streamed(vec![sock.clone()])), 7 * S).is_empty());
    assert!(s.wants_msg());
    assert_eq!(s.deadline(), Some(17 * S));
    let agent = EndInfo { sockets: vec![sock], ..EndInfo::default() };
    assert_eq!(
        s.handle(Input::Msg(ClientMsg::Finish), 8 * S),
        vec![Action::Send(AgentMsg::Report { agent }), Action::Done]
    );
}

#[test]
fn a_stream_test_refuses_out_of_turn_and_ends_on_silence() {
    let (mut s, _) = Stream::new(10 * S, EndInfo::default(), 0);
    let (code, m) = refused(&s.handle(Input::Msg(ClientMsg::Finish), 0));
    assert_eq!(code, ErrorCode::BadMessage);
    assert_eq!(m, "expected stream-go, got Finish");
    let (mut s, _) = Stream::new(10 * S, EndInfo::default(), 0);
    let (code, m) = refused(&s.handle(Input::Deadline, 10 * S));
    assert_eq!(code, ErrorCode::Timeout);
    assert!(m.contains("waiting for stream-go: nothing from the client within 10.0 s"), "{m}");
    let (mut s, _) = Stream::new(10 * S, EndInfo::default(), 0);
    s.handle(Input::Msg(ClientMsg::StreamGo), 0);
    s.handle(Input::Event(Event::Streamed(Vec::new())), S);
    let (code, m) = refused(&s.handle(Input::Msg(ClientMsg::StreamGo), 2 * S));
    assert_eq!(code, ErrorCode::BadMessage);
    assert_eq!(m, "expected finish, got StreamGo");
    let (mut s, _) = Stream::new(10 * S, EndInfo::default(), 0);
    s.handle(Input::Msg(ClientMsg::StreamGo), 0);
    s.handle(Input::Event(Event::Streamed(Vec::new())), S);
    let (code, m) = refused(&s.handle(Input::Deadline, 11 * S));
    assert_eq!(code, ErrorCode::Timeout);
    assert!(m.contains("waiting for finish"), "{m}");
    let (mut s, _) = Stream::new(10 * S, EndInfo::default(), 0);
    let acts = s.handle(Input::Msg(ClientMsg::Abort { reason: "ctrl-c".into() }), 0);
    assert_eq!(acts, vec![Action::Fail(Failure::Net("client aborted: ctrl-c".into()))]);
}

// the client's end, and both ends against each other

use super::client::{StepTask, Steps};
use super::pair::{self, Planned};

const L: Nanos = 10_000_000;

fn udp(exchanges: u64) -> Planned {
    Planned { proto: Proto::Udp, size: 64, exchanges, counted_by_agent: false }
}

fn tcp_counted(exchanges: u64) -> Planned {
    Planned { proto: Proto::Tcp, size: 64, exchanges, counted_by_agent: true }
}

fn req(proto: &str, exchanges: Option<u64>) -> StepRequest {
    StepRequest { proto: proto.into(), size: 64, exchanges }
}

#[test]
fn two_steps_the_client_ends_cost_a_round_trip_less_with_the_next_asked_behind_step_end() {
    let plan = [udp(5), udp(5)];
    // each step: step -> step-ready (1 round trip), 5 exchanges, step-end -> step-done (1)
    let apart = pair::run(&plan, false, L);
    assert!(apart.failed.is_none(), "{:?}", apart.failed);
    assert_eq!(apart.at, 2 * (2 + 10 + 2) * L, "{:#?}", apart.log);
    // the second step asked for behind the first one's step-end: one round trip between the steps' exchanges
    let piped = pair::run(&plan, true, L);
    assert!(piped.failed.is_none(), "{:?}", piped.failed);
    assert_eq!(piped.at, apart.at - 2 * L, "{:#?}", piped.log);
    assert_eq!(piped.figures.iter().map(|f| f.echoed).collect::<Vec<_>>(), [5, 5]);
    // in one flight each way, in order: step-end then step; step-done then step-ready
    let at = |who: char, what: &str| -> Vec<Nanos> {
        piped.log.iter().filter(|(_, w, m)| *w == who && m.starts_with(what)).map(|e| e.0).collect()
    };
    let (ends, steps) = (at('c', "StepEnd"), at('c', "Step("));
    assert_eq!(steps[1], ends[0], "{:#?}", piped.log);
    let (dones, readies) = (at('a', "StepDone"), at('a', "StepReady"));
    assert_eq!(readies[1], dones[0], "{:#?}", piped.log);
    let order: Vec<&str> = piped.log.iter().map(|(_, _, m)| m.split([' ', '(']).next().unwrap_or("")).collect();
    assert_eq!(order, ["Step", "StepReady", "StepEnd", "Step", "StepDone", "StepReady", "StepEnd", "StepDone"]);
}

#[test]
fn a_step_the_agent_counts_is_not_followed_by_an_early_request() {
    // the agent may still be echoing when a request would arrive, and would
    // read it where the client's next exchange belongs: the next step is
    // asked for once step-done came, even when asked to pipeline
    let run = pair::run(&[tcp_counted(5), udp(5)], true, L);
    assert!(run.failed.is_none(), "{:?}", run.failed);
    let sent: Vec<(Nanos, char, &str)> =
        run.log.iter().map(|(t, w, m)| (*t, *w, &m[..m.find(['(', ' ']).unwrap_or(m.len())])).collect();
    assert_eq!(
        sent,
        [
            (0, 'c', "Step"),
            (L, 'a', "StepReady"),
            // the fifth exchange reaches the agent 10 one-way trips after step-ready left it
            (11 * L, 'a', "StepDone"),
            (12 * L, 'c', "Step"),
            (13 * L, 'a', "StepReady"),
            (24 * L, 'c', "StepEnd"),
            (25 * L, 'a', "StepDone"),
        ]
    );
    assert_eq!(run.at, 26 * L);
    let mut s = Steps::new(10 * S);
    s.step(req("tcp", Some(5)), 0);
    s.handle(Input::Msg(AgentMsg::StepReady), L);
    assert_eq!(s.end(true, Some(req("udp", None)), 12 * L), Vec::new(), "nothing to send: the agent counts");
    assert!(s.wants_msg());
}

#[test]
fn the_clients_steps_end_on_the_agents_error_its_silence_and_a_frame_out_of_turn() {
    let mut s = Steps::new(10 * S);
    assert_eq!(s.step(req("udp", None), 0), vec![Action::Send(ClientMsg::Step(req("udp", None)))]);
    assert_eq!(s.deadline(), Some(10 * S));
    let acts = s.handle(Input::Deadline, 10 * S);
    assert_eq!(acts, vec![Action::Fail(Failure::Net("no step-ready from the agent within 10.0 s".into()))]);
    assert!(!s.wants_msg() && s.deadline().is_none());
    let mut s = Steps::new(10 * S);
    s.step(req("udp", None), 0);
    s.handle(Input::Msg(AgentMsg::StepReady), S);
    assert!(s.stepping() && s.deadline().is_none(), "a step lasts as long as the client's exchanges");
    assert_eq!(
        s.end(false, None, 2 * S),
        vec![Action::Send(ClientMsg::StepEnd), Action::Do(StepTask::Nudge)],
        "step-end, then the nudge that wakes an echo blocked on its data socket"
    );
    let acts = s.handle(Input::Msg(AgentMsg::StepReady), 2 * S);
    assert_eq!(acts, vec![Action::Fail(Failure::Net("expected step-done from the agent, got StepReady".into()))]);
    let mut s = Steps::new(10 * S);
    s.step(req("udp", None), 0);
    let acts = s.handle(Input::Msg(AgentMsg::Error { code: ErrorCode::TooLarge, message: "too\u{7} big".into() }), S);
    assert_eq!(acts, vec![Action::Fail(Failure::agent(ErrorCode::TooLarge, "too\u{7} big"))]);
    match &acts[0] {
        Action::Fail(Failure::Agent { message, .. }) => assert!(!message.contains('\u{7}'), "shown, never obeyed"),
        other => panic!("{other:?}"),
    }
    // a caller's mistake is said, not sent
    let mut s = Steps::new(10 * S);
    s.step(req("udp", None), 0);
    let acts = s.step(req("udp", None), 0);
    assert!(matches!(&acts[..], [Action::Fail(Failure::Net(m))] if m.starts_with("internal: a step asked for")));
}

#[test]
fn a_fanout_consumer_waits_for_finish_while_connections_put_its_deadline_off() {
    let agent = EndInfo { host: "consumer".into(), ..EndInfo::default() };
    let mut f = Fanout::new(10 * S, agent.clone(), 0);
    assert!(f.wants_msg());
    assert_eq!(f.deadline(), Some(10 * S));
    // each connection taken: the client is not silent
    assert!(f.handle(Input::Event(Event::Accepted), 4 * S).is_empty());
    assert_eq!(f.deadline(), Some(14 * S));
    assert_eq!(
        f.handle(Input::Msg(ClientMsg::Finish), 5 * S),
        vec![Action::Send(AgentMsg::Report { agent }), Action::Done]
    );
    assert!(!f.wants_msg() && f.deadline().is_none());
    // silence: said, with the figure
    let (code, m) = refused(&Fanout::new(10 * S, EndInfo::default(), 0).handle(Input::Deadline, 10 * S));
    assert_eq!(code, ErrorCode::Timeout);
    assert!(m.contains("no connection and no message within 10.0 s"), "{m}");
    let (code, m) = refused(&Fanout::new(10 * S, EndInfo::default(), 0).handle(Input::Msg(ClientMsg::StepEnd), S));
    assert_eq!(code, ErrorCode::BadMessage);
    assert_eq!(m, "unexpected StepEnd during a fanout test: finish is valid there");
    let acts =
        Fanout::new(10 * S, EndInfo::default(), 0).handle(Input::Msg(ClientMsg::Abort { reason: "done".into() }), S);
    assert_eq!(acts, vec![Action::Fail(Failure::Net("client aborted: done".into()))]);
    // once over, what it is handed is an internal error, never a second report
    let mut f = Fanout::new(10 * S, EndInfo::default(), 0);
    f.handle(Input::Msg(ClientMsg::Finish), S);
    let acts = f.handle(Input::Msg(ClientMsg::Finish), S);
    assert!(matches!(&acts[..], [Action::Fail(Failure::Net(m))] if m.starts_with("internal:")), "{acts:?}");
}
