//! One client's conversation up to its test: hello and version, the typed
//! request and its checks, a slot, then the test's own file. Every read
//! has the control deadline; every refusal is told to the client with what
//! is valid.

use super::metrics::Refusal;
use super::reply::{send_error, wire_code, Fail};
use super::{copy, echo, fanout, slots, stream, Shared};
use crate::{ctl, host};
use gridperf_core::auth;
use gridperf_core::wire::{self, AgentMsg, ClientMsg, ErrorCode, Test, TestRequest};
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// The longest a client may take from connecting to its request (its
/// hello and key included), whatever `serve --control-timeout` says: a
/// connection that has not asked for its test is one a silent client may
/// hold.
pub(crate) const PRE_SESSION: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads the request. A request frame this agent cannot decode (a test
/// kind or a protocol it does not know, a field it needs missing) is
/// "unsupported", with serde's words for what was expected; anything else
/// out of turn is a bad message.
fn read_request(ctl: &mut TcpStream, until: Instant) -> Result<TestRequest, Fail> {
    let body = match ctl::read_frame_by::<ClientMsg>(ctl, until) {
        Ok(b) => b,
        Err(e) => return Err(send_error(ctl, wire_code(&e), format!("reading the request: {e}"))),
    };
    match wire::decode::<ClientMsg>(&body) {
        Ok(ClientMsg::Request(r)) => Ok(r),
        Ok(other) => Err(send_error(ctl, ErrorCode::BadMessage, format!("expected a request, got {other:?}"))),
        Err(e) => {
            let is_request = serde_json::from_slice::<serde_json::Value>(&body)
                .is_ok_and(|v| v.get("type").and_then(|t| t.as_str()) == Some("request"));
            let code = if is_request { ErrorCode::Unsupported } else { ErrorCode::BadMessage };
            let what = if is_request { "this agent cannot run the test asked for" } else { "expected a request" };
            Err(send_error(ctl, code, format!("{what}: {e}")))
        }
    }
}

/// Checks a client's answer to the challenge before anything else is
/// spent on it; answers with the agent's own proof. The session's secret
/// (which binds a copy's encryption to it).
fn authenticate(
    ctl: &mut TcpStream,
    keys: &[auth::Key],
    nonce: &[u8; auth::KEY_LEN],
    until: Instant,
) -> Result<[u8; auth::KEY_LEN], Fail> {
    let refused = |ctl: &mut TcpStream, why: String| send_error(ctl, ErrorCode::Refused, why);
    match ctl::read_msg_by::<ClientMsg>(ctl, until) {
        Ok(ClientMsg::Auth { key, nonce: theirs, proof }) => {
            let found = keys.iter().find(|k| k.name == key);
            let theirs = auth::unhex(&theirs);
            match (found, theirs) {
                (Some(k), Some(cn)) if k.client_proves(nonce, &cn, &proof) => {
                    wire::write_msg(ctl, &AgentMsg::AuthOk { proof: k.agent_proof(nonce, &cn) })
                        .map_err(|e| e.to_string())?;
                    Ok(k.session_secret(nonce, &cn))
                }
                // one answer for an unknown name and a wrong proof: nothing learnt
                _ => Err(refused(
                    ctl,
                    format!("authentication failed for key {:?}: not a key this agent accepts, or not its secret", wire::printable(&key)),
                )),
            }
        }
        Ok(ClientMsg::Hello { .. } | ClientMsg::Request(_)) | Ok(_) => Err(refused(
            ctl,
            "this agent serves only clients with a key (serve --auth): give the client --key FILE (gridperf keygen makes one)".into(),
        )),
        Err(e) => Err(send_error(ctl, wire_code(&e), format!("waiting for the key: {e}"))),
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
    let until = Instant::now() + shared.cfg.control_timeout.min(PRE_SESSION);

    match ctl::read_msg_by::<ClientMsg>(&ctl, until) {
        Ok(ClientMsg::Hello { magic, version, software }) => {
            if magic != wire::MAGIC {
                return Err(send_error(&mut ctl, ErrorCode::BadMessage, format!("bad magic {magic:?}")));
            }
            if version != wire::PROTOCOL_VERSION {
                shared.metrics.refused(Refusal::Version);
                return Err(send_error(
                    &mut ctl,
                    ErrorCode::VersionMismatch,
                    format!(
                        "protocol version mismatch: the client ({software}) speaks version {version}, this agent ({}) speaks version {}; run the same gridperf release on both ends",
                        host::software(),
                        wire::PROTOCOL_VERSION
                    ),
                ));
            }
        }
        Ok(other) => {
            return Err(send_error(&mut ctl, ErrorCode::BadMessage, format!("expected hello, got {other:?}")));
        }
        Err(e) => return Err(send_error(&mut ctl, wire_code(&e), format!("before hello: {e}"))),
    }
    let nonce = match &shared.cfg.auth {
        Some(_) => Some(host::random_32().map_err(|e| format!("no random nonce: {e}"))?),
        None => None,
    };
    wire::write_msg(
        &mut ctl,
        &AgentMsg::Welcome {
            magic: wire::MAGIC.into(),
            version: wire::PROTOCOL_VERSION,
            software: host::software(),
            challenge: nonce.map(|n| auth::hex(&n)),
        },
    )
    .map_err(|e| e.to_string())?;
    let mut session_secret = None;
    let counted = |why: Refusal| {
        move |f: Fail| {
            shared.metrics.refused(why);
            f
        }
    };
    if let (Some(keys), Some(nonce)) = (&shared.cfg.auth, nonce) {
        match authenticate(&mut ctl, keys, &nonce, until) {
            Ok(secret) => {
                shared.penalties.forgive(peer.ip());
                session_secret = Some(secret);
            }
            Err(f) => {
                // the address waits before its next try: failing costs it, not the agent
                shared.penalties.fail(peer.ip(), Instant::now());
                return Err(counted(Refusal::Auth)(f));
            }
        }
    }

    let req = read_request(&mut ctl, until).map_err(counted(Refusal::BadRequest))?;
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
    let _slot = slots::take(shared, &mut ctl, req.queue_ms).map_err(counted(Refusal::Busy))?;
    shared.log.line(&format!("gridperf serve: {peer}: {}", req.test.describe()));
    let (kind, began) = (req.test.kind_name(), Instant::now());
    shared.metrics.begin();
    let result = match &req.test {
        Test::Rtt(spec) | Test::Transfer(spec) => echo::run(shared, &mut ctl, peer, spec),
        Test::Stream(spec) => stream::run(shared, &mut ctl, peer, spec),
        Test::Fanout(spec) => fanout::run(shared, &mut ctl, peer, spec),
        Test::Copy(spec) => copy::run(shared, &mut ctl, peer, spec, session_secret.as_ref()),
    };
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
