//! Need root: ignored unless asked for (`--ignored`, as root); .ci/run runs them.
use super::*;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
#[ignore = "needs root, for a named network namespace: .ci/run runs it with --ignored"]
fn named_namespace_with_a_tun_device() {
    assert!(is_root(), "needs root");
    let name = format!("gpsys-test-{}", std::process::id());
    netns_create(&name).expect("create");
    assert!(netns_exists(&name));
    assert!(netns_create(&name).is_err(), "a name is taken once");
    let tun = in_netns(&name, || {
        let fd = tun_create("gp0", true)?;
        set_link_mtu("gp0", 1500)?;
        set_link_ipv4("gp0", std::net::Ipv4Addr::new(10, 77, 0, 1), 24)?;
        set_link_up("gp0")?;
        set_link_up("lo")?;
        assert_eq!(link_mtu("gp0")?, 1500);
        set_link_txqueuelen("gp0", 1234)?;
        assert_eq!(link_txqueuelen("gp0")?, 1234);
        Ok(fd)
    })
    .expect("tun in the namespace");
    // the device is not in this namespace
    assert!(link_mtu("gp0").is_err());
    drop(tun);
    netns_delete(&name).expect("delete");
    assert!(!netns_exists(&name));
    assert!(netns_create("bad/name").is_err());
}

#[test]
#[ignore = "needs root, for a named network namespace: .ci/run runs it with --ignored"]
fn the_tcp_sockets_of_a_namespace_are_aborted_orphans_included() {
    use std::io::{Read, Write};
    assert!(is_root(), "needs root");
    let name = format!("gpsys-diag-{}", std::process::id());
    netns_create(&name).expect("create");
    let r = in_netns(&name, || {
        set_link_up("lo")?;
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        // a sender whose peer never reads: its data waits in its queue
        let mut kept = std::net::TcpStream::connect(l.local_addr()?)?;
        let (peer, _) = l.accept()?;
        kept.set_nonblocking(true)?;
        let chunk = vec![7u8; 1 << 16];
        let mut sent = 0usize;
        while let Ok(n) = kept.write(&chunk) {
            sent += n;
        }
        // another one closed with its data unsent: an orphan
        let mut gone = std::net::TcpStream::connect(l.local_addr()?)?;
        let (peer2, _) = l.accept()?;
        gone.set_nonblocking(true)?;
        while gone.write(&chunk).is_ok() {}
        drop(gone);
        let before = tcp_sockets()?;
        let aborted = abort_tcp_sockets()?;
        let after = tcp_sockets()?;
        let mut b = [0u8; 16];
        kept.set_nonblocking(false)?;
        let reset = kept.write(&chunk).is_err() || kept.read(&mut b).is_err();
        drop((peer, peer2, l));
        Ok((before, aborted, after, sent, reset))
    });
    netns_delete(&name).expect("delete");
    let (before, aborted, after, sent, reset) = r.expect("in the namespace");
    assert!(sent > 0);
    // kept, its peer, the orphan and its peer
    assert_eq!(before.sockets, 4, "{before:?}");
    assert_eq!(before.orphans, 1, "{before:?}");
    assert!(before.queued_bytes >= sent as u64, "{before:?}, {sent} bytes sent");
    assert_eq!(aborted, before);
    assert_eq!(after, TcpSockets::default());
    assert!(reset, "the kept socket still works after its abort");
}
