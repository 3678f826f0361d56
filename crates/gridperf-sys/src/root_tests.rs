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
