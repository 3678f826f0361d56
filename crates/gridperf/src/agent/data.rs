//! The one loop that takes a test's data connections. A connection counts
//! only when it comes from the client's address and opens with a hello
//! that carries the test's token and a kind the test expects; anything
//! else is closed unread. While it waits, the loop watches the control
//! connection too: a client that hangs up after `ready` frees its slot at
//! once instead of holding it until the deadline.

use super::reply::{send_error, Fail};
use crate::ctl;
use crate::datapath::read_hello;
use gridperf_core::wire::{AgentMsg, ClientMsg, DataHello, ErrorCode};
use socket2::{Domain, Socket, Type};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A data connection taken, with its hello.
pub type Conn = (DataHello, TcpStream);

/// How long a new data connection has to send its hello: past a lost
/// hello's retransmission. A connection whose SYN (or SYN-ACK) had to be
/// sent again has no round-trip sample, and Linux then sets its
/// retransmission timeout to 3 s (RFC 6298, 5.7): a hello lost after that
/// came 3 s and a round trip late, and 2 s dropped the connection while the
/// client took it as open (CI: a pull across a path losing 2% failed
/// with "the client opened 5 of 6 data connections within 10 s").
pub const HELLO_WITHIN: Duration = Duration::from_secs(5);

/// A test's TCP data listener on the control connection's local address,
/// with SO_SNDBUF / SO_RCVBUF set before it accepts (an accepted socket
/// inherits them, and the window scale of its SYN follows from them).
pub fn listener(local: IpAddr, sndbuf: Option<u64>, rcvbuf: Option<u64>, backlog: i32) -> std::io::Result<TcpListener> {
    let addr = SocketAddr::new(local, 0);
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    if let Some(b) = sndbuf {
        gridperf_sys::set_sndbuf(&sock, b as usize)?;
    }
    if let Some(b) = rcvbuf {
        gridperf_sys::set_rcvbuf(&sock, b as usize)?;
    }
    sock.bind(&addr.into())?;
    sock.listen(backlog)?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}

/// Accepts one pending connection and reads its hello: Some when it is the
/// client's (from one of `peers`, with the token, of a kind `fits` takes).
pub fn accept_one(
    l: &TcpListener,
    peers: &[IpAddr],
    token: u64,
    fits: &mut dyn FnMut(&DataHello) -> bool,
) -> Option<Conn> {
    let (mut s, from) = l.accept().ok()?;
    if !peers.contains(&from.ip().to_canonical()) {
        return None;
    }
    let hello = read_hello(&mut s, HELLO_WITHIN)?;
    (hello.token == token && fits(&hello)).then_some((hello, s))
}

/// What the client did on the control connection while the agent waited.
pub enum Control {
    /// It hung up (or its connection failed).
    Gone,
    /// A message waits to be read (the caller decides what it means).
    Speaks,
}

/// Whether the client has hung up or spoken, without reading its message.
pub fn control_state(ctl: &TcpStream) -> Option<Control> {
    let ready = gridperf_sys::poll_readable(&[ctl.as_raw_fd()], 0).map(|r| r[0]).unwrap_or(true);
    if !ready {
        return None;
    }
    Some(match ctl.peek(&mut [0u8; 1]) {
        Ok(0) | Err(_) => Control::Gone,
        Ok(_) => Control::Speaks,
    })
}

/// The client's message when it speaks out of turn: an abort is its
/// reason, anything else a bad message.
pub fn out_of_turn(ctl: &mut TcpStream, within: Duration, during: &str) -> Fail {
    match ctl::read_msg_by::<ClientMsg>(ctl, Instant::now() + within) {
        Ok(ClientMsg::Abort { reason }) => Fail::Told(format!("client aborted: {reason}")),
        Ok(other) => send_error(ctl, ErrorCode::BadMessage, format!("unexpected {other:?} {during}")),
        Err(e) => Fail::Told(format!("the client went away {during}: {e}")),
    }
}

/// Accepts the client's data connections until `want` of them fit, within
/// `until`. A client may send its first control message before the agent
/// has taken every connection (an echo test's first step): with
/// `early_control`, a message on the control connection stops the watch
/// and waits for the loop's caller; without, it is out of turn.
#[allow(clippy::too_many_arguments)]
pub fn accept_all(
    l: &TcpListener,
    ctl: &mut TcpStream,
    peers: &[IpAddr],
    token: u64,
    want: usize,
    until: Instant,
    stop: &AtomicBool,
    early_control: bool,
    fits: &mut dyn FnMut(&DataHello, &[Conn]) -> bool,
) -> Result<Vec<Conn>, Fail> {
    let mut got: Vec<Conn> = Vec::new();
    let mut watch_control = true;
    let within = until.saturating_duration_since(Instant::now());
    while got.len() < want {
        if stop.load(Ordering::Relaxed) {
            return Err(send_error(ctl, ErrorCode::Busy, "the agent is shutting down".into()));
        }
        if Instant::now() >= until {
            return Err(Fail::Untold(format!(
                "the client opened {} of {want} data connections within {:.0} s",
                got.len(),
                within.as_secs_f64()
            )));
        }
        // a client that spoke early (its message waits unread) and then
        // left: seen at once, not at the deadline
        if !watch_control && gridperf_sys::peer_closed(ctl.as_raw_fd()) {
            return Err(Fail::Told("the client left before opening its data connections".into()));
        }
        let fds = [l.as_raw_fd(), ctl.as_raw_fd()];
        let ready =
            gridperf_sys::poll_readable(&fds[..if watch_control { 2 } else { 1 }], 100).map_err(|e| e.to_string())?;
        if ready.get(1) == Some(&true) {
            match control_state(ctl) {
                Some(Control::Gone) => {
                    return Err(Fail::Told("the client left before opening its data connections".into()))
                }
                Some(Control::Speaks) if early_control => watch_control = false,
                Some(Control::Speaks) => return Err(out_of_turn(ctl, within, "before the data connections")),
                None => {}
            }
        }
        if !ready[0] {
            continue;
        }
        let mut take = |h: &DataHello| fits(h, &got);
        if let Some(c) = accept_one(l, peers, token, &mut take) {
            got.push(c);
        }
    }
    Ok(got)
}

/// Tells the client the data sockets are open.
pub fn ready(
    ctl: &mut TcpStream,
    tcp: Option<&TcpListener>,
    udp_ports: Vec<u16>,
    token: u64,
    agent: gridperf_core::model::EndInfo,
) -> Result<(), Fail> {
    gridperf_core::wire::write_msg(
        ctl,
        &AgentMsg::Ready { tcp_port: tcp.and_then(|l| l.local_addr().ok()).map(|a| a.port()), udp_ports, token, agent },
    )
    .map_err(|e| Fail::Untold(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gridperf_core::wire::{DataHello, DataKind};
    use std::io::Write;

    /// A hello that comes after a lost one's retransmission (3 s on a
    /// connection whose SYN was sent again) is taken, the connection kept.
    #[test]
    fn a_hello_retransmitted_three_seconds_late_is_taken() {
        let l = TcpListener::bind("127.0.0.1:0").expect("listen");
        let at = l.local_addr().expect("addr");
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(at).expect("connect");
            std::thread::sleep(Duration::from_millis(3_200));
            s.write_all(&DataHello::new(7, DataKind::Copy, 2).encode()).expect("hello");
            s
        });
        let got = accept_one(&l, &[at.ip()], 7, &mut |h| h.kind == DataKind::Copy);
        let _s = client.join().expect("client");
        let (hello, _) = got.expect("the late hello's connection");
        assert_eq!(hello.index, 2);
    }
}
