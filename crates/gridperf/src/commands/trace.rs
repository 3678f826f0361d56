//! `gridperf trace FILE`: a packet capture's TCP connections over time,
//! and the same verdict `stream` gives from TCP_INFO, from the capture alone.

use super::Output;
use crate::error::{Error, Result};
use gridperf_core::capture::trace::Analyzer;
use gridperf_core::capture::{decode, link_name, CaptureError, CaptureReader, Skip};
use gridperf_core::model::{TraceReport, TraceSkipped, TRACE_SCHEMA};
use std::time::Duration;

/// What `gridperf trace` runs, checked.
pub struct Opts {
    pub file: std::path::PathBuf,
    pub interval: Duration,
    /// ADDR, ADDR:PORT or :PORT: only connections with such an endpoint.
    pub filter: Option<String>,
    pub store: crate::store::StoreChoice,
}

/// Whether an endpoint matches the filter.
fn matches(filter: &str, end: std::net::SocketAddr) -> bool {
    if let Some(port) = filter.strip_prefix(':') {
        return port.parse::<u16>().is_ok_and(|p| p == end.port());
    }
    if let Ok(a) = filter.parse::<std::net::SocketAddr>() {
        return a == end;
    }
    filter.parse::<std::net::IpAddr>().is_ok_and(|ip| ip == end.ip())
}

/// Reads the capture at `path` into its report (the analysis of `trace`, and of `stream --capture`);
/// `filter` as `cli/trace.rs` checked it.
pub fn analyse(
    path: &std::path::Path,
    interval: Duration,
    filter: Option<&str>,
    progress: Option<&super::progress::Bar>,
) -> Result<TraceReport> {
    let file = std::fs::File::open(path).map_err(|e| Error::usage(format!("{}: {e}", path.display())))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut cap = CaptureReader::new(reader).map_err(|e| Error::usage(format!("{}: {e}", path.display())))?;
    if let Some(b) = progress {
        b.set_length(size);
    }
    let mut an = Analyzer::new(interval.as_nanos() as u64);
    let mut r = TraceReport {
        schema: TRACE_SCHEMA.into(),
        file: path.display().to_string(),
        interval_ms: interval.as_millis() as u64,
        ..TraceReport::default()
    };
    let mut skipped = TraceSkipped::default();
    let mut links: Vec<u16> = Vec::new();
    let mut first: Option<i64> = None;
    let mut last_t = i64::MIN;
    let mut data = Vec::with_capacity(65536);
    while let Some(frame) = cap.next_frame_into(&mut data) {
        let f = match frame {
            Ok(f) => f,
            Err(e @ (CaptureError::Truncated { .. } | CaptureError::Corrupt { .. })) => {
                r.ended = Some(e.to_string());
                break;
            }
            Err(e) => return Err(Error::usage(format!("{}: {e}", path.display()))),
        };
        r.frames += 1;
        if !links.contains(&f.link) {
            links.push(f.link);
        }
        first.get_or_insert(f.t_ns);
        if f.t_ns < last_t {
            r.out_of_order += 1;
        }
        last_t = last_t.max(f.t_ns);
        match decode(f.link, &data) {
            Ok(seg) => {
                let keep = filter.is_none_or(|flt| {
                    seg.src.is_some_and(|a| matches(flt, a)) || seg.dst.is_some_and(|a| matches(flt, a))
                });
                if keep {
                    r.tcp_segments += 1;
                    an.segment(f.t_ns, &seg);
                }
            }
            Err(Skip::NotTcp) => skipped.not_tcp += 1,
            Err(Skip::Short) => skipped.short += 1,
            Err(Skip::Fragment) => skipped.fragments += 1,
            Err(Skip::Link(l)) => {
                return Err(Error::usage(format!(
                    "{}: frames of link type {}: gridperf trace reads Ethernet (with VLAN tags), Linux cooked \
                     (SLL, SLL2), raw IP and loopback captures",
                    path.display(),
                    link_name(l)
                )))
            }
        }
        if let Some(b) = progress {
            if r.frames % 4096 == 0 {
                b.set_position(cap.offset());
            }
        }
    }
    r.format = cap.format_name().into();
    r.links = links.iter().map(|&l| link_name(l)).collect();
    skipped.beyond_limit = an.beyond_limit;
    r.skipped = skipped;
    r.start_unix_s = first.map_or(0.0, |t| t as f64 / 1e9);
    r.seconds = first.map_or(0.0, |f| (last_t - f) as f64 / 1e9);
    r.connections = an.finish();
    if r.skipped.short > 0 {
        r.cannot_tell.push(format!(
            "{} frames were cut by the snap length before the end of their TCP header: left out",
            r.skipped.short
        ));
    }
    r.cannot_tell.push(
        "a capture does not see the sender's congestion window or send buffer: the window is estimated at each loss \
         (the data in flight then), and a sender held back by its send buffer reads as application-limited"
            .into(),
    );
    r.cannot_tell.push(
        "in flight is as seen at the capture point: at the receiver's side it lags the sender's by the path's delay"
            .into(),
    );
    if r.connections.iter().any(|c| !c.handshake) {
        r.cannot_tell.push(
            "a connection whose handshake is not in the capture has unknown window scales: its windows are shown as \
             sent (unscaled)"
                .into(),
        );
    }
    Ok(r)
}

pub fn run(o: Opts, out: &mut Output) -> Result<()> {
    o.store.check()?;
    let started = std::time::SystemTime::now();
    let bar = out.byte_bar();
    bar.set_message("reading the capture");
    let r = analyse(&o.file, o.interval, o.filter.as_deref(), Some(&bar));
    bar.finish_and_clear();
    let r = r?;
    if let Some(e) = &r.ended {
        out.note(&format!("gridperf trace: {e}"));
    }
    store(&o, &r, started, out)?;
    out.render(&r)?;
    if r.connections.is_empty() {
        return Err(Error::measurement(format!(
            "no TCP connection in {} ({} frames: {} not TCP, {} cut short, {} fragments)",
            o.file.display(),
            r.frames,
            r.skipped.not_tcp,
            r.skipped.short,
            r.skipped.fragments
        )));
    }
    Ok(())
}

/// A capture of this network namespace's IP packets to and from one
/// address (`stream --capture`), written by a thread of its own as a
/// raw-IP pcap until stopped.
pub struct Capture {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<std::io::Result<(u64, u64)>>,
}

/// The source and destination addresses of an IPv4 or IPv6 packet.
fn ends(p: &[u8]) -> Option<(std::net::IpAddr, std::net::IpAddr)> {
    match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 => {
            let a: [u8; 4] = p[12..16].try_into().ok()?;
            let b: [u8; 4] = p[16..20].try_into().ok()?;
            Some((a.into(), b.into()))
        }
        Some(6) if p.len() >= 40 => {
            let a: [u8; 16] = p[8..24].try_into().ok()?;
            let b: [u8; 16] = p[24..40].try_into().ok()?;
            Some((std::net::IpAddr::from(a).to_canonical(), std::net::IpAddr::from(b).to_canonical()))
        }
        _ => None,
    }
}

impl Capture {
    /// Starts capturing what goes to or comes from `peer` into `path`.
    pub fn start(path: &std::path::Path, peer: std::net::IpAddr, snaplen: u32) -> Result<Capture> {
        let sock = gridperf_sys::PacketSocket::open().map_err(|e| {
            Error::usage(format!(
                "--capture needs a packet socket (CAP_NET_RAW: root, or --lab, whose hosts are this user's own): {e}"
            ))
        })?;
        let file =
            std::fs::File::create(path).map_err(|e| Error::usage(format!("--capture {}: {e}", path.display())))?;
        let mut w = gridperf_core::capture::PcapWriter::new(
            std::io::BufWriter::with_capacity(1 << 20, file),
            gridperf_core::capture::LINKTYPE_RAW,
            snaplen,
        )
        .map_err(|e| Error::usage(format!("--capture {}: {e}", path.display())))?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let halt = stop.clone();
        let handle = std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || {
                let mut buf = vec![0u8; snaplen as usize];
                let mut written = 0u64;
                // IP to or from the peer; on loopback each packet passes twice: kept as it arrives
                let keep = |m: &gridperf_sys::PacketMeta, p: &[u8]| {
                    !(m.loopback && m.outgoing)
                        && matches!(m.protocol, 0x0800 | 0x86dd)
                        && ends(p).is_some_and(|(a, b)| a == peer || b == peer)
                };
                // until stopped, then what is still queued in the socket
                loop {
                    let halted = halt.load(std::sync::atomic::Ordering::Relaxed);
                    let Some(m) = sock.recv(&mut buf, if halted { 0 } else { 50 })? else {
                        if halted {
                            break;
                        }
                        continue;
                    };
                    if keep(&m, &buf[..m.len]) {
                        w.write(m.t_ns, &buf[..m.len], m.orig_len as u32)?;
                        written += 1;
                    }
                }
                std::io::Write::flush(&mut w.into_inner())?;
                let (_, dropped) = sock.drops()?;
                Ok((written, dropped))
            })
            .map_err(|e| Error::internal(format!("the capture thread: {e}")))?;
        Ok(Capture { stop, handle })
    }

    /// Stops it; the packets written and those the kernel dropped.
    pub fn stop(self) -> Result<(u64, u64)> {
        // the last ACKs are on their way: let them arrive
        std::thread::sleep(Duration::from_millis(100));
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        match self.handle.join() {
            Ok(r) => r.map_err(|e| Error::internal(format!("--capture: {e}"))),
            Err(_) => Err(Error::internal("the capture thread panicked")),
        }
    }
}

/// A stream test's capture read as `trace` reads one, each data direction
/// beside the stream of the same rank by bytes, with its TCP_INFO figures.
pub fn compare(
    path: &std::path::Path,
    tr: &TraceReport,
    (packets, dropped): (u64, u64),
    r: &gridperf_core::model::StreamReport,
    control: Option<std::net::SocketAddr>,
) -> Result<gridperf_core::model::StreamCapture> {
    use gridperf_core::model::{CaptureVsTcpInfo, StreamCapture};
    let mut dirs: Vec<&gridperf_core::model::TraceDirection> =
        tr.connections.iter().flat_map(|c| c.directions.iter()).filter(|d| d.segments >= 32).collect();
    // the test's control connection is not one of its streams
    if let Some(ctl) = control.map(|c| c.to_string()) {
        dirs.retain(|d| d.from != ctl && d.to != ctl);
    }
    dirs.sort_by_key(|d| std::cmp::Reverse(d.bytes_acked));
    let mut streams: Vec<&gridperf_core::model::StreamResult> =
        r.runs.iter().flat_map(|run| run.streams.iter()).collect();
    streams.sort_by_key(|s| std::cmp::Reverse(s.receiver.bytes));
    let median = |mut v: Vec<f64>| -> Option<f64> {
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then(|| v[v.len() / 2])
    };
    let rows = dirs
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let s = streams.get(k);
            CaptureVsTcpInfo {
                from: d.from.clone(),
                to: d.to.clone(),
                stream: s.map(|s| s.index),
                bytes_acked: d.bytes_acked,
                retransmits: d.retransmits,
                tcp_info_retransmits: s.and_then(|s| s.retransmits).map(u64::from),
                max_in_flight: d.max_in_flight,
                tcp_info_max_in_flight: s
                    .and_then(|s| s.timeline.iter().map(|t| u64::from(t.unacked) * u64::from(t.mss)).max()),
                rtt_median_ms: d.rtt_median_ms,
                tcp_info_srtt_median_ms: s.and_then(|s| {
                    median(s.timeline.iter().filter(|t| t.srtt_us > 0).map(|t| f64::from(t.srtt_us) / 1000.0).collect())
                }),
                verdict: d.verdict.as_ref().map(|v| v.text.clone()),
                tcp_info_verdict: s.and_then(|s| s.verdict.as_ref().map(|v| v.text.clone())),
            }
        })
        .collect();
    Ok(StreamCapture { file: path.display().to_string(), packets, dropped, streams: rows })
}

/// A trace is a run of kind `trace` in the store: a point per direction
/// that carried data, its series in the figures (`report` draws them).
fn store(o: &Opts, r: &TraceReport, started: std::time::SystemTime, out: &mut Output) -> Result<()> {
    let unix = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let settings = serde_json::json!({ "file": r.file, "interval_ms": r.interval_ms, "filter": o.filter,
        "frames": r.frames, "tcp_segments": r.tcp_segments, "capture_start_unix_s": r.start_unix_s });
    let new_run = crate::store::NewRun {
        survey_id: None,
        sweep_id: None,
        kind: gridperf_core::model::Measure::Trace,
        network: "capture",
        target: &r.file,
        settings,
        lab_profile: None,
        mtu: None,
    };
    let mut rec = crate::store::Recorder::open(&o.store, &new_run)?;
    for c in &r.connections {
        for d in &c.directions {
            rec.point(d)?;
        }
    }
    let mut notes = r.cannot_tell.clone();
    notes.extend(r.ended.clone());
    let env = gridperf_core::model::Environment {
        tool_version: crate::host::software(),
        command_line: std::env::args().collect(),
        started_unix: unix(started),
        finished_unix: unix(std::time::SystemTime::now()),
        target: r.file.clone(),
        client: crate::host::end_info(None, false),
        server: None,
        notes,
        lab: None,
        load: None,
    };
    if let Some(where_) = rec.finish(Ok(&env))? {
        out.note(&format!("gridperf: {where_}"));
    }
    Ok(())
}

/// `stream --capture`: for each stream, the data in flight and the
/// receiver's window over time as TCP_INFO saw them at the sender and as
/// the capture reconstructs them, on one chart (the capture's times
/// aligned on the data connection's SYN, the test's start to within a
/// round trip). The SVG goes beside the capture (FILE.svg).
pub fn overlay(
    path: &std::path::Path,
    tr: &TraceReport,
    r: &gridperf_core::model::StreamReport,
) -> Result<Option<std::path::PathBuf>> {
    use gridperf_core::svg::{Chart, Series, SeriesPoint};
    let Some(c) = &r.capture else { return Ok(None) };
    let mut charts = Vec::new();
    let mb = |b: f64| b / 1e6;
    for row in &c.streams {
        let Some(s) = row.stream.and_then(|k| r.runs.iter().flat_map(|run| run.streams.iter()).find(|s| s.index == k))
        else {
            continue;
        };
        let Some((conn, dir)) = tr
            .connections
            .iter()
            .find_map(|cn| cn.directions.iter().find(|d| d.from == row.from && d.to == row.to).map(|d| (cn, d)))
        else {
            continue;
        };
        let t0 = conn.start_s;
        let at = |p: &gridperf_core::model::TracePoint| p.t_s - t0;
        let series = vec![
            Series {
                label: "in flight, TCP_INFO".into(),
                points: s
                    .timeline
                    .iter()
                    .map(|t| SeriesPoint {
                        x: t.t_ns as f64 / 1e9,
                        y: mb(f64::from(t.unacked) * f64::from(t.mss)),
                        band: None,
                    })
                    .collect(),
                color: None,
            },
            Series {
                label: "in flight, capture".into(),
                points: dir
                    .series
                    .iter()
                    .map(|p| SeriesPoint { x: at(p), y: mb(p.in_flight as f64), band: None })
                    .collect(),
                color: None,
            },
            Series {
                label: "window, TCP_INFO".into(),
                points: s
                    .timeline
                    .iter()
                    .map(|t| SeriesPoint { x: t.t_ns as f64 / 1e9, y: mb(f64::from(t.snd_wnd)), band: None })
                    .collect(),
                color: None,
            },
            Series {
                label: "window, capture".into(),
                points: dir
                    .series
                    .iter()
                    .map(|p| SeriesPoint { x: at(p), y: mb(p.window as f64), band: None })
                    .collect(),
                color: None,
            },
        ];
        charts.push(Chart {
            title: format!("stream {}: TCP_INFO against the capture", s.index),
            x_label: "time (s)".into(),
            y_label: "bytes (MB)".into(),
            series,
            ..Chart::default()
        });
    }
    if charts.is_empty() {
        return Ok(None);
    }
    let mut svg = String::new();
    for ch in &charts {
        svg.push_str(&gridperf_core::svg::render(ch, 900, 420));
    }
    // several charts: one SVG document holding each in turn
    let doc = if charts.len() == 1 {
        svg
    } else {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{}\">{}</svg>",
            420 * charts.len(),
            charts
                .iter()
                .enumerate()
                .map(|(k, ch)| format!(
                    "<g transform=\"translate(0,{})\">{}</g>",
                    420 * k,
                    gridperf_core::svg::render(ch, 900, 420)
                ))
                .collect::<String>()
        )
    };
    let out = path.with_extension(format!(
        "{}svg",
        path.extension().map(|e| format!("{}.", e.to_string_lossy())).unwrap_or_default()
    ));
    std::fs::write(&out, doc).map_err(|e| Error::usage(format!("{}: {e}", out.display())))?;
    Ok(Some(out))
}
