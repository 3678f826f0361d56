//! The opening, both ends against each other in virtual time.

use super::*;
use crate::model::plan::Proto;
use crate::wire::{EchoSpec, Test};

const MS: Nanos = 1_000_000;
const L: Nanos = 200 * MS;
const CONTROL: Nanos = 5_000 * MS;

fn key(name: &str, byte: u8) -> Key {
    Key::new(name, [byte; KEY_LEN]).expect("a key")
}

fn me(key: Option<Key>, must_prove: bool) -> Me {
    Me {
        software: "gridperf test".into(),
        key,
        must_prove,
        nonce: [7; KEY_LEN],
        agent_words: "the agent at 192.0.2.1:5301".into(),
        key_hint: "~/.config/gridperf/key".into(),
    }
}

fn request() -> TestRequest {
    let spec = EchoSpec {
        protos: vec![Proto::Tcp],
        max_size: 64,
        nodelay: true,
        busy_poll: false,
        cpu: None,
        sndbuf: None,
        rcvbuf: None,
        udp_port: None,
        timeout_ms: 1000,
    };
    TestRequest { queue_ms: 0, test: Test::Rtt(spec) }
}

/// How an opening went: each end's end, when the client was ready (or
/// failed), and every frame with its time.
struct Run {
    client: Option<Result<(), Failure>>,
    agent: Option<Result<(), Failure>>,
    at: Nanos,
    log: Vec<(Nanos, &'static str, String)>,
    secrets: (Option<[u8; KEY_LEN]>, Option<[u8; KEY_LEN]>),
}

/// The control connection opens (a round trip), then the ends talk with
/// one-way latency `L`; `agent_answer` is what the agent says to a request
/// it read (its slot's business, not the greeting's).
fn open(me: Me, auth: Option<(Vec<Key>, [u8; KEY_LEN])>, agent_answer: Vec<AgentMsg>) -> Run {
    let mut c = Opening::new(me, CONTROL, 0);
    let mut a = Greeting::new("agent test".into(), auth, 2 * L + CONTROL);
    let mut to_agent: Vec<(Nanos, ClientMsg)> = Vec::new();
    let mut to_client: Vec<(Nanos, AgentMsg)> = Vec::new();
    let mut run = Run { client: None, agent: None, at: 0, log: Vec::new(), secrets: (None, None) };
    let mut now = 2 * L;
    let mut client_acts = c.start(now);
    let mut requested = false;
    for _ in 0..100 {
        // the client's actions
        for act in std::mem::take(&mut client_acts) {
            match act {
                Action::Send(m) => {
                    run.log.push((now, "client", format!("{m:?}")));
                    to_agent.push((now + L, m));
                }
                Action::Do(Note::Queued { .. }) => {}
                Action::Done if !requested => {
                    requested = true;
                    client_acts.extend(c.request(request(), now));
                }
                Action::Done => {
                    run.client = Some(Ok(()));
                    run.at = now;
                }
                Action::Fail(f) => {
                    run.client = Some(Err(f));
                    run.at = now;
                }
            }
        }
        if !client_acts.is_empty() {
            continue;
        }
        if run.client.is_some() {
            break;
        }
        // the next delivery, or a deadline
        let next_a = to_agent.iter().map(|x| x.0).min();
        let next_c = to_client.iter().map(|x| x.0).min();
        let (deadline_c, deadline_a) = (c.deadline(), if run.agent.is_none() { a.deadline() } else { None });
        let t = [next_a, next_c, deadline_c, deadline_a].into_iter().flatten().min();
        let Some(t) = t else { break };
        now = t;
        if next_a == Some(t) {
            let i = to_agent.iter().position(|x| x.0 == t).expect("due");
            let (_, m) = to_agent.remove(i);
            if run.agent.is_none() {
                for act in a.handle(Input::Msg(m), now) {
                    match act {
                        Action::Send(m) => {
                            run.log.push((now, "agent", format!("{m:?}")));
                            to_client.push((now + L, m));
                        }
                        Action::Done => {
                            run.agent = Some(Ok(()));
                            for m in agent_answer.clone() {
                                run.log.push((now, "agent", format!("{m:?}")));
                                to_client.push((now + L, m));
                            }
                        }
                        Action::Fail(f) => run.agent = Some(Err(f)),
                        Action::Do(()) => {}
                    }
                }
            }
        } else if next_c == Some(t) {
            let i = to_client.iter().position(|x| x.0 == t).expect("due");
            let (_, m) = to_client.remove(i);
            client_acts = c.handle(Input::Msg(m), now);
        } else if deadline_c == Some(t) {
            client_acts = c.handle(Input::Deadline, now);
        } else {
            for act in a.handle(Input::Deadline, now) {
                match act {
                    Action::Send(m) => to_client.push((now + L, m)),
                    Action::Fail(f) => run.agent = Some(Err(f)),
                    _ => {}
                }
            }
        }
    }
    run.secrets = (c.secret(), a.secret());
    run
}

fn ready() -> AgentMsg {
    AgentMsg::Ready { tcp_port: Some(1), udp_ports: Vec::new(), token: 9, agent: Default::default() }
}

#[test]
fn without_a_key_the_request_rides_behind_the_hello_one_round_trip_after_connecting() {
    let r = open(me(None, false), None, vec![ready()]);
    assert_eq!(r.client, Some(Ok(())), "{:#?}", r.log);
    assert_eq!(r.agent, Some(Ok(())));
    // connect (1 round trip), hello + request, welcome + ready (1 round trip)
    assert_eq!(r.at, 4 * L, "{:#?}", r.log);
    assert_eq!(r.log[0].0, r.log[1].0, "hello and request in one flight: {:#?}", r.log);
}

#[test]
fn with_a_key_both_ends_prove_it_and_share_the_sessions_secret() {
    let k = key("alice", 3);
    let r = open(me(Some(k.clone()), true), Some((vec![k], [5; KEY_LEN])), vec![ready()]);
    assert_eq!(r.client, Some(Ok(())), "{:#?}", r.log);
    // connect, hello / welcome, auth / auth-ok, request / ready
    assert_eq!(r.at, 8 * L, "{:#?}", r.log);
    assert!(r.secrets.0.is_some() && r.secrets.0 == r.secrets.1);
}

#[test]
fn a_wrong_key_is_refused_with_one_answer_for_a_name_and_a_secret() {
    let r = open(me(Some(key("alice", 3)), true), Some((vec![key("alice", 4)], [5; KEY_LEN])), vec![ready()]);
    match r.client {
        Some(Err(Failure::Agent { code: ErrorCode::Refused, message })) => {
            assert!(message.contains("authentication failed for key \"alice\""), "{message}")
        }
        other => panic!("{other:?}"),
    }
    let r = open(me(Some(key("bob", 3)), true), Some((vec![key("alice", 3)], [5; KEY_LEN])), vec![ready()]);
    assert!(matches!(r.client, Some(Err(Failure::Agent { code: ErrorCode::Refused, .. }))));
}

#[test]
fn a_client_without_a_key_hears_the_agent_wants_one_and_where_to_keep_it() {
    let r = open(me(None, false), Some((vec![key("alice", 3)], [5; KEY_LEN])), vec![ready()]);
    match r.client {
        Some(Err(Failure::Refused(m))) => assert!(m.contains("give --key FILE (or keep one at ~/.config"), "{m}"),
        other => panic!("{other:?}: {:#?}", r.log),
    }
    // the agent refused what came instead of the key
    assert!(matches!(r.agent, Some(Err(_))));
}

#[test]
fn a_keyed_client_refuses_an_agent_that_asks_for_no_key_unless_told_it_may() {
    let r = open(me(Some(key("alice", 3)), true), None, vec![ready()]);
    match r.client {
        Some(Err(Failure::Refused(m))) => assert!(m.contains("asks for no key, but --key was given"), "{m}"),
        other => panic!("{other:?}"),
    }
    // --insecure: the same agent, accepted
    let r = open(me(Some(key("alice", 3)), false), None, vec![ready()]);
    assert_eq!(r.client, Some(Ok(())), "{:#?}", r.log);
    assert_eq!(r.secrets.0, None);
}

#[test]
fn an_agent_that_cannot_prove_the_key_is_not_the_one_meant() {
    // an agent that accepts any name and answers with a made-up proof
    let mut c = Opening::new(me(Some(key("alice", 3)), true), CONTROL, 0);
    c.start(0);
    let welcome = AgentMsg::Welcome {
        magic: wire::MAGIC.into(),
        version: wire::PROTOCOL_VERSION,
        software: "impostor".into(),
        challenge: Some(auth::hex(&[1; KEY_LEN])),
    };
    assert!(matches!(c.handle(Input::Msg(welcome), L)[..], [Action::Send(ClientMsg::Auth { .. })]));
    let acts = c.handle(Input::Msg(AgentMsg::AuthOk { proof: "00".repeat(32) }), 2 * L);
    match &acts[..] {
        [Action::Fail(Failure::Refused(m))] => assert!(m.contains("could not prove it holds it"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn another_version_is_refused_at_both_ends_with_both_versions_named() {
    let mut a = Greeting::new("agent test".into(), None, CONTROL);
    let acts =
        a.handle(Input::Msg(ClientMsg::Hello { magic: wire::MAGIC.into(), version: 1, software: "old".into() }), 0);
    match &acts[..] {
        [Action::Send(AgentMsg::Error { code: ErrorCode::VersionMismatch, message }), Action::Fail(_)] => {
            assert!(message.contains("speaks version 1") && message.contains("run the same gridperf release"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(a.stage(), Stage::Version);
    let mut c = Opening::new(me(None, false), CONTROL, 0);
    c.start(0);
    c.request(request(), 0);
    let w = AgentMsg::Welcome { magic: wire::MAGIC.into(), version: 99, software: "new".into(), challenge: None };
    assert!(matches!(&c.handle(Input::Msg(w), L)[..], [Action::Fail(Failure::Refused(m))] if m.contains("version 99")));
}

#[test]
fn a_busy_agent_queues_the_client_and_its_deadline_grows_by_the_queue() {
    let mut c = Opening::new(me(None, false), CONTROL, 30_000 * MS);
    c.start(0);
    c.request(request(), 0);
    let w = AgentMsg::Welcome {
        magic: wire::MAGIC.into(),
        version: wire::PROTOCOL_VERSION,
        software: "a".into(),
        challenge: None,
    };
    assert!(c.handle(Input::Msg(w), L).is_empty());
    assert_eq!(c.handle(Input::Msg(AgentMsg::Queued { ahead: 2 }), L), vec![Action::Do(Note::Queued { ahead: 2 })]);
    assert_eq!(c.deadline(), Some(L + 30_000 * MS + CONTROL));
    assert_eq!(c.handle(Input::Msg(ready()), 10_000 * MS), vec![Action::Done]);
    assert!(c.take_ready().is_some_and(|r| r.token == 9));
}

#[test]
fn a_silent_client_is_told_it_took_too_long_and_a_silent_agent_ends_the_client() {
    let mut a = Greeting::new("agent test".into(), None, 5_000 * MS);
    assert_eq!(a.deadline(), Some(5_000 * MS));
    match &a.handle(Input::Deadline, 5_000 * MS)[..] {
        [Action::Send(AgentMsg::Error { code: ErrorCode::Timeout, message }), Action::Fail(_)] => {
            assert!(message.contains("before hello"))
        }
        other => panic!("{other:?}"),
    }
    let mut c = Opening::new(me(None, false), CONTROL, 0);
    c.start(0);
    c.request(request(), 0);
    assert!(
        matches!(&c.handle(Input::Deadline, CONTROL)[..], [Action::Fail(Failure::Net(m))] if m.contains("no answer"))
    );
}

#[test]
fn anything_but_the_welcome_first_is_not_an_agent_speaking_this_protocol() {
    let mut c = Opening::new(me(None, false), CONTROL, 0);
    c.start(0);
    c.request(request(), 0);
    // a ready before any welcome: refused, not taken
    assert!(
        matches!(&c.handle(Input::Msg(ready()), L)[..], [Action::Fail(Failure::Net(m))] if m.contains("unexpected answer to hello"))
    );
}
