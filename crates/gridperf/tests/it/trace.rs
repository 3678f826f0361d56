//! gridperf trace through the binary, on captures written here whose
//! contents are known: a transfer with a loss, a truncated file, frames
//! cut by the snap length, a link type it does not read, no TCP at all.

use gridperf_core::capture::{PcapWriter, ACK, LINKTYPE_RAW, SYN};
use std::path::PathBuf;
use std::process::Output;

fn run(args: &[&str]) -> Output {
    crate::bin().args(args).output().expect("run gridperf")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gridperf-trace-{}-{name}", std::process::id()))
}

/// An IPv4 TCP segment from 10.0.0.1:40000 (`up`) or back.
fn segment(up: bool, seq: u32, ack: u32, flags: u8, win: u16, opts: &[u8], payload: usize) -> Vec<u8> {
    let off = 20 + opts.len();
    let total = 20 + off + payload;
    let (a, b) = if up { ([10, 0, 0, 1], [10, 0, 0, 2]) } else { ([10, 0, 0, 2], [10, 0, 0, 1]) };
    let (pa, pb) = if up { (40000u16, 5201u16) } else { (5201, 40000) };
    let mut p = vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64, 6, 0, 0];
    p.extend_from_slice(&a);
    p.extend_from_slice(&b);
    p.extend_from_slice(&pa.to_be_bytes());
    p.extend_from_slice(&pb.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ack.to_be_bytes());
    p.push(((off / 4) as u8) << 4);
    p.push(flags);
    p.extend_from_slice(&win.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]);
    p.extend_from_slice(opts);
    p.extend(std::iter::repeat_n(0u8, payload));
    p
}

/// A transfer of 200 segments of 1000 bytes at 10 ms RTT, captured at the
/// sender, segment 50 lost and sent again after three duplicate ACKs.
fn transfer(snap: usize) -> Vec<(i64, Vec<u8>)> {
    let ms = 1_000_000i64;
    let t0 = 1_700_000_000_000_000_000i64;
    let mut f = vec![
        (t0, segment(true, 0, 0, SYN, 65535, &[2, 4, 3, 232, 3, 3, 2, 1], 0)),
        (t0 + 10 * ms, segment(false, 900, 1, SYN | ACK, 65535, &[2, 4, 3, 232, 3, 3, 2, 1], 0)),
        (t0 + 10 * ms + 50_000, segment(true, 1, 901, ACK, 1000, &[], 0)),
    ];
    let mut t = t0 + 11 * ms;
    for k in 0..200u32 {
        f.push((t, segment(true, 1 + k * 1000, 901, ACK, 1000, &[], 1000)));
        let acked = if k >= 50 { 50 } else { k + 1 };
        f.push((t + 10 * ms, segment(false, 901, 1 + acked * 1000, ACK, 2000, &[], 0)));
        if k == 53 {
            f.push((t + 10 * ms + 1000, segment(true, 1 + 50 * 1000, 901, ACK, 1000, &[], 1000)));
        }
        t += ms;
    }
    f.push((t + 20 * ms, segment(false, 901, 1 + 200 * 1000, ACK, 2000, &[], 0)));
    f.sort_by_key(|x| x.0);
    f.into_iter().map(|(t, p)| (t, p[..p.len().min(snap)].to_vec())).collect()
}

fn write(path: &PathBuf, link: u16, frames: &[(i64, Vec<u8>)]) {
    let mut w = PcapWriter::new(Vec::new(), link, 65535).expect("header");
    for (t, p) in frames {
        // the length on the wire from the IP header, whatever was kept
        let orig = if p.len() >= 4 { u32::from(u16::from_be_bytes([p[2], p[3]])) } else { p.len() as u32 };
        w.write(*t, p, orig.max(p.len() as u32)).expect("frame");
    }
    std::fs::write(path, w.into_inner()).expect("write");
}

#[test]
fn a_known_transfer_is_reconstructed_and_bad_captures_are_named() {
    let path = tmp("known.pcap");
    write(&path, LINKTYPE_RAW, &transfer(96));
    let o = run(&["trace", path.to_str().expect("p"), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["schema"], "gridperf.trace/1");
    assert_eq!(v["connections"].as_array().map(Vec::len), Some(1));
    let c = &v["connections"][0];
    assert_eq!(c["handshake"], true);
    assert!(c["capture_point"].as_str().is_some_and(|p| p.starts_with("near 10.0.0.1:40000")), "{c}");
    let d = &c["directions"][0];
    assert_eq!(d["bytes_acked"], 200_000);
    assert_eq!((d["retransmits"].as_u64(), d["fast"].as_u64()), (Some(1), Some(1)));
    assert_eq!(d["window_scale"], 2);
    // the SYN-ACK's own window is not scaled: 65535; the ACKs' 2000 << 2
    assert_eq!(d["max_window"], 65535);
    assert!(d["series"].as_array().is_some_and(|s| s.iter().any(|p| p["window"] == 8000)), "{d}");
    assert_eq!(d["rtt_min_ms"], 10.0);
    // the snap length kept 96 bytes of each 1040-byte packet: nothing is left out for it
    assert_eq!(v["skipped"]["short"], 0);
    // the CSV: one row per interval with traffic
    let o = run(&["trace", path.to_str().expect("p"), "--csv", "-i", "50ms"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.starts_with("connection,from,to,t_s,acked_bytes,bps,in_flight_bytes,window_bytes"), "{text}");
    assert!(text.lines().count() >= 5, "{text}");

    // truncated: read to the last whole packet, and said
    let bytes = std::fs::read(&path).expect("read");
    let cut = tmp("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() - 30]).expect("write");
    let o = run(&["trace", cut.to_str().expect("p"), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("the capture ends inside a packet record at byte"), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["frames"].as_u64(), Some(transfer(96).len() as u64 - 1));

    // a snap length shorter than the headers: those frames counted, left out
    let short = tmp("short.pcap");
    write(&short, LINKTYPE_RAW, &transfer(30));
    let o = run(&["trace", short.to_str().expect("p"), "--json"]);
    assert_eq!(o.status.code(), Some(4), "nothing left: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["skipped"]["short"].as_u64(), Some(transfer(30).len() as u64));
    assert!(stderr(&o).contains("no TCP connection"), "{}", stderr(&o));

    // a link type it does not read: named
    let wifi = tmp("wifi.pcap");
    write(&wifi, 105, &transfer(96));
    let o = run(&["trace", wifi.to_str().expect("p")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("IEEE 802.11") && stderr(&o).contains("reads Ethernet"), "{}", stderr(&o));

    // no TCP: a UDP datagram
    let udp = tmp("udp.pcap");
    let mut dgram = segment(true, 0, 0, 0, 0, &[], 10);
    dgram[9] = 17;
    write(&udp, LINKTYPE_RAW, &[(1, dgram)]);
    let o = run(&["trace", udp.to_str().expect("p")]);
    assert_eq!(o.status.code(), Some(4));
    assert!(stderr(&o).contains("1 not TCP"), "{}", stderr(&o));

    // not a capture at all, and frames out of time order
    let not = tmp("not.pcap");
    std::fs::write(&not, b"hello, this is text").expect("write");
    let o = run(&["trace", not.to_str().expect("p")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not a pcap or pcapng capture"), "{}", stderr(&o));
    let mut frames = transfer(96);
    frames.swap(10, 11);
    frames[10].0 += 5_000_000;
    let ooo = tmp("ooo.pcap");
    write(&ooo, LINKTYPE_RAW, &frames);
    let o = run(&["trace", ooo.to_str().expect("p"), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(v["out_of_order"].as_u64().is_some_and(|n| n >= 1), "{}", v["out_of_order"]);
    for p in [path, cut, short, wifi, udp, not, ooo] {
        let _ = std::fs::remove_file(p);
    }
}

/// Regression (issue 32): the report's time-sequence plot marked only the
/// first 20 losses (of 4,548) as a stack of labels. Every interval that
/// sent a segment again is now a tick, and the legend counts them all.
#[test]
fn the_report_marks_every_retransmission_of_a_trace() {
    let ms = 1_000_000i64;
    let t0 = 1_700_000_000_000_000_000i64;
    let mut f = vec![
        (t0, segment(true, 0, 0, SYN, 65535, &[2, 4, 3, 232, 3, 3, 2, 1], 0)),
        (t0 + 10 * ms, segment(false, 900, 1, SYN | ACK, 65535, &[2, 4, 3, 232, 3, 3, 2, 1], 0)),
        (t0 + 10 * ms + 50_000, segment(true, 1, 901, ACK, 1000, &[], 0)),
    ];
    // 300 segments 10 ms apart, each acknowledged 10 ms later; 40 of them
    // (every 7th) sent again 1 ms after the first time
    let mut t = t0 + 11 * ms;
    let mut again = 0u64;
    for k in 0..300u32 {
        f.push((t, segment(true, 1 + k * 1000, 901, ACK, 1000, &[], 1000)));
        if k % 7 == 0 && again < 40 {
            f.push((t + ms, segment(true, 1 + k * 1000, 901, ACK, 1000, &[], 1000)));
            again += 1;
        }
        f.push((t + 10 * ms, segment(false, 901, 1 + (k + 1) * 1000, ACK, 2000, &[], 0)));
        t += 10 * ms;
    }
    f.sort_by_key(|x| x.0);
    let dir = tmp("rug");
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("again.pcap");
    write(&path, LINKTYPE_RAW, &f);
    let db = dir.join("results.db");
    let (p, d) = (path.to_str().expect("utf-8"), db.to_str().expect("utf-8"));
    let o = run(&["trace", p, "--json", "--db", d]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let direction = &v["connections"][0]["directions"][0];
    assert_eq!(direction["retransmits"].as_u64(), Some(again), "{direction}");
    let intervals =
        direction["series"].as_array().expect("series").iter().filter(|p| p["retransmits"].as_u64() > Some(0)).count();
    assert!(intervals >= 20, "the capture spreads them over many intervals: {intervals}");

    let svgs = dir.join("svg");
    let report = dir.join("report.html");
    let o = run(&["report", "--db", d, "-o", report.to_str().expect("utf-8"), "--svg-dir", svgs.to_str().expect("p")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let seq = std::fs::read_dir(&svgs)
        .expect("svg dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with("-sequence.svg"))
        .expect("a time-sequence plot");
    let svg = std::fs::read_to_string(seq).expect("read");
    assert!(svg.contains(&format!("data-count=\"{intervals}\"")), "a tick for each of {intervals} intervals: {svg}");
    assert!(svg.contains(&format!("retransmitted ({again} segments)")), "{svg}");
    assert!(!svg.contains(">loss</text>"), "no stack of labels: {svg}");
    let _ = std::fs::remove_dir_all(&dir);
}
