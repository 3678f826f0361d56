#[test]
fn steal_is_read_per_cpu_in_nanoseconds() {
    let stat = "cpu  568307 139 137772 1098996 3827 0 31994 239 0 0\n\
                cpu0 269567 69 73721 556805 910 0 20047 108 0 0\n\
                cpu1 298739 69 64051 542191 2917 0 11947 131 0 0\nintr 1 2 3\n";
    assert_eq!(parse_steal(stat, 100), vec![1_080_000_000, 1_310_000_000]);
    assert_eq!(parse_steal("cpu0 1 2 3\n", 100), vec![0], "a short line: no steal column, none counted");
    // idle: the all-CPUs line's fourth figure, not a CPU's
    assert_eq!(parse_idle(stat, 100), 10_989_960_000_000);
    assert_eq!(parse_idle("cpu0 1 2 3 4\n", 100), 0, "no all-CPUs line: none counted");
}

#[test]
fn a_threads_time_and_the_steal_are_read_here() {
    let mut p = SchedProbe::for_this_thread();
    let a = p.sample();
    let spin = std::time::Instant::now();
    while spin.elapsed() < std::time::Duration::from_millis(30) {}
    let b = p.sample();
    assert!(!b.steal_ns.is_empty(), "a steal figure per CPU");
    if let (Some(r0), Some(r1)) = (a.ran_ns, b.ran_ns) {
        assert!(r1 >= r0 + 10_000_000, "30 ms of spinning shows in the thread's run time: {r0} -> {r1}");
    }
}

use super::*;

#[test]
fn held_namespace_paths() {
    assert!(held_path("/proc/123/fd/7"));
    for bad in ["/proc/123/fd/", "/proc/self/fd/7", "/proc/1/fd/7/..", "/run/netns/x", "proc/1/fd/2", "/proc/1/ns/net"]
    {
        assert!(!held_path(bad), "{bad}");
        assert!(netns_path(bad).is_err(), "{bad}");
    }
    assert_eq!(netns_path("/proc/123/fd/7").expect("held").to_str(), Ok("/proc/123/fd/7"));
    assert!(netns_delete("/proc/123/fd/7").is_ok(), "a held namespace goes with its holder");
}

#[test]
fn each_userns_blocker_is_named() {
    let with = |file: &'static str, value: &'static str| {
        userns_blocker_from(move |p| (p.ends_with(file)).then(|| value.to_string()))
    };
    assert_eq!(with("unprivileged_userns_clone", "0"), Some(("kernel.unprivileged_userns_clone", "0".into())));
    assert_eq!(with("unprivileged_userns_clone", "1"), None);
    assert_eq!(with("max_user_namespaces", "0"), Some(("user.max_user_namespaces", "0".into())));
    assert_eq!(with("max_user_namespaces", "96365"), None);
    assert_eq!(
        with("apparmor_restrict_unprivileged_userns", "1"),
        Some(("kernel.apparmor_restrict_unprivileged_userns", "1".into()))
    );
    assert_eq!(with("apparmor_restrict_unprivileged_userns", "0"), None);
    assert_eq!(userns_blocker_from(|_| None), None, "a kernel without these files blocks nothing by them");
}

#[test]
fn outside_uid_in_the_first_namespace_is_the_uid() {
    if in_initial_userns() {
        assert_eq!(outside_uid(), euid());
    }
}

#[test]
fn memfd_holds_the_pattern() {
    let fd = memfd_pattern(70_000).expect("memfd");
    let f = std::fs::File::from(fd);
    use std::os::unix::fs::FileExt;
    let mut all = vec![0u8; 70_000];
    f.read_exact_at(&mut all, 0).expect("read back");
    for (i, b) in all.iter().enumerate() {
        assert_eq!(*b, pattern_byte(i), "byte {i}");
    }
}

#[test]
fn affinity_roundtrip() {
    let before = thread_affinity().expect("getaffinity");
    assert!(!before.is_empty());
    set_thread_affinity(&[before[0]]).expect("setaffinity");
    assert_eq!(thread_affinity().expect("get"), vec![before[0]]);
    set_thread_affinity(&before).expect("restore");
    assert!(set_thread_affinity(&[100_000]).is_err());
}

#[test]
fn tcp_socket_options_read_back() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let c = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (_s, _) = l.accept().expect("accept");
    assert!(tcp_maxseg(&c).expect("mss") > 0);
    assert!(!tcp_congestion(&c).expect("cc").is_empty());
    set_sndbuf(&c, 100_000).expect("sndbuf");
    // Linux doubles the request (and caps it at wmem_max)
    let granted = sndbuf(&c).expect("sndbuf");
    assert!(granted >= 100_000, "granted {granted}");
    let (info, len) = tcp_info(&c).expect("tcp_info");
    assert!(len >= 104);
    assert_eq!(info.state, 1, "ESTABLISHED");
    assert!(path_mtu(&c, false).expect("mtu") >= 1280);
    assert_eq!(outq(&c).expect("outq"), 0);
    assert_eq!(inq(&c).expect("inq"), 0);
}

/// How many bytes a blocking writer gets into a connection whose reader
/// reads nothing, before a 300 ms send timeout: with TCP_NOTSENT_LOWAT
/// at `lowat` (or none), a 16 MiB send buffer, a 64 KiB receive buffer
/// (about 128 KiB held, as the kernel doubles it).
fn written_before_blocking(lowat: Option<u32>) -> (usize, usize) {
    use std::io::Write;
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = l.local_addr().expect("addr");
    let reader = std::net::TcpStream::connect(a).expect("connect");
    // set after the handshake: it still caps what the reader's socket holds (and stops autotuning)
    set_rcvbuf(&reader, 64 << 10).expect("rcvbuf");
    let (w, _) = l.accept().expect("accept");
    set_sndbuf(&w, 16 << 20).ok();
    let held_by_buffer = sndbuf(&w).unwrap_or(0);
    if let Some(b) = lowat {
        set_notsent_lowat(&w, b).expect("lowat");
    }
    w.set_write_timeout(Some(std::time::Duration::from_millis(300))).expect("timeout");
    let chunk = vec![7u8; 256 << 10];
    let mut total = 0;
    let mut w = &w;
    while total < 64 << 20 {
        match w.write(&chunk) {
            Ok(n) => total += n,
            Err(_) => break,
        }
    }
    drop(reader);
    (total, held_by_buffer)
}

#[test]
fn notsent_lowat_stops_a_blocking_writer_near_the_mark_not_at_the_send_buffer() {
    let (free, buffer) = written_before_blocking(None);
    if buffer < 4 << 20 {
        eprintln!(
            "\n*** SKIPPED notsent_lowat_...: net.core.wmem_max lets a send buffer hold only {buffer} bytes, \
             too few to tell the mark from the buffer ***\n"
        );
        return;
    }
    let (held, _) = written_before_blocking(Some(256 << 10));
    // unread: the reader's buffer holds ~128 KiB, then the mark and a chunk being written
    assert!(held < 2 << 20, "with a 256 KiB mark the writer got {held} bytes in");
    assert!(
        free > 2 << 20,
        "without it a {buffer}-byte send buffer took only {free} bytes: the control proves nothing"
    );
}

#[test]
fn preallocate_on_tmpfs_extends_without_filling_and_refuses_what_cannot_fit() {
    use std::os::unix::fs::MetadataExt;
    let path = std::path::Path::new("/dev/shm").join(format!("gridperf-sys-prealloc-{}", std::process::id()));
    let Ok(f) = std::fs::OpenOptions::new().create_new(true).read(true).write(true).open(&path) else {
        eprintln!("SKIPPED preallocate_on_tmpfs_...: no /dev/shm here");
        return;
    };
    let Some(free) = tmpfs_free(&f) else {
        let _ = std::fs::remove_file(&path);
        eprintln!("SKIPPED preallocate_on_tmpfs_...: /dev/shm is not a tmpfs here");
        return;
    };
    preallocate(&f, 64 << 20).expect("preallocate");
    let m = f.metadata().expect("metadata");
    let (len, blocks) = (m.len(), m.blocks());
    // more than the tmpfs has free: ENOSPC
    let big = free.map(|free| preallocate(&f, free + (1 << 30)));
    let _ = std::fs::remove_file(&path);
    assert_eq!(len, 64 << 20);
    assert!(blocks < 1024, "tmpfs pages were filled ahead of the writes: {blocks} blocks of 512 bytes");
    if let Some(big) = big {
        assert_eq!(big.expect_err("too big").raw_os_error(), Some(libc::ENOSPC));
    }
}

#[test]
fn freed_memory_is_kept_for_the_next_allocations() {
    // glibc refuses a value out of range (a mapping threshold over 32 MiB
    // on 64-bit) and returns 0: both settings must be taken. Their effect,
    // no page faulted in again per packet, is a whole process's (the
    // emulator's main arena), measured in docs/benchmarks.md
    assert!(keep_freed_memory(), "glibc refused a setting");
}
