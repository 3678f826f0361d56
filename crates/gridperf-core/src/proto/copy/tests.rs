//! The copy's conversation, both ends against each other in virtual time.

use super::pair::{agent_info, Ended, Pair, Side, World};
use super::{Destination, Listing, Pull, Push, Read, Source, Waits, Write};
use crate::model::CopyStream;
use crate::proto::{Action, End, Failure, Input, Nanos};
use crate::wire::{AgentMsg, ClientMsg, CopyFile, CopyNeed, CopyOutcome, ErrorCode};

const MS: Nanos = 1_000_000;
/// 400 ms round trips, as the lab test's long path.
const LATENCY: Nanos = 200 * MS;

fn waits() -> Waits {
    Waits { control: 10_000 * MS, list: 40_000 * MS }
}

fn small() -> World {
    World { files: vec![("a.dat".into(), 4096)], block: 1 << 20, rate_bps: 1_000_000_000 }
}

fn files(w: &World) -> Vec<CopyFile> {
    w.files
        .iter()
        .map(|(p, s)| CopyFile { path: p.clone(), size: *s, mtime_ns: 0, digest: None, origin: None })
        .collect()
}

fn names(w: &World) -> Vec<CopyFile> {
    w.files
        .iter()
        .map(|(p, _)| CopyFile { path: p.clone(), size: 0, mtime_ns: 0, digest: None, origin: None })
        .collect()
}

fn push(w: World, streams: u32, tweak: impl FnOnce(&mut Pair<Push, Write>)) -> (Pair<Push, Write>, Ended) {
    let client = Push::new(files(&w), streams, waits());
    let agent = Write::new(w.files.len() as u32, agent_info(), waits(), 3 * LATENCY);
    Pair::run_with(client, agent, w, LATENCY, tweak, |c, now| c.start(now))
}

fn pull(w: World, streams: u32, tweak: impl FnOnce(&mut Pair<Pull, Read>)) -> (Pair<Pull, Read>, Ended) {
    let client = Pull::new(names(&w), streams, 16, waits());
    let agent = Read::new(w.files.len() as u32, w.block, agent_info(), waits(), 3 * LATENCY);
    Pair::run_with(client, agent, w, LATENCY, tweak, |c, now| c.start(now))
}

/// Where the first frame whose words start with `what` went, by `side`.
fn when(e: &Ended, side: Side, what: &str) -> Nanos {
    e.log.iter().find(|(_, s, w)| *s == side && w.starts_with(what)).map(|x| x.0).unwrap_or_else(|| {
        panic!("no {what} from {side:?} in {:#?}", e.log);
    })
}

fn ok(e: &Ended) {
    assert_eq!(e.client, Some(Ok(())), "the client: {:#?}", e.log);
    assert_eq!(e.agent, Some(Ok(())), "the agent: {:#?}", e.log);
}

#[test]
fn a_small_push_costs_five_round_trips() {
    let (p, e) = push(small(), 4, |_| {});
    ok(&e);
    let rt = e.round_trips(LATENCY);
    // 4 KiB at 1 Gbit/s adds 33 us to 2 s of round trips
    assert!((5.0..5.001).contains(&rt), "a small push took {rt} round trips: {:#?}", e.log);
    // hello, welcome, files, needs, go, ready, done with finish, results with the report
    assert_eq!(e.flights, 8, "{:#?}", e.log);
    assert_eq!(p.client.outcomes().len(), 1);
    assert_eq!(p.client.needs().len(), 1);
}

#[test]
fn a_small_pull_costs_six_round_trips() {
    let (p, e) = pull(small(), 4, |_| {});
    ok(&e);
    let rt = e.round_trips(LATENCY);
    assert!((6.0..6.001).contains(&rt), "a small pull took {rt} round trips: {:#?}", e.log);
    // hello, welcome, names, sources, needs with go, ready, copy-sent, finish, report
    assert_eq!(e.flights, 9, "{:#?}", e.log);
    assert_eq!(p.client.list().len(), 1);
}

#[test]
fn a_push_sends_stream_go_and_its_blocks_before_the_agent_is_ready() {
    let (_, e) = push(small(), 2, |_| {});
    ok(&e);
    let go = when(&e, Side::Client, "StreamGo");
    let ready = when(&e, Side::Agent, "StepReady");
    // go leaves as the needs arrive and the connections are open; the
    // agent says ready once it has taken them, half a round trip later
    assert_eq!(go, 6 * LATENCY, "{:#?}", e.log);
    assert_eq!(ready, 7 * LATENCY, "{:#?}", e.log);
    // copy-done and finish go in one flight; the results and the report come back in one
    assert_eq!(when(&e, Side::Client, "CopyDone"), when(&e, Side::Client, "Finish"));
    assert_eq!(when(&e, Side::Agent, "CopyResults"), when(&e, Side::Agent, "Report"));
}

#[test]
fn a_pull_sends_its_needs_and_stream_go_in_one_flight_and_finish_on_copy_sent() {
    let (_, e) = pull(small(), 2, |_| {});
    ok(&e);
    assert_eq!(when(&e, Side::Client, "CopyNeeds"), when(&e, Side::Client, "StreamGo"));
    // stream-go came before the agent took its connections: it sends at once
    let ready = when(&e, Side::Agent, "StepReady");
    assert!(when(&e, Side::Client, "StreamGo") + LATENCY <= ready, "{:#?}", e.log);
    assert_eq!(when(&e, Side::Client, "Finish"), when(&e, Side::Agent, "CopySent") + LATENCY);
}

#[test]
fn a_pulls_further_connection_is_asked_of_the_client_by_the_agents_machine() {
    // the agent's pool wants connection 4 (a restart's) as it begins: its
    // machine asks the client, which opens it half a round trip later; what
    // the pool did is told; the pull ends as it would have
    let (p, e) = pull(small(), 2, |p| p.pool_wants = Some(4));
    ok(&e);
    let asked = when(&e, Side::Agent, "CopyConnect { index: 4 }");
    assert_eq!(when(&e, Side::Agent, "CopyEvent"), asked, "{:#?}", e.log);
    assert_eq!(p.connects, vec![(asked + LATENCY, 4)], "{:#?}", e.log);
    let (_, plain) = pull(small(), 2, |_| {});
    assert_eq!(e.at, plain.at, "asking for a connection costs the conversation nothing");
}

#[test]
fn a_large_push_costs_its_transfer_time_beside_the_round_trips() {
    // 1 GiB at 1 Gbit/s: 8.59 s more than the small push's 5 round trips
    let w = World { files: vec![("big".into(), 1 << 30)], block: 1 << 20, rate_bps: 1_000_000_000 };
    let (_, e) = push(w, 4, |_| {});
    ok(&e);
    let extra = e.at as f64 / 1e9 - 5.0 * 0.4;
    assert!((extra - 8.5899).abs() < 0.001, "{extra} s beyond the round trips");
}

#[test]
fn files_arrive_and_are_listed_in_parts_however_many() {
    let many: Vec<(String, u64)> = (0..5000).map(|k| (format!("dir/file-with-a-long-name-{k:06}.dat"), 100)).collect();
    let w = World { files: many, block: 1 << 20, rate_bps: 1_000_000_000 };
    let (p, e) = push(w.clone(), 2, |_| {});
    ok(&e);
    assert_eq!(p.client.outcomes().len(), 5000);
    assert!(e.log.iter().filter(|(_, s, w)| *s == Side::Client && w.starts_with("CopyFiles")).count() > 1);
    let (p, e) = pull(w, 2, |_| {});
    ok(&e);
    assert_eq!(p.client.list().len(), 5000);
}

#[test]
fn a_path_out_of_the_root_is_refused_before_anything_is_touched() {
    let w = World { files: vec![("../etc/passwd".into(), 10)], block: 1 << 20, rate_bps: 1_000_000_000 };
    let (_, e) = push(w, 1, |_| {});
    match e.client {
        Some(Err(Failure::Agent { code: ErrorCode::Refused, message })) => {
            assert!(message.contains("nothing was touched"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(e.agent, Some(Err(_))));
    assert!(!e.log.iter().any(|(_, _, w)| w.starts_with("CopyNeeds")), "{:#?}", e.log);
}

#[test]
fn a_client_that_never_says_done_is_timed_out_and_says_what_it_waited_for() {
    let (_, e) = push(small(), 1, |p| p.drop_client = Some("CopyDone"));
    // finish came without copy-done: out of turn at the agent
    match &e.agent {
        Some(Err(Failure::Net(m))) => assert!(m.contains("expected copy-done, got Finish"), "{m}"),
        other => panic!("{other:?}"),
    }
    match &e.client {
        Some(Err(Failure::Agent { code: ErrorCode::BadMessage, message })) => {
            assert!(message.contains("copy-done"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_silent_agent_ends_the_client_at_its_deadline() {
    let (_, e) = push(small(), 1, |p| p.drop_client = Some("CopyFiles"));
    match &e.client {
        Some(Err(Failure::Net(m))) => assert!(m.contains("no needs from the agent"), "{m}"),
        other => panic!("{other:?}"),
    }
    // the client gave up at its list deadline: 40 s after it began
    assert_eq!(e.at, 4 * LATENCY + waits().list);
    // and the agent at its own, having told the client (who had gone) why
    assert!(matches!(&e.agent, Some(Err(Failure::Net(m))) if m.contains("copy-files")), "{:?}", e.agent);
}

#[test]
fn a_pull_whose_agent_stops_sending_ends_with_its_reason_and_an_abort() {
    let (_, e) = pull(small(), 1, |p| p.stop_sending = Some("source changed".into()));
    match &e.client {
        Some(Err(Failure::Net(m))) => {
            assert!(
                m.starts_with("the copy stopped: the agent reported an error: the copy stopped: source changed"),
                "{m}"
            );
            assert!(m.contains("--resume goes on"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.log.iter().any(|(_, s, w)| *s == Side::Client && w.starts_with("Abort")));
}

#[test]
fn a_push_that_stops_waits_briefly_for_the_agents_words_then_aborts() {
    let (_, e) = push(small(), 1, |p| p.stop_sending = Some("a block came back damaged".into()));
    // the agent's step-ready came; then nothing: 2 s later the client aborts
    match &e.client {
        Some(Err(Failure::Net(m))) => assert!(m.contains("the copy stopped: a block came back damaged"), "{m}"),
        other => panic!("{other:?}"),
    }
    let abort = when(&e, Side::Client, "Abort");
    assert!(abort >= 2_000 * MS, "{:#?}", e.log);
    // the agent keeps every partial file and says the client gave up
    assert!(matches!(&e.agent, Some(Err(Failure::Net(m))) if m.starts_with("client aborted")), "{:?}", e.agent);
}

// A copy between agents: the client's steps with each agent, the leases apart.

#[test]
fn a_sources_list_costs_one_round_trip_and_copy_to_follows_it() {
    let w =
        World { files: vec![("d/a.dat".into(), 4096), ("d/b.dat".into(), 3 << 20)], block: 1 << 20, rate_bps: 1 << 30 };
    let infos = files(&w);
    let source = Source::new(1, w.block, 4096, agent_info(), waits(), 3 * LATENCY);
    let named = CopyFile { path: "d".into(), size: 0, mtime_ns: 0, digest: None, origin: None };
    let (mut p, e) =
        Pair::run_with(Listing::new(waits().list), source, w, LATENCY, |_| {}, |c, now| c.start(named, now));
    // ready came at 4 latencies; the list goes and the files come back: one round trip
    assert_eq!(e.client, Some(Ok(())), "{:#?}", e.log);
    assert_eq!(e.at, 6 * LATENCY, "{:#?}", e.log);
    let (listed, skipped) = p.client.take();
    assert_eq!(listed, infos);
    assert!(skipped.is_empty());
    // told where to send, once listed: copy-to, and the step is done
    let to: std::net::SocketAddr = "10.77.2.1:5302".parse().expect("addr");
    let acts = p.client.send_to(to, 7, 8);
    assert_eq!(acts, vec![Action::Send(ClientMsg::CopyTo { addr: to.to_string(), token: 7, base: 8 }), Action::Done]);
    // never before it listed
    let mut early = Listing::new(waits().list);
    assert!(
        matches!(early.send_to(to, 7, 0).as_slice(), [Action::Fail(Failure::Net(m))] if m.contains("before it listed"))
    );
}

#[test]
fn a_listing_ends_on_an_error_frame_a_message_out_of_turn_or_quiet() {
    let named = || CopyFile { path: "d".into(), size: 0, mtime_ns: 0, digest: None, origin: None };
    let fails = |input: Input<AgentMsg, super::Event>| {
        let mut m = Listing::new(5 * MS);
        m.start(named(), 0);
        let acts = m.handle(input, MS);
        assert!(!m.wants_msg() && m.deadline().is_none(), "over after {acts:?}");
        match acts.as_slice() {
            [Action::Fail(f)] => f.clone(),
            other => panic!("{other:?}"),
        }
    };
    let f = fails(Input::Msg(AgentMsg::Error { code: ErrorCode::Refused, message: "no such file".into() }));
    assert!(f.said().contains("the agent refused: no such file"), "{f:?}");
    let f = fails(Input::Msg(AgentMsg::StepReady));
    assert!(f.to_string().starts_with("expected the agent's file list, got StepReady"), "{f}");
    let f = fails(Input::Deadline);
    assert!(f.to_string().starts_with("no file list within"), "{f}");
    // parts: each one restarts the wait; a list longer than a copy takes ends it
    let mut m = Listing::new(5 * MS);
    m.start(named(), 0);
    let part = |n: usize| (0..n).map(|k| CopyFile { path: format!("d/{k}"), ..named() }).collect::<Vec<_>>();
    assert!(m
        .handle(Input::Msg(AgentMsg::CopySources { files: part(3), last: false, skipped: vec![] }), 4 * MS)
        .is_empty());
    assert_eq!(m.deadline(), Some(9 * MS));
    let skipped = vec![("d/link".to_string(), "a symbolic link".to_string())];
    let acts =
        m.handle(Input::Msg(AgentMsg::CopySources { files: part(2), last: true, skipped: skipped.clone() }), 6 * MS);
    assert_eq!(acts, vec![Action::Done]);
    assert_eq!((m.take().0.len(), m.deadline()), (5, None));
    let mut m = Listing::new(5 * MS);
    m.start(named(), 0);
    let too_many = part(crate::wire::MAX_COPY_FILES as usize + 1);
    let acts = m.handle(Input::Msg(AgentMsg::CopySources { files: too_many, last: false, skipped: vec![] }), MS);
    assert!(
        matches!(acts.as_slice(), [Action::Fail(Failure::Net(m))] if m.contains("longer than a copy takes")),
        "{acts:?}"
    );
}

#[test]
fn a_destinations_needs_cost_one_round_trip() {
    let w = World { files: vec![("a.dat".into(), 5 << 20)], block: 1 << 20, rate_bps: 1 << 30 };
    let placed = files(&w);
    let write = Write::new(1, agent_info(), waits(), 3 * LATENCY);
    let client = Destination::new(waits().list, waits().control);
    let (mut p, e) = Pair::run_with(client, write, w, LATENCY, |_| {}, |c, now| c.start(&placed, now));
    assert_eq!(e.client, Some(Ok(())), "{:#?}", e.log);
    assert_eq!(e.at, 6 * LATENCY, "{:#?}", e.log);
    let needs = p.client.take_needs();
    assert_eq!(needs.len(), 1);
    assert_eq!(needs[0].ranges, vec![(0, 5)]);
}

#[test]
fn a_destination_takes_the_sources_connections_then_finishes() {
    let mut m = Destination::new(5 * MS, 20 * MS);
    let placed = vec![CopyFile { path: "x/a.dat".into(), size: 10, mtime_ns: 0, digest: None, origin: None }];
    assert_eq!(m.start(&placed, 0), vec![Action::Send(ClientMsg::CopyFiles { files: placed.clone() })]);
    let need = CopyNeed { file: 0, ranges: vec![(0, 1)], kept: 0, refused: None };
    assert_eq!(
        m.handle(Input::Msg(AgentMsg::CopyNeeds { needs: vec![need.clone()], last: true }), MS),
        vec![Action::Done]
    );
    assert_eq!(m.take_needs(), vec![need]);
    // between the steps it waits for nothing; finishing before the pairs ran is refused
    assert!(!m.wants_msg() && m.deadline().is_none());
    // the sources are told: step-ready is due within the taking wait, and stream-go answers it
    assert!(m.sources_told(10 * MS).is_empty());
    assert_eq!((m.wants_msg(), m.deadline()), (true, Some(30 * MS)));
    assert_eq!(
        m.handle(Input::Msg(AgentMsg::StepReady), 12 * MS),
        vec![Action::Send(ClientMsg::StreamGo), Action::Done]
    );
    // while the pairs run, the session waits for nothing
    assert!(!m.wants_msg() && m.deadline().is_none());
    // copy-done with the changed files; the outcomes in parts, the streams with them
    assert_eq!(m.finish(vec![0], 100 * MS), vec![Action::Send(ClientMsg::CopyDone { changed: vec![0] })]);
    let out = |file| CopyOutcome { file, blake3: None, moved: 10, resent: 0, kept: 0, error: None, checksum: None };
    let stream = CopyStream::default();
    assert!(m
        .handle(Input::Msg(AgentMsg::CopyResults { files: vec![out(0)], last: false, streams: vec![] }), 101 * MS)
        .is_empty());
    assert_eq!(m.deadline(), Some(106 * MS));
    let acts = m.handle(
        Input::Msg(AgentMsg::CopyResults { files: vec![], last: true, streams: vec![stream.clone()] }),
        102 * MS,
    );
    assert_eq!(acts, vec![Action::Done]);
    assert_eq!(m.take_results(), (vec![out(0)], vec![stream]));
    assert!(!m.wants_msg() && m.deadline().is_none());
    // no step-ready within the wait: the words say which
    let mut m = Destination::new(5 * MS, 20 * MS);
    m.start(&placed, 0);
    m.handle(Input::Msg(AgentMsg::CopyNeeds { needs: vec![], last: true }), MS);
    m.sources_told(2 * MS);
    let acts = m.handle(Input::Deadline, 22 * MS);
    assert!(
        matches!(acts.as_slice(), [Action::Fail(Failure::Net(w))] if w.starts_with("no step-ready within")),
        "{acts:?}"
    );
    // out of turn: a message while the pairs run ends it
    let mut m = Destination::new(5 * MS, 20 * MS);
    m.start(&placed, 0);
    m.handle(Input::Msg(AgentMsg::CopyNeeds { needs: vec![], last: true }), MS);
    m.sources_told(2 * MS);
    m.handle(Input::Msg(AgentMsg::StepReady), 3 * MS);
    let acts = m.handle(Input::Msg(AgentMsg::CopyNeeds { needs: vec![], last: true }), 4 * MS);
    assert!(
        matches!(acts.as_slice(), [Action::Fail(Failure::Net(w))] if w.contains("expected the agent's silence")),
        "{acts:?}"
    );
    // an error frame while it prepares is the agent's words
    let mut m = Destination::new(5 * MS, 20 * MS);
    m.start(&placed, 0);
    let acts =
        m.handle(Input::Msg(AgentMsg::Error { code: ErrorCode::Refused, message: "not on shared storage".into() }), MS);
    assert!(
        matches!(acts.as_slice(), [Action::Fail(f)] if f.said().contains("refused: not on shared storage")),
        "{acts:?}"
    );
}
