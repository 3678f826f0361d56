//! A source's leases, its machine alone and against the client's [`Leases`] in virtual time.

use super::*;
use crate::proto::Failure;
use crate::wire::CopyNeed;

const MS: Nanos = 1_000_000;

fn waits() -> Waits {
    Waits { control: 10_000 * MS, list: 40_000 * MS }
}

fn file(path: &str, size: u64) -> CopyFile {
    CopyFile { path: path.into(), size, mtime_ns: 0, digest: None, origin: None }
}

fn blocks(file: u32, a: u64, b: u64) -> Vec<CopyNeed> {
    vec![CopyNeed { file, ranges: vec![(a, b)], kept: 0, refused: None }]
}

fn msg(m: ClientMsg) -> Input<ClientMsg, Event> {
    Input::Msg(m)
}

fn ev(e: Event) -> Input<ClientMsg, Event> {
    Input::Event(e)
}

/// A source of 4 streams at most, sending a.dat (8 blocks of 1 MiB),
/// told where to send at 10 ms.
fn sending() -> Source {
    let mut s = Source::new(1, 1 << 20, 4, EndInfo::default(), waits(), 0);
    let a = s.handle(msg(ClientMsg::CopyFiles { files: vec![file("a.dat", 0)] }), MS);
    assert_eq!(a, vec![Action::Do(Task::Expand { names: vec![file("a.dat", 0)] })]);
    assert!(!s.wants_msg() && s.deadline().is_none(), "expanding: nothing awaited");
    let a = s.handle(ev(Event::Expanded { files: vec![file("a.dat", 8 << 20)], skipped: Vec::new() }), 2 * MS);
    assert!(matches!(&a[..], [Action::Send(AgentMsg::CopySources { last: true, .. })]), "{a:?}");
    assert!(s.wants_msg() && s.deadline() == Some(2 * MS + waits().list), "copy-to awaited, with a deadline");
    let copy_to = ClientMsg::CopyTo { addr: "10.77.2.1:5201".into(), token: 7, base: 4 };
    let a = s.handle(msg(copy_to), 10 * MS);
    let to = "10.77.2.1:5201".parse().expect("addr");
    assert_eq!(a, vec![Action::Do(Task::SendTo { to, token: 7, base: 4 })]);
    s
}

/// Asks for a lease at `now` with `len` in the queue: the blocks acknowledged taken first, then asked for.
fn ask(s: &mut Source, len: u64, done: Vec<CopyNeed>, now: Nanos) -> u32 {
    assert_eq!(s.handle(ev(Event::Queue { len }), now), vec![Action::Do(Task::TakeAcked)]);
    assert!(!s.wants_msg(), "no lease asked before the acknowledged blocks are taken");
    match &s.handle(ev(Event::Acked { done: done.clone() }), now)[..] {
        [Action::Send(AgentMsg::CopyLease { done: d, want })] if *d == done => *want,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_source_asks_for_three_blocks_a_stream_when_its_queue_runs_low_and_one_lease_at_a_time() {
    let mut s = sending();
    assert!(!s.wants_msg(), "nothing asked yet: the client is not read");
    assert_eq!(ask(&mut s, 0, Vec::new(), 20 * MS), 12);
    assert!(s.wants_msg() && s.deadline() == Some(20 * MS + waits().list));
    // a second tick while the lease is out asks nothing
    assert_eq!(s.handle(ev(Event::Queue { len: 0 }), 40 * MS), vec![]);
    let a = s.handle(msg(ClientMsg::CopyLeased { blocks: blocks(0, 0, 8), last: false }), 60 * MS);
    assert_eq!(a, vec![Action::Do(Task::Feed { blocks: blocks(0, 0, 8), last: false })]);
    assert!(!s.wants_msg() && s.deadline().is_none());
    // a queue of at least one block a stream asks nothing until the report is due
    assert_eq!(s.handle(ev(Event::Queue { len: 4 }), 80 * MS), vec![]);
    assert_eq!(s.handle(ev(Event::Queue { len: 8 }), 60 * MS + REPORT_EVERY - 1), vec![]);
    // then it reports the blocks acknowledged, asking for none
    assert_eq!(ask(&mut s, 8, blocks(0, 0, 2), 60 * MS + REPORT_EVERY), 0);
    // below one a stream: up to three a stream again
    let a = s.handle(msg(ClientMsg::CopyLeased { blocks: Vec::new(), last: false }), 700 * MS);
    assert_eq!(a, vec![Action::Do(Task::Feed { blocks: Vec::new(), last: false })]);
    assert_eq!(ask(&mut s, 3, blocks(0, 2, 5), 720 * MS), 9);
}

#[test]
fn an_empty_lease_waits_before_asking_again_and_the_last_ends_the_asking() {
    let mut s = sending();
    assert_eq!(ask(&mut s, 0, Vec::new(), 20 * MS), 12);
    // the other pairs hold what is left
    let a = s.handle(msg(ClientMsg::CopyLeased { blocks: Vec::new(), last: false }), 30 * MS);
    assert_eq!(a, vec![Action::Do(Task::Feed { blocks: Vec::new(), last: false })]);
    assert_eq!(s.handle(ev(Event::Queue { len: 0 }), 30 * MS + EMPTY_AGAIN - 1), vec![]);
    assert_eq!(ask(&mut s, 0, Vec::new(), 30 * MS + EMPTY_AGAIN), 12);
    let a = s.handle(msg(ClientMsg::CopyLeased { blocks: blocks(0, 6, 8), last: true }), 300 * MS);
    assert_eq!(a, vec![Action::Do(Task::Feed { blocks: blocks(0, 6, 8), last: true })]);
    // nothing is asked after the last, however long the pool takes
    for t in 1..20 {
        assert_eq!(s.handle(ev(Event::Queue { len: 0 }), 300 * MS + t * REPORT_EVERY), vec![]);
    }
    assert!(!s.wants_msg() && s.deadline().is_none(), "the client is not read while the pool ends");
    // what the pool did is told as it happens; its end, then the client's finish and the report
    let event = crate::model::CopyEvent {
        t_s: 1.0,
        kind: "restart".into(),
        stream: Some(1),
        new_stream: Some(4),
        why: "slow".into(),
    };
    let a = s.handle(ev(Event::Noted { event: event.clone() }), 11_000 * MS);
    assert_eq!(a, vec![Action::Send(AgentMsg::CopyEvent { event })]);
    let sent = Event::Sent { changed: Vec::new(), streams: Vec::new(), events: Vec::new(), tail_blocks: 0 };
    let a = s.handle(ev(sent), 12_000 * MS);
    assert!(matches!(&a[..], [Action::Send(AgentMsg::CopySent { .. })]), "{a:?}");
    assert!(s.wants_msg());
    let a = s.handle(msg(ClientMsg::Finish), 12_400 * MS);
    assert_eq!(a, vec![Action::Send(AgentMsg::Report { agent: EndInfo::default() }), Action::Done]);
}

fn refused(a: &[AgentAction], code: ErrorCode, words: &str) {
    match a {
        [Action::Send(AgentMsg::Error { code: c, message }), Action::Fail(Failure::Net(_))]
            if *c == code && message.contains(words) => {}
        other => panic!("not refused with {code:?} {words:?}: {other:?}"),
    }
}

#[test]
fn a_source_refuses_what_the_client_should_not_say_and_waits_for_no_one_forever() {
    // a lease beyond the file's 8 blocks, or of a file not listed
    for bad in [blocks(0, 6, 9), blocks(1, 0, 1), blocks(0, 3, 3)] {
        let mut s = sending();
        ask(&mut s, 0, Vec::new(), 20 * MS);
        let a = s.handle(msg(ClientMsg::CopyLeased { blocks: bad.clone(), last: false }), 30 * MS);
        refused(&a, ErrorCode::BadMessage, "beyond its files");
        assert!(!s.wants_msg() && s.deadline().is_none(), "over after {bad:?}");
    }
    // a lease not asked for
    let mut s = sending();
    let a = s.handle(msg(ClientMsg::CopyLeased { blocks: blocks(0, 0, 1), last: false }), 30 * MS);
    refused(&a, ErrorCode::BadMessage, "not asked for");
    // the client quiet past the deadline while a lease is out
    let mut s = sending();
    ask(&mut s, 0, Vec::new(), 20 * MS);
    refused(&s.handle(Input::Deadline, 20 * MS + waits().list), ErrorCode::Timeout, "copy-leased");
    // no copy-to in time; a copy-to that is no address, or numbers beyond any pool
    let mut s = Source::new(1, 1 << 20, 4, EndInfo::default(), waits(), 0);
    s.handle(msg(ClientMsg::CopyFiles { files: vec![file("a.dat", 0)] }), MS);
    s.handle(ev(Event::Expanded { files: vec![file("a.dat", 1)], skipped: Vec::new() }), 2 * MS);
    refused(&s.handle(Input::Deadline, 2 * MS + waits().list), ErrorCode::Timeout, "copy-to");
    for (addr, base) in [("nowhere", 0), ("10.77.2.1:5201", MAX_COPY_CONNECTIONS)] {
        let mut s = Source::new(1, 1 << 20, 4, EndInfo::default(), waits(), 0);
        s.handle(msg(ClientMsg::CopyFiles { files: vec![file("a.dat", 0)] }), MS);
        s.handle(ev(Event::Expanded { files: vec![file("a.dat", 1)], skipped: Vec::new() }), 2 * MS);
        let a = s.handle(msg(ClientMsg::CopyTo { addr: addr.into(), token: 1, base }), 3 * MS);
        refused(&a, ErrorCode::BadMessage, "copy-to");
    }
    // the client's abort ends it with nothing said back; the pool's stop is told
    let mut s = sending();
    let a = s.handle(msg(ClientMsg::Abort { reason: "user".into() }), 30 * MS);
    assert!(matches!(&a[..], [Action::Fail(Failure::Net(w))] if w.contains("client aborted: user")), "{a:?}");
    let mut s = sending();
    let a = s.handle(ev(Event::Stopped { why: "every stream failed".into() }), 30 * MS);
    refused(&a, ErrorCode::Internal, "the copy stopped: every stream failed");
}

/// A source and the client's [`Leases`] against each other in virtual time,
/// in steps of 1 ms: each frame takes `latency` one way; the source's pool
/// sends `rate` blocks a second from its queue, each acknowledged at once;
/// the driver tells the source its queue every 20 ms. What came of it.
struct Run {
    /// When copy-sent reached the client, ns.
    end: Nanos,
    /// Time the queue was empty while blocks were still to lease, ns.
    dry: Nanos,
    /// The most leases asked and not yet answered at once.
    most_out: u32,
    sent: super::super::SourceSent,
}

/// The source's world in [`lease_run`]: its frames on their way, its
/// pool's queue and the blocks acknowledged, whether the last lease came.
#[derive(Default)]
struct AgentSide {
    latency: Nanos,
    to_client: Vec<(Nanos, AgentMsg)>,
    queue: std::collections::VecDeque<u64>,
    acked: Vec<(u32, u64)>,
    fed_all: bool,
}

impl AgentSide {
    /// The source's actions: frames out, the queue fed, the acknowledged blocks taken.
    fn act(&mut self, acts: Vec<AgentAction>, s: &mut Source, t: Nanos) {
        let mut acts: std::collections::VecDeque<_> = acts.into();
        while let Some(a) = acts.pop_front() {
            match a {
                Action::Send(m) => self.to_client.push((t + self.latency, m)),
                Action::Do(Task::TakeAcked) => {
                    let done = CopyNeed::of_blocks(std::mem::take(&mut self.acked));
                    acts.extend(s.handle(Input::Event(Event::Acked { done }), t));
                }
                Action::Do(Task::Feed { blocks, last }) => {
                    self.queue.extend(blocks.iter().flat_map(|n| n.ranges.iter().flat_map(|&(a, b)| a..b)));
                    self.fed_all |= last;
                }
                other => panic!("the source at {t}: {other:?}"),
            }
        }
    }
}

fn lease_run(total: u64, rate: f64, latency: Nanos, streams: u32) -> Run {
    use super::super::Leases;
    let block = 1u64 << 20;
    let infos = vec![file("a.dat", total * block)];
    let mut s = Source::new(1, block, streams, EndInfo::default(), waits(), 0);
    s.handle(msg(ClientMsg::CopyFiles { files: vec![file("a.dat", 0)] }), 0);
    s.handle(ev(Event::Expanded { files: infos, skipped: Vec::new() }), 0);
    s.handle(msg(ClientMsg::CopyTo { addr: "10.77.2.1:5201".into(), token: 1, base: 0 }), 0);
    let within = waits().control + waits().list;
    let mut c = Leases::new(within, 0);
    let mut pending: std::collections::VecDeque<u64> = (0..total).collect();
    let mut to_agent: Vec<(Nanos, ClientMsg)> = Vec::new();
    let mut w = AgentSide { latency, ..AgentSide::default() };
    let (mut credit, mut dry, mut out, mut most_out) = (0.0, 0, 0u32, 0u32);
    let mut t: Nanos = 0;
    let (mut done, mut pool_ended) = (false, false);
    while !done {
        assert!(t < 600_000 * MS, "no end in 600 s of virtual time");
        // the frames due
        let (due, later): (Vec<_>, Vec<_>) = to_agent.drain(..).partition(|(at, _)| *at <= t);
        to_agent = later;
        for (_, m) in due {
            if matches!(m, ClientMsg::CopyLeased { .. }) {
                out -= 1;
            }
            let acts = s.handle(Input::Msg(m), t);
            w.act(acts, &mut s, t);
        }
        let (due, later): (Vec<_>, Vec<_>) = w.to_client.drain(..).partition(|(at, _)| *at <= t);
        w.to_client = later;
        for (_, m) in due {
            let mut acts: std::collections::VecDeque<_> = c.handle(Input::Msg(m), t).into();
            while let Some(a) = acts.pop_front() {
                match a {
                    Action::Do(Task::Lease { want, .. }) => {
                        let give: Vec<(u32, u64)> =
                            (0..want.min(4096)).map_while(|_| pending.pop_front()).map(|i| (0, i)).collect();
                        let last = pending.is_empty();
                        let blocks = CopyNeed::of_blocks(give);
                        acts.extend(c.handle(Input::Event(Event::Leased { blocks, last }), t));
                    }
                    Action::Send(m) => to_agent.push((t + latency, m)),
                    Action::Do(Task::Note { .. }) => {}
                    Action::Done => done = true,
                    other => panic!("the client at {t}: {other:?}"),
                }
            }
        }
        // the pool
        credit = (credit + rate / 1000.0).min(if w.queue.is_empty() { 1.0 } else { f64::MAX });
        while credit >= 1.0 {
            let Some(i) = w.queue.pop_front() else { break };
            w.acked.push((0, i));
            credit -= 1.0;
        }
        if w.queue.is_empty() && !pending.is_empty() {
            dry += MS;
        }
        if pool_ended {
        } else if w.fed_all && w.queue.is_empty() && !s.wants_msg() && t % (20 * MS) == 0 {
            let sent = Event::Sent { changed: Vec::new(), streams: Vec::new(), events: Vec::new(), tail_blocks: 0 };
            let acts = s.handle(Input::Event(sent), t);
            w.act(acts, &mut s, t);
            pool_ended = true;
        } else if t % (20 * MS) == 0 {
            let len = w.queue.len() as u64;
            let acts = s.handle(Input::Event(Event::Queue { len }), t);
            let asked = acts.len();
            w.act(acts, &mut s, t);
            if asked > 0 {
                out += 1;
                most_out = most_out.max(out);
            }
        }
        t += MS;
    }
    Run { end: t, dry, most_out, sent: c.take_sent().expect("copy-sent") }
}

#[test]
fn leases_keep_a_long_paths_pool_fed_one_lease_at_a_time() {
    // 1 Gbit/s in 1 MiB blocks (119 a second), 4 streams: 20 s of sending
    let (total, rate) = (2400, 119.0);
    let ideal = total as f64 / rate * 1e9;
    for latency in [MS / 10, 10 * MS, 200 * MS] {
        let r = lease_run(total, rate, latency, 4);
        eprintln!(
            "{:.1} ms one way: done at {:.2} s, {:.2} s of it dry, against {:.2} s at the pool's rate",
            latency as f64 / 1e6,
            r.end as f64 / 1e9,
            r.dry as f64 / 1e9,
            ideal / 1e9
        );
        assert_eq!(r.most_out, 1, "one lease at a time");
        assert_eq!(r.sent, super::super::SourceSent::default());
        // the pool waits for leases only while the lease size grows to a
        // round trip's blocks: at most a few round trips of the 20 s
        let slack = 8.0 * 2.0 * latency as f64 + 200.0 * MS as f64;
        assert!(
            (r.end as f64) < ideal + slack,
            "{} ms one way: done at {:.2} s, {:.2} s of it dry, against {:.2} s at the pool's rate",
            latency / MS,
            r.end as f64 / 1e9,
            r.dry as f64 / 1e9,
            ideal / 1e9
        );
    }
}
