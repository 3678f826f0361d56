//! The agent as a fanout consumer (`gridperf fanout --agents`): every data
//! connection the client opens gets a thread that echoes the requests,
//! blocking, as the document's clients do, until the client says Finish.
//! What is said when, and the client's silence deadline, are
//! [`gridperf_core::proto::measure::Fanout`]'s; this driver polls the
//! control connection and the data listener at once.

use super::data::{self, accept_one};
use super::reply::{new_token, send_error, wire_code, Fail};
use super::Shared;
use crate::{ctl, host};
use gridperf_core::proto::measure::{Event, Fanout};
use gridperf_core::proto::{nanos, Action, Clock, End, Input};
use gridperf_core::wire::{self, ClientMsg, DataKind, ErrorCode, FanoutSpec};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::thread;
use std::time::Duration;

/// Consumer threads a fanout test may have at once.
pub const MAX_CONSUMERS: usize = 64;

/// Serves a fanout point's consumers for a client whose request was checked.
pub(super) fn run(shared: &Shared, ctl: &mut TcpStream, peer: SocketAddr, f: &FanoutSpec) -> Result<(), Fail> {
    let local_ip = ctl.local_addr().map_err(|e| e.to_string())?.ip().to_canonical();
    let peer_ip = peer.ip().to_canonical();
    let listener = data::listener(local_ip, f.buffer, f.buffer, 128).map_err(|e| e.to_string())?;
    let token = new_token(peer);
    data::ready(ctl, Some(&listener), Vec::new(), token, host::end_info(None, false))?;
    // what the client asked for, at most what the agent allows (serve --max-idle)
    let idle = Duration::from_millis(f.idle_ms.max(100)).min(shared.cfg.max_idle);
    let mut consumers = Consumers(Vec::new());
    // until finish: take the client's data connections, a consumer for
    // each; what is said when is the machine's (proto::measure::Fanout)
    let clock = Clock::start();
    let quiet = nanos(shared.cfg.control_timeout + idle);
    let mut m = Fanout::new(quiet, host::end_info(None, false), clock.now());
    loop {
        if shared.stopping() {
            return Err(send_error(ctl, ErrorCode::Busy, "the agent is shutting down".into()));
        }
        consumers.0.retain(|(_, h)| !h.is_finished());
        let acts = if m.deadline().is_some_and(|d| clock.now() >= d) {
            m.handle(Input::Deadline, clock.now())
        } else {
            let fds = [listener.as_raw_fd(), ctl.as_raw_fd()];
            let ready = gridperf_sys::poll_readable(&fds, 100).map_err(|e| e.to_string())?;
            if ready[1] {
                match ctl::read_msg_within::<ClientMsg>(ctl, shared.cfg.control_timeout) {
                    Ok(msg) => m.handle(Input::Msg(msg), clock.now()),
                    Err(e) => return Err(send_error(ctl, wire_code(&e), format!("during the fanout test: {e}"))),
                }
            } else if ready[0] && consume(&listener, peer_ip, token, f, idle, &mut consumers) {
                m.handle(Input::Event(Event::Accepted), clock.now())
            } else {
                Vec::new()
            }
        };
        for a in acts {
            match a {
                Action::Send(msg) => wire::write_msg(ctl, &msg).map_err(|e| e.to_string())?,
                Action::Done => return Ok(()),
                Action::Fail(f) => return Err(Fail::Told(f.to_string())),
                Action::Do(t) => return Err(Fail::Untold(format!("internal: a fanout test has no task {t:?}"))),
            }
        }
    }
}

/// Takes one data connection of the client's, if one is there, and gives
/// it a consumer: whether one was taken.
fn consume(
    listener: &std::net::TcpListener,
    peer_ip: std::net::IpAddr,
    token: u64,
    f: &FanoutSpec,
    idle: Duration,
    consumers: &mut Consumers,
) -> bool {
    let Some((_, mut s)) = accept_one(listener, &[peer_ip], token, &mut |h| h.kind == DataKind::Fanout) else {
        return false;
    };
    if consumers.0.len() >= MAX_CONSUMERS {
        // closed: the client's point fails and says so
        return false;
    }
    let f = f.clone();
    let Ok(handle) = s.try_clone() else { return false };
    consumers.0.push((
        handle,
        thread::spawn(move || {
            let _ = s.set_nodelay(f.nodelay);
            let _ = s.set_read_timeout(Some(idle));
            let _ = s.set_write_timeout(Some(idle));
            let mut buf = vec![0u8; f.size as usize];
            for _ in 0..f.messages {
                if s.read_exact(&mut buf).is_err() || s.write_all(&buf).is_err() {
                    return;
                }
            }
            // the client closes when its repetition is done
            let _ = s.read(&mut buf);
        }),
    ));
    true
}

/// The consumers of a fanout test: when the test ends, on any path, their
/// connections are shut and their threads joined (a consumer blocked in a
/// read would otherwise hold its thread and buffer for its idle time, up to
/// ten minutes: 16 of them per test took the agent from 262 to 775 MB).
struct Consumers(Vec<(TcpStream, thread::JoinHandle<()>)>);

impl Drop for Consumers {
    fn drop(&mut self) {
        for (s, _) in &self.0 {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for (_, h) in self.0.drain(..) {
            let _ = h.join();
        }
    }
}
