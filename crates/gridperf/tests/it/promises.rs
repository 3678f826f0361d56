//! What gridperf promises a site, each kept by a test that breaks it the
//! way a hostile client or an unlucky user would (the README's "What
//! gridperf promises" names them): a copy never puts an unverified or
//! mixed file in place, never writes through a link, holds few
//! descriptors, says a full disk at once, and leaves nothing reserved.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_gridperf");

fn run(args: &[&str]) -> Output {
    crate::bin().args(args).output().expect("run gridperf")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gridperf-promise-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmpdir");
    d
}

/// Bytes that differ everywhere, from a seed.
pub fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn write(p: &Path, data: &[u8]) {
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, data).expect("write");
}

/// The files beneath `d` whose names say they are a copy's partial files or journals.
fn partials(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(d) else { return out };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(partials(&p));
        } else if p.to_string_lossy().contains(".gridperf-") {
            out.push(p);
        }
    }
    out
}

fn blake3_hex(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

#[test]
fn two_sources_of_one_name_are_refused_before_anything_is_made() {
    let d = tmpdir("twice");
    let (a, b, root) = (d.join("a/x.dat"), d.join("b/x.dat"), d.join("root"));
    write(&a, &bytes(1 << 20, 1));
    write(&b, &bytes(8 << 20, 2));
    std::fs::create_dir_all(&root).expect("root");
    let (_agent, port) = crate::serve_on("127.0.0.1", &["--root", root.to_str().expect("p")]);
    let p = port.to_string();
    // a push of a/x.dat and b/x.dat into one directory: both land on dst/x.dat
    let o =
        run(&["copy", a.to_str().expect("p"), b.to_str().expect("p"), "127.0.0.1:dst/", "--port", &p, "--no-store"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("go to one destination (dst/x.dat)"), "{}", stderr(&o));
    assert!(!root.join("dst").exists(), "something was made");
    // a pull of two names that land on one local file
    write(&root.join("a/x.dat"), &bytes(1 << 20, 3));
    write(&root.join("b/x.dat"), &bytes(1 << 20, 4));
    let here = d.join("here");
    let o = run(&[
        "copy",
        "127.0.0.1:a/x.dat",
        "127.0.0.1:b/x.dat",
        &format!("{}/", here.display()),
        "--port",
        &p,
        "--no-store",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("one destination takes one source"), "{}", stderr(&o));
    assert!(partials(&here).is_empty() && !here.join("x.dat").exists());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn two_clients_pushing_one_path_at_once_never_put_a_mixed_file_in_place() {
    let _heavy = crate::heavy();
    let d = tmpdir("race");
    let root = d.join("root");
    std::fs::create_dir_all(&root).expect("root");
    let (_agent, port) = crate::serve_on("127.0.0.1", &["--root", root.to_str().expect("p"), "--max-tests", "2"]);
    let p = port.to_string();
    for round in 0..5u64 {
        let sources: Vec<(PathBuf, Vec<u8>)> = (0..2u64)
            .map(|k| {
                let data = bytes(32 << 20, 100 * round + k);
                let path = d.join(format!("src{k}/same.dat"));
                write(&path, &data);
                (path, data)
            })
            .collect();
        let children: Vec<_> = sources
            .iter()
            .map(|(path, _)| {
                crate::bin()
                    .args(["copy", path.to_str().expect("p"), "127.0.0.1:same.dat", "--port", &p, "-P", "2"])
                    .args(["--block", "1M", "--force", "--no-store", "--json"])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("copy")
            })
            .collect();
        let outs: Vec<Output> = children.into_iter().map(|c| c.wait_with_output().expect("wait")).collect();
        let placed = std::fs::read(root.join("same.dat")).expect("one of them is in place");
        // the file in place is one source, byte for byte
        let which = sources.iter().position(|(_, data)| *data == placed);
        assert!(which.is_some(), "round {round}: the file in place is neither source (a mix)");
        for (k, o) in outs.iter().enumerate() {
            if !o.status.success() {
                // refused or failed: it says the other copy held the file, and claims nothing
                assert!(
                    stderr(o).contains("another copy") || stdout(o).contains("another copy"),
                    "round {round}, client {k}: {}{}",
                    stdout(o),
                    stderr(o)
                );
                continue;
            }
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
            // a client that says done reports its own source's hash, and that source is what it put in place
            assert_eq!(v["files"][0]["blake3"], blake3_hex(&sources[k].1), "round {round}, client {k}");
        }
        assert!(partials(&root).is_empty(), "round {round}: left {:?}", partials(&root));
        let _ = std::fs::remove_file(root.join("same.dat"));
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_hard_link_planted_beside_a_destination_is_never_written_through() {
    let d = tmpdir("hardlink");
    let (root, outside) = (d.join("root"), d.join("outside"));
    std::fs::create_dir_all(&root).expect("root");
    write(&outside.join("victim"), b"the victim's own bytes");
    write(&outside.join("victim2"), b"another victim");
    // a partial file and a journal of names a push will use, linked to files outside the root
    std::fs::hard_link(outside.join("victim"), root.join(".hl.bin.gridperf-partial")).expect("link");
    std::fs::hard_link(outside.join("victim2"), root.join(".hl2.bin.gridperf-manifest")).expect("link");
    let src = d.join("src");
    write(&src.join("hl.bin"), &bytes(300_000, 5));
    write(&src.join("hl2.bin"), &bytes(300_000, 6));
    let (_agent, port) = crate::serve_on("127.0.0.1", &["--root", root.to_str().expect("p")]);
    for name in ["hl.bin", "hl2.bin"] {
        let o = run(&[
            "copy",
            src.join(name).to_str().expect("p"),
            &format!("127.0.0.1:{name}"),
            "--port",
            &port.to_string(),
            "--resume",
            "--no-store",
        ]);
        assert!(!o.status.success(), "{name}: {}", stdout(&o));
        assert!(
            stdout(&o).contains("hard links: not written through") || stderr(&o).contains("hard links"),
            "{name}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        assert!(!root.join(name).exists());
    }
    assert_eq!(std::fs::read(outside.join("victim")).expect("victim"), b"the victim's own bytes");
    assert_eq!(std::fs::read(outside.join("victim2")).expect("victim2"), b"another victim");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_directory_of_2000_files_copies_under_a_soft_limit_of_1024_descriptors() {
    let _heavy = crate::heavy();
    let d = tmpdir("nofile");
    let (src, root, back) = (d.join("src/many"), d.join("root"), d.join("back"));
    for k in 0..2000u64 {
        write(&src.join(format!("f{k:04}.dat")), &bytes(1000 + k as usize, k));
    }
    std::fs::create_dir_all(&root).expect("root");
    let port = crate::free_port();
    let p = port.to_string();
    // the agent and the client both under `prlimit --nofile=1024`
    let mut agent = crate::Served(
        crate::hermetic(&mut Command::new("prlimit"))
            .args(["--nofile=1024:1024", BIN, "serve", "--bind", "127.0.0.1", "--port", &p])
            .args(["--root", root.to_str().expect("p")])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("prlimit (util-linux)"),
    );
    crate::wait_until(Duration::from_secs(5), "the agent listens", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let limited = |args: &[&str]| {
        crate::hermetic(&mut Command::new("prlimit"))
            .arg("--nofile=1024:1024")
            .arg(BIN)
            .args(args)
            .output()
            .expect("prlimit")
    };
    let o = limited(&["copy", src.to_str().expect("p"), "127.0.0.1:in/", "--port", &p, "-P", "4", "--no-store"]);
    assert!(o.status.success(), "push: {}{}", stdout(&o), stderr(&o));
    let o =
        limited(&["copy", "127.0.0.1:in/many", &format!("{}/", back.display()), "--port", &p, "-P", "4", "--no-store"]);
    assert!(o.status.success(), "pull: {}{}", stdout(&o), stderr(&o));
    for k in 0..2000u64 {
        let want = bytes(1000 + k as usize, k);
        let name = format!("f{k:04}.dat");
        assert!(std::fs::read(root.join("in/many").join(&name)).expect("pushed") == want, "{name} pushed");
        assert!(std::fs::read(back.join("many").join(&name)).expect("pulled") == want, "{name} pulled");
    }
    assert!(partials(&root).is_empty() && partials(&back).is_empty());
    let _ = agent.0.kill();
    let _ = std::fs::remove_dir_all(&d);
}

/// Runs `script` (sh) in a mount namespace of its own, as root or in a user
/// namespace of one's own (where a tmpfs may be mounted without root).
fn in_mount_ns(script: &str) -> Output {
    let mut c = Command::new("unshare");
    crate::hermetic(&mut c);
    if !gridperf::host::is_root() {
        c.args(["--user", "--map-root-user"]);
    }
    c.args(["--mount", "--propagation", "private", "sh", "-c", script]).output().expect("unshare")
}

#[test]
fn a_disk_that_fills_mid_copy_fails_its_file_at_once_with_the_reason_and_resumes_whole() {
    let _heavy = crate::heavy();
    let d = tmpdir("enospc");
    let src = d.join("src");
    let (a, b) = (bytes(3 << 20, 21), bytes(3 << 20, 22));
    write(&src.join("a.dat"), &a);
    write(&src.join("b.dat"), &b);
    let small = d.join("small");
    std::fs::create_dir_all(&small).expect("mountpoint");
    // 4 MiB of tmpfs free for 6 MiB (7 MiB, 3 of them a filler): each file
    // fits when prepared (a tmpfs is not reserved ahead), the second to be
    // written fills the disk; then the filler goes (a remount to grow it is
    // refused in a user namespace)
    let script = format!(
        "mount -t tmpfs -o size=7m gridperf-enospc {m} && dd if=/dev/zero of={m}/filler bs=1M count=3 2>/dev/null && \
         {BIN} copy {s}/ {m}/ -P 2 --block 256K --no-store; \
         echo \"exit=$?\"; rm {m}/filler; \
         {BIN} copy {s}/ {m}/ --resume -P 2 --block 256K --no-store --json > {m}/resume.json; echo \"exit=$?\"; \
         cmp {s}/a.dat {m}/src/a.dat && cmp {s}/b.dat {m}/src/b.dat && echo identical",
        m = small.display(),
        s = src.display()
    );
    let started = Instant::now();
    let o = in_mount_ns(&script);
    let took = started.elapsed();
    let out = stdout(&o);
    assert!(out.contains("exit=4"), "{out}{}", stderr(&o));
    assert!(out.contains("the destination's disk is full: kept partial"), "{out}{}", stderr(&o));
    // no stall: the full disk is told to the sender at once (it waited 30 s before)
    assert!(took < Duration::from_secs(20), "took {took:?}");
    // after room is made, a resume keeps what was verified and puts both in place, identical
    assert!(out.contains("exit=0") && out.contains("identical"), "{out}{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_link_a_pipe_or_a_proc_file_named_is_refused_with_why_not_copied_as_nothing() {
    let d = tmpdir("oddities");
    let root = d.join("root");
    std::fs::create_dir_all(&root).expect("root");
    write(&root.join("real.dat"), &bytes(1000, 7));
    std::os::unix::fs::symlink("real.dat", root.join("link.dat")).expect("symlink");
    assert!(Command::new("mkfifo").arg(root.join("fifo")).status().expect("mkfifo").success());
    write(&root.join("dir/real.dat"), &bytes(1000, 8));
    std::os::unix::fs::symlink("real.dat", root.join("dir/link.dat")).expect("symlink");
    assert!(Command::new("mkfifo").arg(root.join("dir/fifo")).status().expect("mkfifo").success());
    let (_agent, port) = crate::serve_on("127.0.0.1", &["--root", root.to_str().expect("p")]);
    let p = port.to_string();
    for (name, says) in [("link.dat", "a symbolic link: not followed"), ("fifo", "not a regular file")] {
        let o = run(&[
            "copy",
            &format!("127.0.0.1:{name}"),
            &format!("{}/", d.join("here").display()),
            "--port",
            &p,
            "--no-store",
        ]);
        assert!(!o.status.success(), "{name}: {}", stdout(&o));
        assert!(stderr(&o).contains(says), "{name}: {}", stderr(&o));
    }
    // a directory pulled with a link and a pipe in it: the client hears of both
    let o =
        run(&["copy", "127.0.0.1:dir", &format!("{}/", d.join("all").display()), "--port", &p, "--no-store", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let skipped = v["skipped"].to_string();
    assert!(skipped.contains("link.dat") && skipped.contains("fifo"), "{v}");
    // /proc's files say nothing of their contents by their size
    let o = run(&["copy", "/proc/self/status", &format!("{}/", d.join("proc").display()), "--no-store"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("a pseudo-file"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_push_that_declares_a_big_file_and_sends_nothing_leaves_nothing_reserved() {
    use gridperf_core::wire::{self, AgentMsg, ClientMsg, CopyDirection, CopyFile, CopySpec, Test, TestRequest};
    let d = tmpdir("declared");
    let root = d.join("root");
    std::fs::create_dir_all(&root).expect("root");
    let (_agent, port) = crate::serve_on("127.0.0.1", &["--root", root.to_str().expect("p")]);
    for (k, refused_too) in [(0, false), (1, true)] {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        wire::write_msg(
            &mut s,
            &ClientMsg::Hello { magic: wire::MAGIC.into(), version: wire::PROTOCOL_VERSION, software: "t".into() },
        )
        .expect("hello");
        let _: AgentMsg = wire::read_msg(&mut s).expect("welcome");
        let spec = CopySpec {
            direction: CopyDirection::Push,
            files: 1,
            streams: 1,
            block: 1 << 20,
            window: None,
            congestion: None,
            pacing_bps: None,
            resume: false,
            force: false,
            checksum: None,
            encrypt: None,
            connections: 0,
            restart: false,
            tail: false,
            auto: None,
            senders: Vec::new(),
            join: false,
        };
        // the first test's slot is freed a moment after its connection
        // closes: the second waits in the agent's queue for it
        wire::write_msg(&mut s, &ClientMsg::Request(TestRequest { queue_ms: 5000, test: Test::Copy(spec) }))
            .expect("request");
        let mut ready: AgentMsg = wire::read_msg(&mut s).expect("ready");
        if matches!(ready, AgentMsg::Queued { .. }) {
            ready = wire::read_msg(&mut s).expect("ready after the queue");
        }
        assert!(matches!(ready, AgentMsg::Ready { .. }), "{ready:?}");
        // 2 GiB declared (or, the second time, more than any disk here holds: refused)
        let size = if refused_too { 1 << 49 } else { 2 << 30 };
        let files = vec![CopyFile { path: format!("big{k}.dat"), size, mtime_ns: 0, digest: None, origin: None }];
        wire::write_msg(&mut s, &ClientMsg::CopyFiles { files }).expect("files");
        let needs: AgentMsg = wire::read_msg(&mut s).unwrap_or_else(|e| panic!("needs of file {k}: {e:?}"));
        assert!(matches!(needs, AgentMsg::CopyNeeds { .. }), "{needs:?}");
        if !refused_too {
            assert!(root.join(format!(".big{k}.dat.gridperf-partial")).exists(), "reserved while the copy runs");
        }
        drop(s);
        crate::wait_until(Duration::from_secs(5), "the declared file's partial removed", || partials(&root).is_empty());
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn partial_files_untouched_past_their_ttl_are_swept_and_held_ones_are_not() {
    let d = tmpdir("sweep");
    let root = d.join("root");
    let old = std::time::SystemTime::now() - Duration::from_secs(3 * 3600);
    let age = |p: &Path| {
        let f = std::fs::OpenOptions::new().write(true).open(p).expect("open");
        f.set_times(std::fs::FileTimes::new().set_modified(old)).expect("times");
    };
    // an old pair, a fresh pair, and an old pair a copy holds (locked)
    for (name, aged) in [("stale", true), ("fresh", false), ("held", true)] {
        for suffix in [".gridperf-partial", ".gridperf-manifest"] {
            let p = root.join(format!("sub/.{name}.dat{suffix}"));
            write(&p, &bytes(4096, 9));
            if aged {
                age(&p);
            }
        }
    }
    let held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(root.join("sub/.held.dat.gridperf-partial"))
        .expect("held");
    assert!(gridperf_sys::try_lock_exclusive(&held).expect("lock"));
    // the agent sweeps at its start: --partial-ttl 1h
    let (_agent, _port) = crate::serve_on("127.0.0.1", &["--root", root.to_str().expect("p"), "--partial-ttl", "1h"]);
    crate::wait_until(Duration::from_secs(5), "the stale pair removed", || {
        !root.join("sub/.stale.dat.gridperf-partial").exists()
            && !root.join("sub/.stale.dat.gridperf-manifest").exists()
    });
    assert!(root.join("sub/.fresh.dat.gridperf-partial").exists(), "a fresh partial is kept for its resume");
    assert!(root.join("sub/.held.dat.gridperf-partial").exists(), "a partial a copy holds is left alone");
    drop(held);
    let _ = std::fs::remove_dir_all(&d);
}

/// An agent process's resident memory, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[test]
fn an_idle_agent_gives_back_what_its_biggest_test_took() {
    let _heavy = crate::heavy();
    let (agent, port) = crate::serve_on("127.0.0.1", &["--max-tests", "4"]);
    let before = rss(agent.id());
    let a = format!("127.0.0.1:{port}");
    let agents = [a.as_str(), a.as_str(), a.as_str()].join(",");
    // three consumers of 16 MiB messages: 48 MiB of buffers while it runs
    let o = run(&[
        "fanout",
        "--agents",
        &agents,
        "--nodes",
        "3",
        "--size",
        "16M",
        "--messages",
        "8",
        "--repeat",
        "1",
        "--variant",
        "drain",
        "--no-store",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut after = rss(agent.id());
    crate::wait_until(Duration::from_secs(5), "the agent's memory given back", || {
        after = rss(agent.id());
        after < before + (16 << 20)
    });
    assert!(after < before + (16 << 20), "{before} bytes before, {after} after");
}

/// xorshift64*: the chaos test's choices, reproducible from its seed.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

/// One copy a chaos round runs: what it copies, and (for a push) which source.
struct Op {
    child: std::process::Child,
    name: String,
    /// The source a push sends (its index among the name's variants); None for a pull.
    variant: Option<usize>,
    killed: bool,
}

/// Clients pushing and pulling overlapping names at once, some killed at
/// random, the agent killed and started again, its disk filled by another
/// writer, resumes of other sources of the same size and time: after
/// every round, every file in place (at
/// the agent and where pulls write) is one source byte for byte, every
/// copy that said it put a file in place gave that source's BLAKE3, and
/// nothing outside the roots changed. `GRIDPERF_CHAOS_ROUNDS` (default 8)
/// and `GRIDPERF_CHAOS_SEED` set the run; the bench runs hundreds of rounds.
#[test]
fn copies_under_concurrency_kills_and_restarts_keep_every_file_whole() {
    let _heavy = crate::heavy();
    let rounds: u64 = std::env::var("GRIDPERF_CHAOS_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    let seed: u64 = std::env::var("GRIDPERF_CHAOS_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed);
    let mut dice = Dice(seed | 1);
    let d = tmpdir("chaos");
    let (root, here, sentinel) = (d.join("root"), d.join("here"), d.join("outside"));
    std::fs::create_dir_all(&root).expect("root");
    std::fs::create_dir_all(&here).expect("here");
    write(&sentinel.join("keep.dat"), &bytes(100_000, 99));
    // three names, each with three sources: two of one size and time (a
    // resume must not take one for the other), one of another size
    let names = ["n0.dat", "n1.dat", "n2.dat"];
    let mtime = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut variants: Vec<Vec<Vec<u8>>> = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let size = (3 + 5 * k) << 20;
        let v: Vec<Vec<u8>> =
            (0..3u64).map(|j| bytes(size + if j == 2 { 70_001 } else { 0 }, 1000 * k as u64 + j)).collect();
        for (j, data) in v.iter().enumerate() {
            let p = d.join(format!("src{j}/{name}"));
            write(&p, data);
            let f = std::fs::OpenOptions::new().write(true).open(&p).expect("source");
            f.set_times(std::fs::FileTimes::new().set_modified(mtime)).expect("times");
        }
        variants.push(v);
    }
    let hashes: Vec<Vec<String>> = variants.iter().map(|v| v.iter().map(|d| blake3_hex(d)).collect()).collect();
    let port = crate::free_port();
    let p = port.to_string();
    // the agent's root is a 48 MiB tmpfs in a mount namespace of its own
    // (a user namespace's too when not root), so that the disk can fill; the
    // test sees it through /proc/PID/root
    let start_agent = || {
        let script = format!(
            "mount -t tmpfs -o size=48m gridperf-chaos {r} && exec {BIN} serve --bind 127.0.0.1 --port {port} \
             --root {r} --max-tests 4",
            r = root.display()
        );
        let mut c = Command::new("unshare");
        crate::hermetic(&mut c);
        if !gridperf::host::is_root() {
            c.args(["--user", "--map-root-user"]);
        }
        let child = c
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("unshare (util-linux)");
        let agent = crate::Served(child);
        crate::wait_until(Duration::from_secs(5), "the chaos agent listens", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        let seen = PathBuf::from(format!("/proc/{}/root{}", agent.id(), root.display()));
        // a link out of the root, in it
        let _ = std::os::unix::fs::symlink(&sentinel, seen.join("escape"));
        (agent, seen)
    };
    let (mut agent, mut seen) = start_agent();
    let (mut done_ok, mut killed, mut restarts, mut fills) = (0u64, 0u64, 0u64, 0u64);
    for round in 0..rounds {
        let mut ops: Vec<Op> = Vec::new();
        for _ in 0..3 {
            let k = dice.roll(names.len() as u64) as usize;
            let name = names[k].to_string();
            let streams = (1 + dice.roll(4)).to_string();
            let block = if dice.roll(2) == 0 { "256K" } else { "1M" };
            let mut c = crate::bin();
            let variant = if dice.roll(3) == 0 {
                c.args(["copy", &format!("127.0.0.1:{name}"), &format!("{}/", here.display())]);
                None
            } else {
                let j = dice.roll(3) as usize;
                c.args(["copy", d.join(format!("src{j}/{name}")).to_str().expect("p"), &format!("127.0.0.1:{name}")]);
                Some(j)
            };
            c.args(["--port", &p, "-P", &streams, "--block", block, "--no-store", "--json"]);
            if dice.roll(2) == 0 {
                c.arg("--force");
            }
            if dice.roll(2) == 0 {
                c.arg("--resume");
            }
            let child =
                c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().expect("copy");
            ops.push(Op { child, name, variant, killed: false });
        }
        // faults: one copy killed at a random moment, now and then the agent too
        std::thread::sleep(Duration::from_millis(dice.roll(400)));
        if dice.roll(2) == 0 {
            let victim = dice.roll(ops.len() as u64) as usize;
            let _ = ops[victim].child.kill();
            ops[victim].killed = true;
            killed += 1;
        }
        if dice.roll(5) == 0 {
            let _ = agent.0.kill();
            let _ = agent.0.wait();
            (agent, seen) = start_agent();
            restarts += 1;
        }
        // the disk fills: another writer takes all but a few MiB of it for a while
        let filler = seen.join("filler");
        if dice.roll(3) == 0 {
            let _ = std::fs::write(&filler, vec![0u8; (36 + dice.roll(10) as usize) << 20]);
            fills += 1;
        }
        for op in ops {
            let o = op.child.wait_with_output().expect("wait");
            if op.killed || !o.status.success() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("a copy's json");
            let k = names.iter().position(|n| *n == op.name).expect("a name");
            let said = v["files"][0]["blake3"].as_str().unwrap_or_default().to_string();
            match op.variant {
                // a push that said done gave its own source's hash
                Some(j) => assert_eq!(said, hashes[k][j], "round {round}: a push of {} source {j}", op.name),
                // a pull that said done gave one source's hash
                None => assert!(hashes[k].contains(&said), "round {round}: a pull of {} said {said}", op.name),
            }
            done_ok += 1;
        }
        let _ = std::fs::remove_file(&filler);
        // every file in place, here and there, is one source byte for byte
        for (k, name) in names.iter().enumerate() {
            for place in [seen.join(name), here.join(name)] {
                if let Ok(bytes_in_place) = std::fs::read(&place) {
                    assert!(
                        variants[k].contains(&bytes_in_place),
                        "round {round} (seed {seed}): {} is no source of its name (a mix)",
                        place.display()
                    );
                }
            }
        }
        assert_eq!(std::fs::read(sentinel.join("keep.dat")).expect("outside"), bytes(100_000, 99));
        assert_eq!(std::fs::read_dir(&sentinel).expect("outside").count(), 1, "a file appeared outside the root");
    }
    eprintln!(
        "chaos: {rounds} rounds (seed {seed}): {done_ok} copies done and checked, {killed} killed, {restarts} agent \
         restarts, {fills} disks filled"
    );
    drop(agent);
    let _ = std::fs::remove_dir_all(&d);
}
