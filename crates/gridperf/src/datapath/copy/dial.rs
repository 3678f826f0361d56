//! Opening a data connection, and what is set on it.

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Duration;

/// How a sending end opens its data connections: the copy's buffers,
/// congestion control and pacing, set before it connects.
#[derive(Debug, Clone, Default)]
pub struct Dial {
    pub window: Option<u64>,
    pub congestion: Option<String>,
    pub pacing_bps: Option<u64>,
    pub within: Duration,
    /// The local address to send from (a third-party source: the one its client reached it at).
    pub bind: Option<std::net::IpAddr>,
    /// A third-party source: wait for the destination agent to greet the
    /// connection with its token before sending anything.
    pub welcome: bool,
}

/// What went wrong opening a data connection: the congestion control
/// asked for (the user's to fix), or the connection.
pub enum DialError {
    Congestion(String, io::Error),
    Net(String),
}

impl std::fmt::Display for DialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DialError::Congestion(cc, e) => write!(f, "-C {cc}: {e}"),
            DialError::Net(m) => f.write_str(m),
        }
    }
}

/// Opens data connection `k` of a copy to `at`, with its hello (`token`).
pub fn dial(at: std::net::SocketAddr, token: u64, k: u32, d: &Dial) -> Result<TcpStream, DialError> {
    let net = |e: io::Error| DialError::Net(e.to_string());
    let sock = socket2::Socket::new(socket2::Domain::for_address(at), socket2::Type::STREAM, None).map_err(net)?;
    if let Some(w) = d.window {
        gridperf_sys::set_sndbuf(&sock, w as usize).map_err(net)?;
        gridperf_sys::set_rcvbuf(&sock, w as usize).map_err(net)?;
    }
    if let Some(cc) = &d.congestion {
        gridperf_sys::set_tcp_congestion(&sock, cc).map_err(|e| DialError::Congestion(cc.clone(), e))?;
    }
    if let Some(p) = d.pacing_bps {
        gridperf_sys::set_max_pacing_rate(&sock, p / 8).map_err(net)?;
    }
    if let Some(ip) = d.bind {
        sock.bind(&std::net::SocketAddr::new(ip, 0).into()).map_err(net)?;
    }
    sock.connect_timeout(&at.into(), d.within)
        .map_err(|e| DialError::Net(format!("data connection {k} to {at}: {e}")))?;
    let mut s: TcpStream = sock.into();
    no_delay(&s);
    let hello = gridperf_core::wire::DataHello::new(token, gridperf_core::wire::DataKind::Copy, k);
    crate::datapath::write_hello(&mut s, &hello).map_err(net)?;
    if d.welcome {
        let mut got = [0u8; 8];
        s.set_read_timeout(Some(d.within)).map_err(net)?;
        s.read_exact(&mut got)
            .map_err(|e| DialError::Net(format!("data connection {k} to {at}: no agent's greeting: {e}")))?;
        if u64::from_be_bytes(got) != token {
            return Err(DialError::Net(format!("data connection {k} to {at}: not the agent the client named")));
        }
    }
    Ok(s)
}

/// A copy's data connection sends what it is given at once: with Nagle a
/// block's last partial segment waited behind the 13-byte hello until it
/// was acknowledged, a round trip for every small file's first block, and a
/// 16-byte acknowledgment behind the one before it. A block is written with
/// its header queued ahead of it, so bulk segments stay full.
pub fn no_delay(s: &TcpStream) {
    let _ = s.set_nodelay(true);
}

/// Writes a block's header with MSG_MORE: it leaves with the block's first
/// bytes, not in a packet of its own (the connection has no Nagle).
pub(super) fn write_ahead(sock: &TcpStream, mut head: &[u8]) -> io::Result<()> {
    let s = socket2::SockRef::from(sock);
    while !head.is_empty() {
        match s.send_with_flags(head, libc::MSG_MORE | libc::MSG_NOSIGNAL) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "the connection took nothing")),
            Ok(n) => head = &head[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Resets a connection at once (what its socket still holds is thrown away).
pub(super) fn reset(sock: &TcpStream) {
    let _ = socket2::SockRef::from(sock).set_linger(Some(Duration::ZERO));
    let _ = sock.shutdown(std::net::Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use gridperf_core::wire::block::FRAME_HEADER;
    use std::io::Read;
    use std::io::Write;

    #[test]
    fn a_blocks_header_waits_for_its_bytes_and_leaves_with_them() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let tx = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (mut rx, _) = l.accept().expect("accept");
        no_delay(&tx);
        rx.set_nonblocking(true).expect("nonblocking");
        let mut got = [0u8; 4096];
        // without Nagle a plain write leaves at once
        (&tx).write_all(&[1u8; 52]).expect("write");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(rx.read(&mut got).expect("a plain write arrived"), 52);
        // a header written ahead waits for the block's bytes
        write_ahead(&tx, &[2u8; FRAME_HEADER]).expect("header");
        std::thread::sleep(Duration::from_millis(50));
        let held = rx.read(&mut got).map_err(|e| e.kind());
        assert_eq!(held, Err(io::ErrorKind::WouldBlock), "the header left alone");
        (&tx).write_all(&[3u8; 1000]).expect("block");
        rx.set_nonblocking(false).expect("blocking");
        rx.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
        let mut all = Vec::new();
        while all.len() < FRAME_HEADER + 1000 {
            let n = rx.read(&mut got).expect("the header and the block");
            all.extend_from_slice(&got[..n]);
        }
        assert!(all[..FRAME_HEADER].iter().all(|&b| b == 2) && all[FRAME_HEADER..].iter().all(|&b| b == 3));
    }
}
