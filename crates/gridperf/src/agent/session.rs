//! One client's conversation up to its test: hello and version, the key,
//! the typed request (what is said when is `proto::session::Greeting`'s),
//! then the request's checks, a slot, then the test's own file. Every read
//! has the control deadline; every refusal is told to the client with what
//! is valid.

use super::metrics::Refusal;
use super::reply::{send_error, wire_code, Fail};
use super::{copy, echo, fanout, slots, stream, Shared};
use crate::{ctl, host};
use gridperf_core::proto::session::{Greeting, Stage};
use gridperf_core::proto::{self, Action, Clock, End, Input};
use gridperf_core::wire::{self, ClientMsg, ErrorCode, Test, TestRequest, WireError};
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// The longest a client may take from connecting to its request (its
/// hello and key included), whatever `serve --control-timeout` says: a
/// connection that has not asked for its test is one a silent client may
/// hold.
pub(crate) const PRE_SESSION: std::time::Duration = std::time::Duration::from_secs(5);

/// The opening as [`Greeting`] leads it: each frame read by the deadline
/// it keeps, its answers sent, until the request. A request frame this
/// agent cannot decode (a test kind or a protocol it does not know, a field
/// it needs missing) is "unsupported", with serde's words for what was
/// expected; any other frame that is not a message, a bad message.
fn greet(ctl: &mut TcpStream, g: &mut Greeting, clock: &Clock, until_n: proto::Nanos) -> Result<TestRequest, Fail> {
    let until = clock.at(until_n);
    loop {
        let input = match ctl::read_frame_by::<ClientMsg>(ctl, until) {
            Err(WireError::Timeout) => Input::Deadline,
            Err(e) => {
                let during = match g.stage() {
                    Stage::Hello | Stage::Version => "before hello",
                    Stage::Auth => "waiting for the key",
                    Stage::Request => "reading the request",
                };
                return Err(send_error(ctl, wire_code(&e), format!("{during}: {e}")));
            }
            Ok(body) => match wire::decode::<ClientMsg>(&body) {
                Ok(m) => Input::Msg(m),
                Err(e) if g.stage() == Stage::Request => {
                    let is_request = serde_json::from_slice::<serde_json::Value>(&body)
                        .is_ok_and(|v| v.get("type").and_then(|t| t.as_str()) == Some("request"));
                    let code = if is_request { ErrorCode::Unsupported } else { ErrorCode::BadMessage };
                    let what =
                        if is_request { "this agent cannot run the test asked for" } else { "expected a request" };
                    return Err(send_error(ctl, code, format!("{what}: {e}")));
                }
                Err(e) => return Err(send_error(ctl, ErrorCode::BadMessage, format!("{e}"))),
            },
        };
        for a in g.handle(input, clock.now()) {
            match a {
                Action::Send(m) => wire::write_msg(ctl, &m).map_err(|e| e.to_string())?,
                Action::Done => return g.take_request().ok_or_else(|| Fail::Untold("internal: no request".into())),
                Action::Fail(f) => return Err(Fail::Told(f.to_string())),
                Action::Do(()) => {}
            }
        }
    }
}

/// Serves one control connection, start to end.
pub(super) fn serve(
    shared: &Shared,
    mut ctl: TcpStream,
    peer: SocketAddr,
    admitted: &super::conns::Admitted,
) -> Result<(), Fail> {
    let setup = |ctl: &TcpStream| -> io::Result<()> {
        ctl.set_nonblocking(false)?;
        ctl.set_nodelay(true)?;
        ctl.set_write_timeout(Some(shared.cfg.control_timeout))
    };
    setup(&ctl).map_err(|e| e.to_string())?;
    // hello, the key and the request, all within one control timeout (at
    // most PRE_SESSION): until then the connection may be cut to make room
    let clock = Clock::start();
    let until_n = proto::nanos(shared.cfg.control_timeout.min(PRE_SESSION));
    let auth = match &shared.cfg.auth {
        Some(keys) => Some((keys.to_vec(), host::random_32().map_err(|e| format!("no random nonce: {e}"))?)),
        None => None,
    };
    let mut greeting = Greeting::new(host::software(), auth, until_n);
    let ended = greet(&mut ctl, &mut greeting, &clock, until_n);
    // what each refusal costs: a failed key makes the address wait before its next try
    match (&ended, greeting.stage()) {
        (Err(_), Stage::Version) => shared.metrics.refused(Refusal::Version),
        (Err(_), Stage::Auth) => {
            shared.penalties.fail(peer.ip(), Instant::now());
            shared.metrics.refused(Refusal::Auth);
        }
        (Err(_), Stage::Request) => shared.metrics.refused(Refusal::BadRequest),
        (Ok(_), _) if greeting.secret().is_some() => shared.penalties.forgive(peer.ip()),
        _ => {}
    }
    let req = ended?;
    let session_secret = greeting.secret();
    let counted = |why: Refusal| {
        move |f: Fail| {
            shared.metrics.refused(why);
            f
        }
    };
    if let Err(r) = req.test.validate(&host::limits()) {
        shared.metrics.refused(Refusal::BadRequest);
        return Err(send_error(&mut ctl, r.code, r.message));
    }
    if let Some(why) = shared.cfg.limits.refuses(&req.test) {
        shared.metrics.refused(Refusal::Limits);
        return Err(send_error(&mut ctl, ErrorCode::Refused, why));
    }
    if let Some(why) = shared.may_start(peer.ip().to_canonical()) {
        shared.metrics.refused(Refusal::Rate);
        return Err(send_error(&mut ctl, ErrorCode::Busy, why));
    }
    if let (Test::Rtt(e) | Test::Transfer(e), false) = (&req.test, shared.cfg.allow_busy_poll) {
        if e.busy_poll {
            shared.metrics.refused(Refusal::Unsupported);
            return Err(send_error(
                &mut ctl,
                ErrorCode::Unsupported,
                "busy-polling is off on this agent (it burns a CPU for the whole test): its operator may allow it \
                 with `gridperf serve --allow-busy-poll`"
                    .into(),
            ));
        }
    }
    // a client that asked for a test it may run is one: never cut to make room
    admitted.settle();
    let slot = slots::take(shared, &mut ctl, req.queue_ms).map_err(counted(Refusal::Busy))?;
    shared.log.line(&format!("gridperf serve: {peer}: {}", req.test.describe()));
    let (kind, began) = (req.test.kind_name(), Instant::now());
    shared.metrics.begin();
    let result = match &req.test {
        Test::Rtt(spec) | Test::Transfer(spec) => echo::run(shared, &mut ctl, peer, spec),
        Test::Stream(spec) => stream::run(shared, &mut ctl, peer, spec),
        Test::Fanout(spec) => fanout::run(shared, &mut ctl, peer, spec),
        Test::Copy(spec) => copy::run(shared, &mut ctl, peer, spec, session_secret.as_ref()),
    };
    // the client has its result and may ask for its next test at once: the
    // slot is free before the agent's own bookkeeping (giving the test's
    // memory back took long enough on a busy machine that `lab clone`'s next
    // probe was told "busy: 1 test running", its own)
    drop(slot);
    shared.metrics.end(peer.ip().to_canonical(), kind, result.is_ok(), began.elapsed().as_secs_f64());
    shared.tests_done.fetch_add(1, Ordering::SeqCst);
    // the test's buffers are free: back to the kernel, not kept by the allocator while the agent idles
    gridperf_sys::release_free_memory();
    match result {
        Ok(()) => Ok(()),
        Err(Fail::Untold(msg)) => {
            let code = if shared.stopping() { ErrorCode::Busy } else { ErrorCode::Internal };
            Err(send_error(&mut ctl, code, msg))
        }
        Err(told) => Err(told),
    }
}
