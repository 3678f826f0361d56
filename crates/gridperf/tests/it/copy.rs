//! gridperf copy through the binary: local copies through an agent of the
//! process, push and pull against `gridperf serve --root`, what a copy
//! refuses (paths out of the root, a destination that exists, an agent
//! without a root), a block damaged in flight, a copy killed and resumed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_gridperf");

fn run(args: &[&str]) -> Output {
    crate::bin().args(args).output().expect("run gridperf")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gridperf-copy-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmpdir");
    d
}

/// Bytes that differ everywhere (a block copied to the wrong place shows).
fn bytes(n: usize, seed: u64) -> Vec<u8> {
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

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).expect("copy json")
}

/// A source tree: files of awkward sizes, a nested directory, an empty file.
fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let files = vec![
        ("run1/empty.dat".to_string(), Vec::new()),
        ("run1/one-byte".to_string(), bytes(1, 1)),
        ("run1/just-under-a-block".to_string(), bytes(65_535, 2)),
        ("run1/blocks-and-a-bit".to_string(), bytes(5 * 65_536 + 3, 3)),
        ("run1/sub/deeper/big.dat".to_string(), bytes(3 << 20, 4)),
    ];
    for (p, d) in &files {
        write(&root.join(p), d);
    }
    files
}

#[test]
fn a_directory_copied_locally_is_identical_and_each_files_hash_is_its_blake3() {
    let _heavy = crate::heavy();
    let d = tmpdir("local");
    let (src, dst) = (d.join("src"), d.join("dst"));
    let files = tree(&src);
    let o = run(&[
        "copy",
        src.join("run1").to_str().expect("path"),
        &format!("{}/", dst.display()),
        "-P",
        "3",
        "--block",
        "64K",
        "--no-store",
        "--json",
    ]);
    let v = json(&o);
    assert_eq!(v["schema"], "gridperf.copy/1");
    assert_eq!(v["direction"], "push");
    let listed = v["files"].as_array().expect("files");
    assert_eq!(listed.len(), files.len(), "{v}");
    for (p, data) in &files {
        let got = std::fs::read(dst.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert!(got == *data, "{p} differs");
        let f = listed.iter().find(|f| f["path"] == *p).unwrap_or_else(|| panic!("{p} not listed: {v}"));
        assert_eq!(f["blake3"], blake3::hash(data).to_hex().to_string(), "{p}");
        assert_eq!(f["moved"], data.len() as u64, "{f}");
        assert!(f["error"].is_null(), "{f}");
        // nothing is left beside it
        let dir = dst.join(p).parent().expect("dir").to_path_buf();
        for e in std::fs::read_dir(&dir).expect("dir").flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            assert!(!n.contains(".gridperf-"), "{n} left in {}", dir.display());
        }
    }
    let total: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    assert_eq!(v["bytes_moved"], total);
    // each stream's bytes per interval add up to what it carried
    for s in v["per_stream"].as_array().expect("streams") {
        let sum: u64 = s["interval_bytes"].as_array().map(|a| a.iter().filter_map(|x| x.as_u64()).sum()).unwrap_or(0);
        assert_eq!(Some(sum), s["bytes"].as_u64(), "{s}");
    }
    // every stream took blocks from the one queue
    assert_eq!(v["per_stream"].as_array().map(Vec::len), Some(3));
    // 3.4 MiB in a few ms of stream time: too little to say what limited it
    assert!(v["verdict"].as_str().unwrap_or_default().starts_with("too little moved to tell"), "{v}");
    // the same again: every destination is this very source's already: nothing to do, and that is no failure
    let o = run(&["copy", src.join("run1").to_str().expect("path"), &format!("{}/", dst.display()), "--no-store"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing to do: the 5 files are in place already"), "{}", stderr(&o));
    // a destination of another source's is refused and named
    let other = d.join("other/run1");
    write(&other.join("one-byte"), &bytes(1, 77));
    let o = run(&["copy", other.to_str().expect("path"), &format!("{}/", dst.display()), "--no-store"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("exists: give --force to replace it"), "{out}");
    assert!(stderr(&o).contains("1 of 1 files are not in place"), "{}", stderr(&o));
    // --resume keeps what an earlier run finished; --force replaces it
    let v = json(&run(&[
        "copy",
        src.join("run1").to_str().expect("path"),
        &format!("{}/", dst.display()),
        "--resume",
        "--no-store",
        "--json",
    ]));
    assert_eq!(v["bytes_moved"], 0, "{v}");
    assert_eq!(v["bytes_kept"], total, "{v}");
    let v = json(&run(&[
        "copy",
        src.join("run1").to_str().expect("path"),
        &format!("{}/", dst.display()),
        "--force",
        "--no-store",
        "--json",
    ]));
    assert_eq!(v["bytes_moved"], total, "{v}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_block_damaged_in_flight_is_found_and_sent_again() {
    let _heavy = crate::heavy();
    let d = tmpdir("flip");
    let data = bytes(40 * 65_536 + 77, 9);
    let src = d.join("f.dat");
    write(&src, &data);
    let dst = d.join("copy.dat");
    let v = json(&run(&[
        "copy",
        src.to_str().expect("p"),
        dst.to_str().expect("p"),
        "--block",
        "64K",
        "--fault-flip-block",
        "7",
        "--no-store",
        "--json",
    ]));
    assert_eq!(v["blocks_resent"], 1, "{v}");
    assert_eq!(v["files"][0]["resent"], 1, "{v}");
    assert_eq!(v["files"][0]["path"], "copy.dat");
    assert!(std::fs::read(&dst).expect("copy") == data, "the copy differs");
    assert_eq!(v["files"][0]["blake3"], blake3::hash(&data).to_hex().to_string());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_copy_killed_midway_resumes_hashing_what_arrived_and_moves_only_the_rest() {
    let _heavy = crate::heavy();
    let d = tmpdir("resume");
    let data = bytes(48 << 20, 5);
    let src = d.join("big.dat");
    write(&src, &data);
    let dst = d.join("out");
    std::fs::create_dir_all(&dst).expect("dst");
    let dsts = format!("{}/", dst.display());
    // paced at 100 Mbit/s a stream: about 2 s for the 48 MiB
    let args = ["copy", src.to_str().expect("p"), &dsts, "-P", "2", "--block", "1M", "--pacing", "100M", "--no-store"];
    let mut child = crate::bin().args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("copy");
    let journal = dst.join(".big.dat.gridperf-manifest");
    let deadline = Instant::now() + Duration::from_secs(30);
    // kill it once some blocks are in the journal (a header line, then 40 bytes a block)
    loop {
        assert!(Instant::now() < deadline, "no block arrived within 30 s");
        if std::fs::metadata(&journal).map(|m| m.len()).unwrap_or(0) > 200 + 40 * 8 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("kill");
    let _ = child.wait();
    assert!(!dst.join("big.dat").exists(), "an unfinished copy was renamed into place");
    let partial = dst.join(".big.dat.gridperf-partial");
    assert_eq!(std::fs::metadata(&partial).expect("partial kept").len(), data.len() as u64);
    let j = std::fs::read(&journal).expect("journal");
    let head = j.iter().position(|&b| b == b'\n').expect("the journal's head line") + 1;
    let journal_blocks = ((j.len() - head) / 40) as u64;
    assert!(journal_blocks >= 8, "{journal_blocks}");
    // damage the first block on the destination's disk: the resume must find it
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&partial).expect("partial");
        f.write_all_at(&[data[100] ^ 0xff], 100).expect("damage");
    }
    let v = json(&run(&["copy", src.to_str().expect("p"), &dsts, "-P", "2", "--block", "1M", "--no-store", "--json"]));
    let f = &v["files"][0];
    let (moved, kept) = (f["moved"].as_u64().expect("moved"), f["kept"].as_u64().expect("kept"));
    assert_eq!(moved + kept, data.len() as u64, "{f}");
    // what the journal vouched for was kept, but for the damaged block
    assert_eq!(kept, (journal_blocks - 1) << 20, "{journal_blocks} blocks in the journal, one damaged: {f}");
    assert!(moved < data.len() as u64, "{f}");
    assert!(std::fs::read(dst.join("big.dat")).expect("copy") == data, "the resumed copy differs");
    assert_eq!(f["blake3"], blake3::hash(&data).to_hex().to_string());
    assert!(!journal.exists() && !partial.exists(), "the journal or the partial file was left");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn push_and_pull_with_an_agent_stay_beneath_its_root() {
    let _heavy = crate::heavy();
    let d = tmpdir("agent");
    let (root, outside, here) = (d.join("root"), d.join("outside"), d.join("here"));
    std::fs::create_dir_all(&root).expect("root");
    write(&outside.join("secret"), b"not yours");
    let files = tree(&here);
    let (_agent, port) = crate::serve_on("127.0.0.1", &["--root", root.to_str().expect("p")]);
    let p = port.to_string();
    // push a directory beneath the root
    let v = json(&run(&[
        "copy",
        here.join("run1").to_str().expect("p"),
        "127.0.0.1:in/",
        "--port",
        &p,
        "--block",
        "64K",
        "--no-store",
        "--json",
    ]));
    for (path, data) in &files {
        assert!(std::fs::read(root.join("in").join(path)).expect("pushed") == *data, "{path}");
    }
    assert_eq!(v["direction"], "push");
    // pull it back elsewhere
    let back = d.join("back");
    let v = json(&run(&[
        "copy",
        "127.0.0.1:in/run1",
        &format!("{}/", back.display()),
        "--port",
        &p,
        "--block",
        "64K",
        "--no-store",
        "--json",
    ]));
    assert_eq!(v["direction"], "pull");
    for (path, data) in &files {
        assert!(std::fs::read(back.join(path)).expect("pulled") == *data, "{path}");
    }
    // out of the root, either way: refused, nothing touched
    std::os::unix::fs::symlink(&outside, root.join("link")).expect("symlink");
    for (args, want) in [
        (vec!["copy", "127.0.0.1:../outside/secret", "./x"], "not a plain name"),
        (vec!["copy", "127.0.0.1:link/secret", d.join("x").to_str().expect("p")], "link/secret"),
        (vec!["copy", here.join("run1/one-byte").to_str().expect("p"), "127.0.0.1:../escaped"], "not a plain name"),
        (vec!["copy", here.join("run1/one-byte").to_str().expect("p"), "127.0.0.1:/etc/escaped"], "absolute"),
    ] {
        let mut a = args.clone();
        a.extend_from_slice(&["--port", &p, "--no-store"]);
        let o = run(&a);
        assert!(!o.status.success(), "{a:?} succeeded");
        let all = format!("{}{}", stderr(&o), String::from_utf8_lossy(&o.stdout));
        assert!(all.contains(want) || all.contains("beneath") || all.contains("symbolic"), "{a:?}: {all}");
    }
    assert!(!d.join("x").exists() && !d.join("escaped").exists() && !Path::new("/etc/escaped").exists());
    assert_eq!(std::fs::read(outside.join("secret")).expect("secret"), b"not yours");
    // a read-only root takes no push; an agent without a root moves no files
    let (_ro, ro_port) = crate::serve_on("127.0.0.1", &["--root", root.to_str().expect("p"), "--read-only"]);
    let o = run(&[
        "copy",
        here.join("run1/one-byte").to_str().expect("p"),
        "127.0.0.1:ro",
        "--port",
        &ro_port.to_string(),
        "--no-store",
    ]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("read-only"), "{}", stderr(&o));
    assert!(!root.join("ro").exists());
    let (_bare, bare_port) = crate::serve_on("127.0.0.1", &[]);
    let o = run(&["copy", "127.0.0.1:in/run1", "./never", "--port", &bare_port.to_string(), "--no-store"]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("serve --root DIR"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

/// Waits until `journal` records at least `blocks` blocks (a head line, then 40 bytes a block).
fn journal_reaches(journal: &Path, blocks: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "{} did not reach {blocks} blocks within 30 s", journal.display());
        if let Ok(j) = std::fs::read(journal) {
            if let Some(head) = j.iter().position(|&b| b == b'\n') {
                if ((j.len() - head - 1) / 40) as u64 >= blocks {
                    return;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_source_that_changes_during_the_copy_is_not_put_in_place() {
    let _heavy = crate::heavy();
    let d = tmpdir("changed");
    let data = bytes(24 << 20, 6);
    let src = d.join("growing.dat");
    write(&src, &data);
    let dst = d.join("out");
    std::fs::create_dir_all(&dst).expect("dst");
    let args = [
        "copy",
        src.to_str().expect("p"),
        &format!("{}/", dst.display()),
        "--block",
        "1M",
        "--pacing",
        "100M",
        "--no-store",
    ];
    let child = crate::bin().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("copy");
    journal_reaches(&dst.join(".growing.dat.gridperf-manifest"), 4);
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&src).expect("source");
        f.write_all(b"appended while it was copied").expect("append");
    }
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("NOT IN PLACE") && out.contains("the source changed"), "{out}");
    assert!(!dst.join("growing.dat").exists(), "a copy of a changed source was put in place");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_client_or_an_agent_that_dies_mid_copy_loses_nothing_verified() {
    let _heavy = crate::heavy();
    let d = tmpdir("dies");
    let root = d.join("root");
    std::fs::create_dir_all(&root).expect("root");
    let data = bytes(40 << 20, 8);
    let src = d.join("big.dat");
    write(&src, &data);
    let small = d.join("small.dat");
    write(&small, &bytes(100_000, 9));
    let journal = root.join(".big.dat.gridperf-manifest");
    let (agent, port) = crate::serve_on("127.0.0.1", &["--root", root.to_str().expect("p")]);
    let p = port.to_string();
    let push = |port: &str, extra: &[&str]| {
        let mut a = vec!["copy", src.to_str().expect("p"), "127.0.0.1:", "--port", port, "--block", "1M", "--no-store"];
        a.extend_from_slice(extra);
        crate::bin().args(&a).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("copy")
    };
    // the client dies: the agent frees its slot at once and keeps what arrived
    let mut client = push(&p, &["--pacing", "100M"]);
    journal_reaches(&journal, 6);
    client.kill().expect("kill");
    let _ = client.wait();
    let t = Instant::now();
    let o = run(&["copy", small.to_str().expect("p"), "127.0.0.1:", "--port", &p, "--queue", "10s", "--no-store"]);
    assert!(o.status.success(), "the agent did not serve again: {}", stderr(&o));
    assert!(t.elapsed() < Duration::from_secs(10), "the agent held the slot {:?}", t.elapsed());
    assert!(journal.exists() && root.join(".big.dat.gridperf-partial").exists(), "the partial file was dropped");
    // the agent dies: the client says so, promptly, and nothing is renamed
    let client = push(&p, &["--pacing", "100M"]);
    let before = std::fs::metadata(&journal).map(|m| m.len()).unwrap_or(0);
    journal_reaches(&journal, ((before as usize).saturating_sub(100) / 40 + 8) as u64);
    drop(agent);
    let t = Instant::now();
    let o = client.wait_with_output().expect("client");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(t.elapsed() < Duration::from_secs(15), "the client waited {:?} on a dead agent", t.elapsed());
    assert!(!root.join("big.dat").exists());
    // a new agent on the same root: the copy goes on from what the journal vouches for
    let (_agent, port) = crate::serve_on("127.0.0.1", &["--root", root.to_str().expect("p")]);
    let v = json(&run(&[
        "copy",
        src.to_str().expect("p"),
        "127.0.0.1:",
        "--port",
        &port.to_string(),
        "--block",
        "1M",
        "--no-store",
        "--json",
    ]));
    let f = &v["files"][0];
    let (moved, kept) = (f["moved"].as_u64().expect("moved"), f["kept"].as_u64().expect("kept"));
    assert_eq!(moved + kept, data.len() as u64, "{f}");
    assert!(kept >= 8 << 20, "{f}");
    assert!(std::fs::read(root.join("big.dat")).expect("copy") == data, "the resumed copy differs");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_full_destination_disk_is_said_before_the_copy_and_the_other_files_go_on() {
    let _heavy = crate::heavy();
    let d = tmpdir("full");
    let src = d.join("src");
    write(&src.join("a-small.dat"), &bytes(1 << 20, 10));
    write(&src.join("b-big.dat"), &bytes(8 << 20, 11));
    let small = d.join("small-disk");
    std::fs::create_dir_all(&small).expect("mountpoint");
    // a 4 MiB tmpfs, mounted in a mount namespace that ends with the command
    let script = format!(
        "mount -t tmpfs -o size=4m gridperf-copy-test {m} && exec {BIN} copy {s} {m}/ --no-store",
        m = small.display(),
        s = src.display()
    );
    // a mount namespace of its own (and, for a user, a user namespace where it may mount)
    let mut c = Command::new("unshare");
    crate::hermetic(&mut c);
    if !gridperf::host::is_root() {
        c.args(["--user", "--map-root-user"]);
    }
    let o = c.args(["--mount", "--propagation", "private", "sh", "-c", &script]).output().expect("unshare");
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("src/b-big.dat") && out.contains("no room for its 8388608 bytes"), "{out}");
    assert!(
        out.contains("src/a-small.dat")
            && out.lines().any(|l| l.starts_with("src/a-small.dat") && !l.contains("NOT IN PLACE")),
        "{out}"
    );
    assert!(stderr(&o).contains("1 of 2 files are not in place"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_checksum_a_catalogue_expects_is_computed_as_the_blocks_arrive() {
    let _heavy = crate::heavy();
    let d = tmpdir("checksum");
    // blocks arrive out of order (4 streams, 64K blocks): the sums must still be the file's, in order
    let src = d.join("f.dat");
    write(&src, &bytes(13 * 65_536 + 5, 12));
    for (algo, tool) in [("md5", "md5sum"), ("sha256", "sha256sum")] {
        let dst = d.join(format!("copy-{algo}.dat"));
        let v = json(&run(&[
            "copy",
            src.to_str().expect("p"),
            dst.to_str().expect("p"),
            "-P",
            "4",
            "--block",
            "64K",
            "--checksum",
            algo,
            "--no-store",
            "--json",
        ]));
        let want = Command::new(tool).arg(&src).output().expect(tool);
        let want = String::from_utf8_lossy(&want.stdout).split_whitespace().next().unwrap_or_default().to_string();
        assert_eq!(v["checksum"], algo, "{v}");
        assert_eq!(v["files"][0]["checksum"], want, "{algo}: {v}");
    }
    let o = run(&["copy", src.to_str().expect("p"), d.join("x").to_str().expect("p"), "--checksum", "crc32"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("give one of md5, sha256, adler32"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_unreadable_file_is_named_and_the_rest_of_the_directory_goes_on() {
    let _heavy = crate::heavy();
    let d = tmpdir("unreadable");
    let src = d.join("src");
    write(&src.join("a.dat"), &bytes(70_000, 13));
    write(&src.join("secret.dat"), b"not for nobody");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(src.join("secret.dat"), std::fs::Permissions::from_mode(0o000)).expect("chmod");
    for p in [&d, &src] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let dst = d.join("dst");
    std::fs::create_dir_all(&dst).expect("dst");
    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    // root reads every file: as root the copy runs as nobody (setpriv), as a user as that user
    let mut c = if gridperf::host::is_root() {
        let mut c = Command::new("setpriv");
        crate::hermetic(&mut c).args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN, "copy"]);
        c
    } else {
        let mut c = crate::bin();
        c.arg("copy");
        c
    };
    let o = c
        .arg(&src)
        .arg(format!("{}/", dst.display()))
        .args(["--no-store", "--json"])
        .env("HOME", &d)
        .output()
        .expect("copy");
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("1 source files could not be read and were not copied: src/secret.dat"),
        "{}",
        stderr(&o)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let skipped = v["skipped"].as_array().expect("skipped");
    assert!(
        skipped.iter().any(|s| s[0] == "src/secret.dat" && s[1].as_str().unwrap_or("").starts_with("cannot read")),
        "{v}"
    );
    assert!(std::fs::read(dst.join("src/a.dat")).expect("the readable file") == bytes(70_000, 13));
    assert!(!dst.join("src/secret.dat").exists());
    let _ = std::fs::remove_dir_all(&d);
}

/// A relay in the middle: the client talks to ADDR:PORT, which forwards
/// to the agent on 127.0.0.1, and relays the data connections too (their
/// port read from the agent's ready message as it passes, and listened on
/// at ADDR), keeping what the client sent on them and flipping the byte at
/// `flip` of the first one, if asked. ADDR is a loopback address of the
/// relay's own (127.77.0.N): the agent's data port is free on 127.0.0.1,
/// not on an address other tests' agents and relays listen on (on
/// 127.0.0.2 one in a CI run found it taken, by luck).
struct Relay {
    addr: std::net::Ipv4Addr,
    port: u16,
    seen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

fn relay(agent_port: u16, flip: Option<usize>) -> Relay {
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};
    static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(1);
    let addr = Ipv4Addr::new(127, 77, 0, NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed).max(1));
    let l = TcpListener::bind((addr, 0)).expect("bind the relay's address");
    let port = l.local_addr().expect("addr").port();
    let seen: Arc<Mutex<Vec<u8>>> = Arc::default();
    let kept = seen.clone();
    let pipe = |mut from: TcpStream, mut to: TcpStream, keep: Option<Arc<Mutex<Vec<u8>>>>, flip: Option<usize>| {
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            let mut at = 0usize;
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if let Some(f) = flip.filter(|&f| f >= at && f < at + n) {
                    buf[f - at] ^= 0x01;
                }
                at += n;
                if let Some(k) = &keep {
                    let mut k = k.lock().expect("seen");
                    if k.len() < 16 << 20 {
                        k.extend_from_slice(&buf[..n]);
                    }
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(std::net::Shutdown::Write);
        });
    };
    std::thread::spawn(move || {
        let Ok((client, _)) = l.accept() else { return };
        let agent = TcpStream::connect(("127.0.0.1", agent_port)).expect("the agent");
        pipe(client.try_clone().expect("clone"), agent.try_clone().expect("clone"), None, None);
        // the agent's side of the control channel: find the data port before passing the ready on
        let (mut from, mut to) = (agent, client);
        let mut text = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut relayed = false;
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if !relayed {
                text.extend_from_slice(&buf[..n]);
                let s = String::from_utf8_lossy(&text).into_owned();
                if let Some(i) = s.find("\"tcp_port\":") {
                    let digits: String = s[i + 11..].chars().take_while(char::is_ascii_digit).collect();
                    if let Ok(dp) = digits.parse::<u16>() {
                        relayed = true;
                        let dl = TcpListener::bind((addr, dp)).expect("bind the data port");
                        let keep = kept.clone();
                        std::thread::spawn(move || {
                            let mut first = true;
                            while let Ok((c, _)) = dl.accept() {
                                let a = TcpStream::connect(("127.0.0.1", dp)).expect("the agent's data port");
                                pipe(
                                    c.try_clone().expect("clone"),
                                    a.try_clone().expect("clone"),
                                    Some(keep.clone()),
                                    flip.filter(|_| first),
                                );
                                pipe(a, c, None, None);
                                first = false;
                            }
                        });
                    }
                }
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    Relay { addr, port, seen }
}

#[test]
fn an_encrypted_copy_shows_nothing_on_the_wire_and_a_byte_altered_there_stops_it() {
    let _heavy = crate::heavy();
    let d = tmpdir("encrypt");
    let (root, here) = (d.join("root"), d.join("here"));
    std::fs::create_dir_all(&root).expect("root");
    let data = bytes(3 << 20, 21);
    write(&here.join("f.dat"), &data);
    let src = here.join("f.dat");
    let src = src.to_str().expect("p");
    // the wire's bytes hold the file's, in the clear, without --encrypt (so the check below can fail)
    let (_agent, agent_port) = crate::serve_on("127.0.0.1", &["--root", root.to_str().expect("p")]);
    let holds = |seen: &[u8]| seen.windows(64).any(|w| w == &data[1 << 20..(1 << 20) + 64]);
    // a copy through a relay (flipping the byte at `flip` of the first data connection)
    let through = |name: &str, streams: &str, flip: Option<usize>, extra: &[&str]| {
        let r = relay(agent_port, flip);
        let (port, dst) = (r.port.to_string(), format!("{}:{name}", r.addr));
        let mut a = vec!["copy", src, &dst, "--port", &port, "-P", streams, "--block", "1M", "--no-store"];
        a.extend_from_slice(extra);
        (run(&a), r)
    };
    let (o, r) = through("plain.dat", "2", None, &["--json"]);
    let v = json(&o);
    assert!(v["encryption"].is_null(), "{v}");
    let unsealed = |a: &serde_json::Value| a.as_array().is_some_and(|a| a.iter().all(|s| s["crypt_ns"] == 0));
    assert!(unsealed(&v["per_stream"]) && unsealed(&v["agent_streams"]), "{v}");
    assert!(holds(&r.seen.lock().expect("seen")), "the relay saw the file in the clear");
    // with it: the same file, identical at the agent, and never on the wire
    let (o, r) = through("sealed.dat", "2", None, &["--encrypt", "--json"]);
    let v = json(&o);
    assert!(std::fs::read(root.join("sealed.dat")).expect("sealed") == data, "the copy differs");
    let seen = r.seen.lock().expect("seen").clone();
    assert!(seen.len() > data.len(), "the relay carried the data connections: {} bytes", seen.len());
    assert!(!holds(&seen), "the file's bytes crossed the wire in the clear");
    assert!(v["encryption"].as_str().unwrap_or_default().contains("no key"), "{v}");
    // both ends sealed and opened, and say how long it took
    let sealed = |streams: &serde_json::Value| {
        streams.as_array().is_some_and(|a| {
            a.iter().any(|s| s["blocks"].as_u64() > Some(0))
                && a.iter().all(|s| s["blocks"].as_u64() == Some(0) || s["crypt_ns"].as_u64() > Some(0))
        })
    };
    assert!(sealed(&v["per_stream"]) && sealed(&v["agent_streams"]), "{v}");
    // a byte altered in the middle of the first block: the writing end stops
    // the copy, nothing renamed; nothing verified arrived, so no partial
    // file is left reserved either
    let (o, _) = through("altered.dat", "1", Some(100_000), &["--encrypt"]);
    assert!(!o.status.success(), "an altered copy succeeded");
    assert!(stderr(&o).contains("failed authentication: altered on the way"), "{}", stderr(&o));
    assert!(!root.join("altered.dat").exists());
    crate::wait_until(Duration::from_secs(5), "the empty partial file removed", || {
        !root.join(".altered.dat.gridperf-partial").exists() && !root.join(".altered.dat.gridperf-manifest").exists()
    });
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_agent_that_requires_encryption_refuses_a_plain_copy_and_binds_the_keys_to_the_session() {
    use std::os::unix::fs::PermissionsExt;
    let _heavy = crate::heavy();
    let d = tmpdir("encrypt-auth");
    let (root, here, key, authorized) = (d.join("root"), d.join("here"), d.join("alice.key"), d.join("authorized"));
    std::fs::create_dir_all(&root).expect("root");
    let o = run(&["keygen", "alice", "-o", key.to_str().expect("p")]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(&authorized, &o.stdout).expect("authorized");
    std::fs::set_permissions(&authorized, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let data = bytes(700_001, 22);
    write(&here.join("f.dat"), &data);
    let (_agent, port) = crate::serve_on(
        "127.0.0.1",
        &["--root", root.to_str().expect("p"), "--auth", authorized.to_str().expect("p"), "--encrypt"],
    );
    let p = port.to_string();
    let src = here.join("f.dat");
    let copy = |dst: &str, extra: &[&str]| {
        let mut a = vec![
            "copy",
            src.to_str().expect("p"),
            dst,
            "--port",
            &p,
            "--key",
            key.to_str().expect("p"),
            "--block",
            "64K",
            "--no-store",
        ];
        a.extend_from_slice(extra);
        run(&a)
    };
    let o = copy("127.0.0.1:plain.dat", &[]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("only encrypted (serve --encrypt): give copy --encrypt"), "{}", stderr(&o));
    assert!(!root.join("plain.dat").exists());
    let v = json(&copy("127.0.0.1:sealed.dat", &["--encrypt", "--json"]));
    assert!(v["encryption"].as_str().unwrap_or_default().contains("bound to the session's key"), "{v}");
    assert!(std::fs::read(root.join("sealed.dat")).expect("sealed") == data);
    // a pull, sealed the other way
    let back = d.join("back.dat");
    let v = json(&copy_pull(&p, key.to_str().expect("p"), back.to_str().expect("p")));
    assert_eq!(v["direction"], "pull");
    assert!(std::fs::read(&back).expect("pulled") == data);
    // an agent that asks for no key (a fake beside the real one) gets no byte from a client with --key
    let fake_root = d.join("fake");
    std::fs::create_dir_all(&fake_root).expect("fake root");
    let (_fake, fake_port) = crate::serve_on("127.0.0.1", &["--root", fake_root.to_str().expect("p")]);
    let fp = fake_port.to_string();
    let o = run(&[
        "copy",
        src.to_str().expect("p"),
        "127.0.0.1:taken.dat",
        "--port",
        &fp,
        "--key",
        key.to_str().expect("p"),
        "--encrypt",
        "--no-store",
    ]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("asks for no key, but --key was given"), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&fake_root).expect("fake root").count(), 0, "nothing reached the fake agent");
    let _ = std::fs::remove_dir_all(&d);
}

fn copy_pull(port: &str, key: &str, dst: &str) -> Output {
    run(&[
        "copy",
        "127.0.0.1:sealed.dat",
        dst,
        "--port",
        port,
        "--key",
        key,
        "--encrypt",
        "--block",
        "64K",
        "--no-store",
        "--json",
    ])
}

#[test]
fn a_static_split_gives_each_stream_its_slice_as_bbftp_does() {
    let _heavy = crate::heavy();
    let d = tmpdir("static");
    let data = bytes(4 << 20, 9);
    write(&d.join("src/f.dat"), &data);
    let (src, dst) = (d.join("src/f.dat").display().to_string(), format!("{}/", d.join("dst").display()));
    let v = json(&run(&["copy", &src, &dst, "-P", "4", "--block", "64K", "--split", "static", "--no-store", "--json"]));
    assert!(std::fs::read(d.join("dst/f.dat")).expect("copied") == data);
    // 64 blocks, 16 each: no stream takes another's (the dynamic queue would let a fast one take more)
    let blocks: Vec<u64> =
        v["per_stream"].as_array().expect("streams").iter().filter_map(|s| s["blocks"].as_u64()).collect();
    assert_eq!(blocks, [16, 16, 16, 16], "{v}");
    assert_eq!(v["tail_blocks"], 0);
    // an adaptive count has no fixed slices to give
    let o = run(&["copy", &src, &dst, "-P", "auto", "--split", "static", "--no-store"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--split static gives each of a fixed number of streams its slice"), "{}", stderr(&o));
    let o = run(&["copy", &src, &dst, "-P", "9..2", "--no-store"]);
    assert!(stderr(&o).contains("auto, or MIN..MAX"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn json_stream_prints_a_line_a_second_then_the_result() {
    let _heavy = crate::heavy();
    let d = tmpdir("jsonl");
    let data = bytes(6 << 20, 11);
    write(&d.join("src/f.dat"), &data);
    let (src, dst) = (d.join("src/f.dat").display().to_string(), format!("{}/", d.join("dst").display()));
    // paced to 20 Mbit/s a stream: about 2.5 s
    let o = run(&["copy", &src, &dst, "-P", "1", "--block", "64K", "--pacing", "20M", "--no-store", "--json-stream"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    let intervals: Vec<&serde_json::Value> = lines.iter().filter(|l| l["event"] == "interval").collect();
    assert!(intervals.len() >= 2, "{text}");
    assert_eq!(intervals[0]["data"]["t_s"], 1.0, "{text}");
    let bps = intervals[0]["data"]["bps"].as_f64().unwrap_or(0.0);
    assert!((5e6..40e6).contains(&bps), "{bps}: {text}");
    let end = lines.last().expect("lines");
    assert_eq!(end["event"], "end");
    assert_eq!(end["data"]["schema"], "gridperf.copy/1");
    assert_eq!(end["data"]["bytes_moved"], data.len() as u64);
    assert!(std::fs::read(d.join("dst/f.dat")).expect("copied") == data);
    let o = run(&["copy", &src, &dst, "--json", "--json-stream", "--no-store"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

/// Agents on 127.0.0.1 to 127.0.0.4, one port (a copy names every agent
/// on it): sources rooted at `src` (storage they share), destinations at
/// `dst` (or each its own, `dst` then `dst2`).
fn four_agents(src: &Path, dst: &Path, dst2: &Path) -> (Vec<crate::Served>, String) {
    let roots = [src, src, dst, dst2];
    agents_on(&roots)
}

/// An agent on 127.0.0.k (k from 1) for each root, all on one port.
fn agents_on(roots: &[&Path]) -> (Vec<crate::Served>, String) {
    let hosts: Vec<String> = (1..=roots.len()).map(|k| format!("127.0.0.{k}")).collect();
    let agents: Vec<(&str, Vec<&str>)> =
        hosts.iter().zip(roots).map(|(h, r)| (h.as_str(), vec!["--root", r.to_str().expect("p")])).collect();
    let (served, port) = crate::serve_on_one_port(&agents);
    (served, port.to_string())
}

#[test]
fn host_pairs_share_one_queue_and_a_lost_pair_gives_its_blocks_to_the_others() {
    let _heavy = crate::heavy();
    let d = tmpdir("pairs");
    let (src, dst) = (d.join("src"), d.join("dst"));
    std::fs::create_dir_all(&dst).expect("dst");
    let data = bytes(48 << 20, 21);
    write(&src.join("f.dat"), &data);
    let (mut agents, port) = four_agents(&src, &dst, &dst);
    // two pairs, each writing through its own destination agent into the storage they share
    let copy = |extra: &[&str]| {
        let mut a = vec![
            "copy",
            "127.0.0.1:f.dat,127.0.0.2:f.dat",
            "127.0.0.3:f.dat,127.0.0.4:f.dat",
            "--port",
            &port,
            "-P",
            "2",
            "--block",
            "1M",
            "--force",
            "--no-store",
            "--json",
        ];
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let v = json(&run(&copy(&[]).iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(v["direction"], "third-party");
    assert!(std::fs::read(dst.join("f.dat")).expect("copied") == data, "the assembled copy differs");
    assert_eq!(v["files"][0]["blake3"], blake3_hex(&data).as_str());
    let pairs = v["pairs"].as_array().expect("pairs");
    assert_eq!(pairs.len(), 2, "{v}");
    let moved: Vec<u64> = pairs.iter().map(|p| p["bytes"].as_u64().expect("bytes")).collect();
    assert_eq!(moved.iter().sum::<u64>(), data.len() as u64, "{v}");
    assert!(moved.iter().all(|&b| b >= 4 << 20), "one queue: both pairs carry blocks: {moved:?}");
    assert!(std::fs::read_dir(&dst).expect("dst").count() == 1, "a partial file or journal was left");
    // the same destination: every pair into the first destination agent
    let mut same = copy(&["--same-destination"]);
    same[2] = "127.0.0.3:g.dat,127.0.0.4:g.dat".into();
    let v = json(&run(&same.iter().map(String::as_str).collect::<Vec<_>>()));
    assert!(std::fs::read(dst.join("g.dat")).expect("copied") == data);
    let into: Vec<&str> =
        v["pairs"].as_array().expect("pairs").iter().filter_map(|p| p["destination"].as_str()).collect();
    assert_eq!(into, ["127.0.0.3:g.dat", "127.0.0.3:g.dat"]);
    // a source agent dies mid-copy: its blocks go to the other pair, the copy completes and says so
    let mut h = copy(&["--pacing", "40M"]);
    h[2] = "127.0.0.3:h.dat,127.0.0.4:h.dat".into();
    let child = crate::bin().args(&h).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("copy");
    std::thread::sleep(Duration::from_millis(1500));
    let _ = agents[1].kill();
    let o = child.wait_with_output().expect("copy");
    let v = json(&o);
    assert!(std::fs::read(dst.join("h.dat")).expect("copied") == data, "the copy after a lost pair differs");
    let lost: Vec<&serde_json::Value> =
        v["events"].as_array().expect("events").iter().filter(|e| e["kind"] == "pair-lost").collect();
    assert_eq!(lost.len(), 1, "{v}");
    assert!(lost[0]["why"]
        .as_str()
        .is_some_and(|w| w.contains("127.0.0.2") && w.contains("the other pairs take them")));
    assert!(v["pairs"][1]["error"].is_string() && v["pairs"][0]["error"].is_null(), "{v}");
    assert!(stderr(&o).contains("pair-lost"), "said as it happened: {}", stderr(&o));
    // every source agent dies: a clear error, and what arrived resumes
    agents[1] = crate::serve_at("127.0.0.2", port.parse().expect("port"), &["--root", src.to_str().expect("p")]);
    let mut k = copy(&["--pacing", "40M"]);
    k[2] = "127.0.0.3:k.dat,127.0.0.4:k.dat".into();
    let child = crate::bin().args(&k).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("copy");
    journal_reaches(&dst.join(".k.dat.gridperf-manifest"), 8);
    let _ = agents[0].kill();
    let _ = agents[1].kill();
    let t = Instant::now();
    let o = child.wait_with_output().expect("copy");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("every host pair was lost") && stderr(&o).contains("--resume"), "{}", stderr(&o));
    assert!(t.elapsed() < Duration::from_secs(15), "the client waited {:?} on dead agents", t.elapsed());
    assert!(!dst.join("k.dat").exists(), "a file not whole was put in place");
    let p: u16 = port.parse().expect("port");
    agents[0] = crate::serve_at("127.0.0.1", p, &["--root", src.to_str().expect("p")]);
    agents[1] = crate::serve_at("127.0.0.2", p, &["--root", src.to_str().expect("p")]);
    let mut k = copy(&["--resume"]);
    k[2] = "127.0.0.3:k.dat,127.0.0.4:k.dat".into();
    k.retain(|a| a != "--force");
    let v = json(&run(&k.iter().map(String::as_str).collect::<Vec<_>>()));
    assert!(std::fs::read(dst.join("k.dat")).expect("resumed") == data, "the resumed copy differs");
    assert!(v["files"][0]["kept"].as_u64().unwrap_or(0) >= 8 << 20, "{v}");
    let _ = std::fs::remove_dir_all(&d);
}

fn blake3_hex(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

#[test]
fn host_pairs_refuse_sources_that_differ_and_destinations_that_share_no_storage() {
    let _heavy = crate::heavy();
    let d = tmpdir("pairs-bad");
    let (src, other, dst, dst2) = (d.join("src"), d.join("other"), d.join("dst"), d.join("dst2"));
    let data = bytes(12 << 20, 22);
    write(&src.join("f.dat"), &data);
    let mut changed = data.clone();
    changed[5 << 20] ^= 1;
    write(&other.join("f.dat"), &changed);
    for p in [&dst, &dst2] {
        std::fs::create_dir_all(p).expect("dst");
    }
    // sources with the same name and size, one byte apart: refused before any byte moves
    let (_agents, p2) = agents_on(&[&src, &other, &dst, &dst2]);
    let o = run(&["copy", "127.0.0.1:f.dat,127.0.0.2:f.dat", "127.0.0.3:f.dat", "--port", &p2, "--no-store"]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("the sources do not hold the same data"), "{}", stderr(&o));
    assert!(stderr(&o).contains("its BLAKE3 differs"), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&dst).expect("dst").count(), 0, "something was written");
    // different destinations that do not see the same storage: refused before any byte moves
    let (_same_sources, port) = four_agents(&src, &dst, &dst2);
    let o = run(&[
        "copy",
        "127.0.0.1:f.dat,127.0.0.2:f.dat",
        "127.0.0.3:f.dat,127.0.0.4:f.dat",
        "--port",
        &port,
        "--no-store",
    ]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("does not share the first one's storage"), "{}", stderr(&o));
    assert!(!dst.join("f.dat").exists() && std::fs::read_dir(&dst2).expect("dst2").count() == 0);
    // each agent once, one destination or one per source
    let o = run(&["copy", "127.0.0.1:f.dat,127.0.0.1:f.dat", "127.0.0.3:f.dat", "--port", &p2, "--no-store"]);
    assert_eq!(o.status.code(), Some(2), "an agent named twice: {}", stderr(&o));
    let o = run(&["copy", "127.0.0.1:f.dat", "127.0.0.3:f.dat,127.0.0.4:f.dat", "--port", &p2, "--no-store"]);
    assert_eq!(o.status.code(), Some(2), "two destinations for one source: {}", stderr(&o));
    assert!(stderr(&o).contains("one per source"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

/// What goes where, as the README says (issue 32: the trailing-slash rule
/// was not written down): a directory is copied as itself with or without
/// a trailing slash (rsync's `dir/` would copy its contents), a file lands
/// beneath a destination ending in `/` or an existing directory, else at
/// the destination's name.
#[test]
fn a_directory_is_copied_as_itself_with_or_without_a_trailing_slash() {
    let d = tmpdir("slash");
    let src = d.join("data");
    write(&src.join("a"), b"a");
    write(&src.join("sub/b"), b"b");
    std::fs::create_dir_all(d.join("exists")).expect("mkdir");
    let s = |p: &str| d.join(p).to_str().expect("utf-8").to_string();
    for (from, to, expect) in [
        (format!("{}/", s("data")), format!("{}/", s("o1")), "o1/data/sub/b"),
        (s("data"), format!("{}/", s("o2")), "o2/data/sub/b"),
        (format!("{}/", s("data")), s("o3"), "o3/data/sub/b"),
        (s("data/a"), format!("{}/", s("o4")), "o4/a"),
        (s("data/a"), s("exists"), "exists/a"),
        (s("data/a"), s("o5"), "o5"),
    ] {
        let o = run(&["copy", &from, &to, "--no-store"]);
        assert!(o.status.success(), "copy {from} {to}: {}", stderr(&o));
        assert!(d.join(expect).is_file(), "copy {from} {to} did not write {expect}");
    }
    let _ = std::fs::remove_dir_all(&d);
}
