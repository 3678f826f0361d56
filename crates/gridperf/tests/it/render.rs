//! What people read: every table, CSV and JSON the binary prints, rendered
//! from constructed results with exact numbers and pinned by snapshots
//! (`snapshots/`). A change of form shows here as a diff; review it, then
//! accept it with `INSTA_UPDATE=always cargo test --test it render`.

use gridperf_core::analysis::stats::{Summary, Warning};
use gridperf_core::model::plan::Proto;
use gridperf_core::model::{
    EndInfo, Environment, RttPoint, RttReport, Settings, SocketInfo, StepFigures, StreamEnd, StreamReport,
    StreamResult, StreamRun, TransferPoint, TransferReport,
};
use std::collections::BTreeMap;

fn socket(proto: Proto) -> SocketInfo {
    let stream = proto.is_stream();
    SocketInfo {
        proto: Some(proto),
        sndbuf_requested: None,
        sndbuf_granted: Some(2_626_560),
        rcvbuf_requested: None,
        rcvbuf_granted: Some(131_072),
        nodelay: stream.then_some(true),
        mss: stream.then_some(65_483),
        path_mtu: Some(65_535),
        congestion: stream.then(|| "bbr".to_string()),
        busy_poll_us: None,
    }
}

fn end(host: &str, protos: &[Proto]) -> EndInfo {
    let sysctls: BTreeMap<String, String> = [
        ("net.core.rmem_max", "212992"),
        ("net.core.wmem_max", "212992"),
        ("net.ipv4.tcp_rmem", "4096 131072 33554432"),
        ("net.ipv4.tcp_wmem", "4096 16384 4194304"),
        ("net.ipv4.tcp_congestion_control", "bbr"),
        ("net.ipv4.tcp_sack", "1"),
        ("net.ipv4.tcp_timestamps", "1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    EndInfo {
        host: host.into(),
        kernel: "Linux 6.18.0 x86_64".into(),
        software: "gridperf 0.1.0".into(),
        pinned_cpus: Some(vec![0]),
        allowed_cpus: vec![0, 1],
        busy_poll: false,
        sockets: protos.iter().map(|&p| socket(p)).collect(),
        sysctls,
    }
}

fn env(protos: &[Proto]) -> Environment {
    Environment {
        tool_version: "gridperf 0.1.0".into(),
        command_line: vec!["gridperf".into(), "rtt".into(), "--cpu".into(), "0".into()],
        started_unix: 1_795_000_000.0,
        finished_unix: 1_795_000_012.5,
        target: "local".into(),
        client: end("client-host", protos),
        server: Some(end("agent-host", protos)),
        notes: vec!["both ends in a private network namespace; lo MTU 1500".into()],
        lab: None,
        load: Some(gridperf_core::model::MachineLoad {
            cpus: 2,
            wall_s: 12.0,
            busy: 0.62,
            ours: 0.3,
            others: 0.32,
            steal: 0.01,
            runnable: 3,
        }),
    }
}

fn settings(protos: &[Proto], sizes: &[u64]) -> Settings {
    Settings {
        protos: protos.to_vec(),
        sizes: sizes.to_vec(),
        iterations: Some(1000),
        duration_ns: None,
        warmup: 100,
        warmup_time_ns: 250_000_000,
        nodelay: true,
        writes_per_message: 1,
        busy_poll: false,
        client_cpu: Some(0),
        server_cpu: Some(0),
        sndbuf: None,
        rcvbuf: None,
        timeout_ns: 1_000_000_000,
        total_bytes: None,
        repeat: None,
        rounds: None,
        retries: None,
        stop_early: false,
    }
}

/// 1000 samples around `base` ns, a fixed shape.
fn samples(base: u64) -> Vec<u64> {
    (0..1000u64).map(|i| base + (i * 7919) % 500 + if i % 97 == 0 { 20 * base } else { 0 }).collect()
}

fn rtt_report() -> RttReport {
    let protos = [Proto::Tcp, Proto::Udp, Proto::Sendfile];
    let point = |proto, size, base: u64, lost: u64| RttPoint {
        proto,
        size_bytes: size,
        summary: Summary::from_samples(&samples(base)),
        warmup: 100,
        sent: 1000 + lost,
        lost,
        late: lost / 2,
        samples_ns: None,
        server: Some(StepFigures { echoed: 1100, bytes_in: 1100 * size, cpu_ns: 9_000_000, ..Default::default() }),
        // six rounds, each off by its own share of the round-to-round noise
        rounds_ns: (0..6)
            .map(|k| (base + 250) as f64 * [1.0, 1.01, 0.99, 1.02, 0.98, 1.0][(k + base as usize / 100) % 6])
            .collect(),
        irregular: None,
        retries: 0,
        left_out: 0,
    };
    RttReport {
        schema: "gridperf.rtt/1".into(),
        measure: "rtt".into(),
        settings: settings(&protos, &[64, 1460]),
        env: env(&protos),
        points: vec![
            point(Proto::Tcp, 64, 15_800, 0),
            point(Proto::Udp, 64, 12_300, 3),
            point(Proto::Sendfile, 64, 18_100, 0),
            point(Proto::Tcp, 1460, 16_400, 0),
            RttPoint { summary: None, sent: 7, lost: 7, ..point(Proto::Udp, 1460, 1, 7) },
            point(Proto::Sendfile, 1460, 18_900, 0),
        ],
        warnings: vec![Warning::Lost { point: "udp 64 B".into(), lost: 3, sent: 1003 }],
    }
}

fn transfer_report() -> TransferReport {
    let protos = [Proto::Tcp, Proto::Udp];
    let point = |proto, size: u64, base: u64| {
        let times: Vec<u64> = (0..10).map(|i| base + i * 1_234).collect();
        let time = Summary::from_samples(&times);
        let messages = 1_024_000u64.div_ceil(size);
        TransferPoint {
            proto,
            size_bytes: size,
            messages,
            bytes_per_run: messages * size,
            rate_bps: time.as_ref().map(|t| (messages * size) as f64 * 8.0 / (t.median_ns / 1e9)),
            time,
            run_times_ns: times,
            run_started_unix_ns: vec![],
            lost: 0,
            server: None,
            left_out: 0,
        }
    };
    TransferReport {
        schema: "gridperf.transfer/1".into(),
        settings: Settings { total_bytes: Some(1_024_000), repeat: Some(10), warmup: 1, ..settings(&protos, &[1024]) },
        env: env(&protos),
        points: vec![
            point(Proto::Tcp, 1024, 17_000_000),
            point(Proto::Udp, 1024, 13_000_000),
            TransferPoint {
                time: None,
                rate_bps: None,
                run_times_ns: vec![],
                lost: 1000,
                ..point(Proto::Udp, 1460, 1)
            },
        ],
        warnings: vec![],
    }
}

fn timeline(cwnd0: u32) -> Vec<gridperf_core::analysis::flow::TcpSample> {
    (0..12u64)
        .map(|k| gridperf_core::analysis::flow::TcpSample {
            t_ns: k * 100_000_000,
            cwnd: cwnd0 + 10 * k as u32,
            ssthresh: 2_147_483_647,
            srtt_us: 40 + k as u32,
            rttvar_us: 10,
            min_rtt_us: 30,
            unacked: cwnd0 / 2 + 5 * k as u32,
            mss: 65_483,
            total_retrans: k as u32 / 4,
            data_segs_out: 20_000 * k as u32,
            bytes_acked: 1_300_000_000 * k,
            bytes_received: 0,
            delivery_rate: 3_000_000_000,
            pacing_rate: 3_600_000_000,
            busy_us: 100_000 * k,
            rwnd_limited_us: 20_000 * k,
            sndbuf_limited_us: 0,
            snd_wnd: 6_000_000,
            app_limited: false,
        })
        .collect()
}

fn stream_end(index: u32, sending: bool, bytes: u64, proto: Proto) -> StreamEnd {
    StreamEnd {
        index,
        sending,
        bytes,
        omitted_bytes: 0,
        intervals: vec![bytes / 2, bytes / 2],
        last_interval_ns: None,
        start_mono_ns: None,
        first_ns: Some(1_000_000),
        last_ns: Some(2_001_000_000),
        cpu_ns: 700_000_000,
        broken: None,
        socket: socket(proto),
        udp: None,
        datagrams: None,
        send_errors: 0,
        zerocopy: None,
        tcp_last: None,
    }
}

fn stream_spec(proto: &str, streams: u32) -> gridperf_core::wire::StreamSpec {
    gridperf_core::wire::StreamSpec {
        proto: proto.into(),
        streams,
        write_size: if proto == "udp" { 1472 } else { 131_072 },
        window: Some(4 << 20),
        congestion: Some("cubic".into()),
        udp_rate_bps: (proto == "udp").then_some(1_000_000_000),
        ..gridperf_core::wire::StreamSpec::tcp(gridperf_core::wire::Direction::Up, 2000)
    }
}

fn tcp_stream(index: u32, bytes: u64, cwnd0: u32) -> StreamResult {
    let timeline = timeline(cwnd0);
    let verdict = gridperf_core::analysis::flow::verdict(
        &timeline,
        &gridperf_core::analysis::flow::VerdictContext {
            throughput_bps: bytes as f64 * 8.0 / 2.0,
            elapsed_ns: 2_000_000_000,
            path_rate_bps: Some(10_000_000_000),
            rmem_max: Some(33_554_432),
            wmem_max: Some(4_194_304),
            window_requested: Some(4 << 20),
            core_rmem_max: Some(212_992),
            core_wmem_max: Some(212_992),
            pacing_bps: None,
            streams: 1,
        },
    );
    let receiver = stream_end(index, false, bytes, Proto::Tcp);
    StreamResult {
        index,
        direction: "up".into(),
        interval_bps: receiver.intervals.iter().map(|&b| b as f64 * 8.0).collect(),
        sender: StreamEnd { tcp_last: timeline.last().copied(), ..stream_end(index, true, bytes, Proto::Tcp) },
        receiver,
        throughput_bps: bytes as f64 * 8.0 / 2.0,
        retransmits: Some(2),
        verdict: Some(verdict),
        timeline,
        broken: (index == 1).then(|| "receiver: receiving: Connection reset by peer (os error 104)".to_string()),
        left_out_intervals: vec![],
    }
}

fn stream_run(streams: Vec<StreamResult>) -> StreamRun {
    let rates: Vec<f64> = streams.iter().map(|s| s.throughput_bps).collect();
    StreamRun {
        up_bps: Some(rates.iter().sum()),
        down_bps: None,
        slowest_over_fastest: gridperf_core::analysis::flow::slowest_over_fastest(&rates),
        jain: gridperf_core::analysis::flow::jain(&rates),
        client_cpu_ns: 1_400_000_000,
        agent_cpu_ns: 700_000_000,
        cpu_ns_per_byte: Some(0.352),
        streams,
        env: env(&[Proto::Tcp]),
    }
}

fn stream_report(runs: Vec<StreamRun>) -> StreamReport {
    let totals: Vec<f64> = runs.iter().map(|r| r.up_bps.unwrap_or(0.0)).collect();
    StreamReport {
        schema: "gridperf.stream/1".into(),
        spec: stream_spec("tcp", runs[0].streams.len() as u32),
        omit_ns: 0,
        median_bps: totals.first().copied(),
        best_bps: totals.iter().copied().reduce(f64::max),
        spread: (totals.len() > 1).then_some(0.125),
        totals_bps: totals,
        runs,
        warnings: vec![],
        notes: vec!["-w 4194304: the receiver (agent) was granted 425984 bytes, not the 8388608 Linux gives for it: capped by net.core.rmem_max = 212992 (the kernel doubles the request up to twice that cap); raise net.core.rmem_max to allow more".into()],
        capture: None,
    }
}

fn udp_report() -> StreamReport {
    let mut receiver = stream_end(0, false, 249_000_000, Proto::Udp);
    receiver.udp = Some(gridperf_core::analysis::flow::SeqStats {
        received: 169_100,
        bytes: 249_000_000,
        reordered: 3,
        duplicates: 1,
        max_seq: Some(169_836),
        jitter_ns: 12_345.6,
        distinct: 169_099,
        ..Default::default()
    });
    let sender = StreamEnd { datagrams: Some(169_837), send_errors: 2, ..stream_end(0, true, 250_000_000, Proto::Udp) };
    let st = StreamResult {
        index: 0,
        direction: "up".into(),
        interval_bps: vec![996e6, 996e6],
        sender,
        receiver,
        throughput_bps: 996_000_000.0,
        retransmits: None,
        verdict: None,
        timeline: vec![],
        broken: None,
        left_out_intervals: vec![],
    };
    StreamReport { spec: stream_spec("udp", 1), ..stream_report(vec![stream_run(vec![st])]) }
}

use gridperf::render;

#[test]
fn rtt_table_csv_json() {
    let r = rtt_report();
    insta::assert_snapshot!("rtt_table", render::rtt::table(&r));
    insta::assert_snapshot!("rtt_csv", render::rtt::csv(&r, false));
    let mut with = r.clone();
    with.points[0].samples_ns = Some(vec![15_800, 15_900, 16_000]);
    with.points.truncate(1);
    insta::assert_snapshot!("rtt_csv_samples", render::rtt::csv(&with, true));
    insta::assert_snapshot!("rtt_json", serde_json::to_string_pretty(&r).expect("json"));
}

#[test]
fn transfer_table_csv() {
    let r = transfer_report();
    insta::assert_snapshot!("transfer_table", render::transfer::table(&r));
    insta::assert_snapshot!("transfer_csv", render::transfer::csv(&r));
}

#[test]
fn stream_tables() {
    let tcp = stream_report(vec![stream_run(vec![tcp_stream(0, 4_000_000_000, 20), tcp_stream(1, 1_000_000, 10)])]);
    insta::assert_snapshot!("stream_table_tcp", render::stream::table(&tcp, false, render::stream::Units::Auto));
    insta::assert_snapshot!("stream_timeline_csv", render::stream::timeline(&tcp, true));
    let repeated = stream_report(vec![
        stream_run(vec![tcp_stream(0, 4_000_000_000, 20)]),
        stream_run(vec![tcp_stream(0, 3_500_000_000, 20)]),
    ]);
    insta::assert_snapshot!(
        "stream_table_repeat_median",
        render::stream::table(&repeated, false, render::stream::Units::Auto)
    );
    insta::assert_snapshot!(
        "stream_table_repeat_best",
        render::stream::table(&repeated, true, render::stream::Units::Auto)
    );
    insta::assert_snapshot!(
        "stream_table_udp",
        render::stream::table(&udp_report(), false, render::stream::Units::Auto)
    );
    // iperf3's -f: a fixed unit of bits or bytes
    let m = render::stream::table(&tcp, false, render::stream::Units::parse("m").expect("m"));
    assert!(m.contains("16000.00 Mbit/s") && m.contains("total: up 16004.00 Mbit/s"), "{m}");
    let g = render::stream::table(&tcp, false, render::stream::Units::parse("G").expect("G"));
    assert!(g.contains("2.00 GByte/s"), "{g}");
    for bad in ["x", "mm", "", "p"] {
        assert!(render::stream::Units::parse(bad).is_none(), "{bad}");
    }
}

mod fanout_fixture {
    pub use gridperf::engines::fanout::FanoutOptions;
    pub use gridperf_core::model::{Blocked, Deadlock, FanoutPoint, Queued, Variant};
}

fn fanout_points() -> Vec<fanout_fixture::FanoutPoint> {
    use fanout_fixture::*;
    let ok = |variant, messages: u64, base: u64| {
        let times: Vec<u64> = (0..5).map(|i| base + i * 1000).collect();
        let total: u64 = times.iter().sum();
        FanoutPoint {
            variant,
            nodes: 2,
            messages,
            size: 4096,
            repetitions: 5,
            time: Summary::from_samples(&times),
            bandwidth_bps: Some(2.0 * 5.0 * messages as f64 * 2.0 * 4096.0 * 8.0 / (total as f64 / 1e9)),
            times_ns: times,
            deadlock: None,
            error: None,
        }
    };
    let deadlocked = FanoutPoint {
        repetitions: 0,
        times_ns: vec![],
        time: None,
        bandwidth_bps: None,
        deadlock: Some(Deadlock {
            after_ns: 12_345_678,
            repetition: 0,
            sent: vec![40, 39],
            acked: vec![0, 0],
            blocked: vec![
                Blocked { who: "server".into(), call: "send to node 1".into() },
                Blocked { who: "node 0".into(), call: "send to the server".into() },
                Blocked { who: "node 1".into(), call: "send to the server".into() },
            ],
            queues: vec![
                Queued { socket: "server->node 0".into(), outq: 131_072, inq: 65_536 },
                Queued { socket: "node 0->server".into(), outq: 98_304, inq: 0 },
            ],
        }),
        ..ok(Variant::Original, 256, 1)
    };
    let broken = FanoutPoint {
        bandwidth_bps: None,
        error: Some("server: Connection reset by peer (os error 104), then more".into()),
        ..ok(Variant::Drain, 256, 1)
    };
    vec![ok(Variant::Original, 16, 2_000_000), deadlocked, ok(Variant::Drain, 16, 1_900_000), broken]
}

#[test]
fn fanout_table_csv_json() {
    use fanout_fixture::*;
    let points = fanout_points();
    let opts = FanoutOptions {
        variants: vec![Variant::Original, Variant::Drain],
        messages: vec![16, 256],
        sizes: vec![4096],
        nodes: vec![2],
        repeat: 5,
        watchdog: std::time::Duration::from_secs(2),
        buffer: Some(65_536),
        place: None,
        agents: vec![],
        deadlines: None,
    };
    insta::assert_snapshot!("fanout_table", render::fanout::table(&points, &gridperf::commands::fanout::sweep(&opts)));
    insta::assert_snapshot!("fanout_csv", render::fanout::csv(&points));
    insta::assert_snapshot!(
        "fanout_json",
        serde_json::to_string_pretty(
            &serde_json::json!({ "schema": "gridperf.fanout/1", "buffer": opts.buffer, "repeat": opts.repeat, "points": points })
        )
        .expect("json")
    );
}

mod tune_fixture {
    pub use gridperf_core::analysis::tune::{directions, Record};
    pub use gridperf_core::model::{Applied, EndAdvice, Measured, ShareProbe, TuneView};
}

fn sysctls(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn old_kernel() -> BTreeMap<String, String> {
    sysctls(&[
        ("net.core.rmem_max", "131071"),
        ("net.core.wmem_max", "131071"),
        ("net.ipv4.tcp_rmem", "4096 87380 174760"),
        ("net.ipv4.tcp_wmem", "4096 16384 131072"),
        ("net.ipv4.tcp_adv_win_scale", "2"),
        ("net.ipv4.tcp_window_scaling", "1"),
        ("net.ipv4.tcp_timestamps", "1"),
        ("net.ipv4.tcp_sack", "1"),
        ("net.ipv4.tcp_moderate_rcvbuf", "1"),
        ("net.ipv4.tcp_no_metrics_save", "0"),
        ("net.ipv4.tcp_congestion_control", "cubic"),
        ("net.ipv4.tcp_available_congestion_control", "reno cubic"),
        ("net.core.default_qdisc", "pfifo_fast"),
    ])
}

fn tune_view() -> tune_fixture::TuneView {
    use tune_fixture::*;
    let path = gridperf_core::analysis::tune::TunePath { rate_bps: 1_000_000_000, rtt_ns: 35_000_000 };
    let mut here = Record::new("this host", old_kernel(), Some("2.6.9".into()), Some(1500));
    here.share = Some(0.65);
    let mut modern = old_kernel();
    modern.insert("net.ipv4.tcp_rmem".into(), "4096 131072 33554432".into());
    modern.insert("net.ipv4.tcp_wmem".into(), "4096 16384 4194304".into());
    modern.remove("net.ipv4.tcp_moderate_rcvbuf");
    let there = Record::new("agent 192.0.2.7:5301", modern, Some("6.18.0".into()), Some(1500));
    let ends: Vec<EndAdvice> = [&here, &there].iter().map(|r| EndAdvice::new(r, path, None)).collect();
    let dirs = directions(&ends, path, None);
    TuneView {
        schema: "gridperf.tune/2".into(),
        path,
        bdp_bytes: path.bdp_bytes(),
        path_from: "RTT 35.00ms: median of 50 TCP round trips of 1 byte to 192.0.2.7:5301 (min 34.90ms)".into(),
        measured: Some(Measured {
            round_trips: 50,
            rtt_min_ns: 34_900_000.0,
            rtt_median_ns: 35_000_000.0,
            rate_bps: Some(950_000_000.0),
            rate_note: Some("what arrived of a UDP stream that overran the path (52.5% lost, 2 s)".into()),
        }),
        directions: dirs.clone(),
        share_probes: vec![ShareProbe {
            direction: "up".into(),
            rcvbuf: Some(349_520),
            window_max: Some(227_188),
            receive_share: Some(0.65),
            sndbuf: Some(262_144),
            in_flight_median: Some(209_715),
            send_share: Some(0.8),
            send_share_quartiles: Some((0.78, 0.82)),
            send_buffer_suffices: false,
            send_probe_bps: Some(48_000_000.0),
            notes: vec!["send share: too few samples".into()],
        }],
        applied: vec![
            Applied {
                host: "a".into(),
                setting: "net.ipv4.tcp_rmem".into(),
                value: "4096 131072 16777216".into(),
                outcome: "set".into(),
            },
            Applied {
                host: "all".into(),
                setting: "net.core.rmem_max".into(),
                value: "16777216".into(),
                outcome: "left alone: global, not per namespace (set it on the host itself)".into(),
            },
        ],
        after: Some(dirs),
        ends,
    }
}

#[test]
fn tune_text_and_json() {
    let v = tune_view();
    let text = render::tune::text(&v);
    // readable at 100 columns; the lines to apply stay whole to be copied
    for line in text.lines().filter(|l| !l.trim_start().starts_with("sysctl -w")) {
        assert!(line.chars().count() <= 100, "{} columns: {line}", line.chars().count());
    }
    insta::assert_snapshot!("tune_text", text);
    insta::assert_snapshot!("tune_json", serde_json::to_string_pretty(&v).expect("json"));
}

mod lab_fixture {
    pub use gridperf::lab::calibrate::{ByRoundTrip, Point};
    pub use gridperf::lab::emulator::{AccessCounters, Health};
    pub use gridperf::lab::{hosts, LabSpec, LabState};
}

fn lab_state() -> lab_fixture::LabState {
    use lab_fixture::*;
    let mut s = gridperf_core::lab::cfg::profile("man").expect("man").settings();
    gridperf_core::lab::cfg::apply_set(&mut s, "jitter=1ms").expect("jitter");
    let ab = s.link_config().expect("link");
    gridperf_core::lab::cfg::apply_set(&mut s, "loss=1%").expect("loss");
    let ba = s.link_config().expect("link");
    let mut access = gridperf_core::lab::cfg::LabSettings::default();
    gridperf_core::lab::cfg::apply_set(&mut access, "rate=100M").expect("access");
    let spec = LabSpec {
        name: "default".into(),
        hosts: (2, 1),
        mtu: 1500,
        ab,
        ba,
        seed: 1,
        profile: Some("man".into()),
        description: "profile man (000), jitter=1ms, b->a loss=1%".into(),
        loopback: false,
        access: vec![(Some("a2".into()), access.link_config().expect("access link"))],
        owner: None,
        sysctls: vec![("net.ipv4.tcp_rmem".into(), "4096 87380 174760".into())],
        paths: Vec::new(),
        floor_ns: None,
    };
    LabState { hosts: hosts("default", (2, 1)), spec, pid: 4242 }
}

fn health(late: u64) -> lab_fixture::Health {
    use lab_fixture::*;
    let mut h = Health { uptime_s: 12.5, late_packets: late, max_lag_ns: 2_500_000, ..Health::default() };
    h.links[0] = gridperf_core::lab::emu::Counters {
        arrived: 10_000,
        arrived_bytes: 15_000_000,
        delivered: 9_990,
        delivered_bytes: 14_985_000,
        lost: 0,
        queue_full: 10,
        max_queue_packets: 17,
        max_queue_bytes: 25_500,
        starved_ns: 0,
        idle_held_ns: 0,
    };
    h.links[1] = gridperf_core::lab::emu::Counters { arrived: 5_000, delivered: 4_950, lost: 50, ..h.links[0].clone() };
    h.lag_hist = vec![9_000, 900, 50, 30, 10, 5, 4, 1];
    h.access = vec![AccessCounters { host: "a2".into(), ..Default::default() }];
    h
}

#[test]
fn lab_status_profiles_calibration() {
    use lab_fixture::*;
    let st = lab_state();
    insta::assert_snapshot!("lab_status_up", render::lab::status(&st, None));
    insta::assert_snapshot!("lab_status_valid", render::lab::status(&st, Some(&health(5))));
    insta::assert_snapshot!("lab_status_invalid", render::lab::status(&st, Some(&health(500))));
    let lo = LabState {
        spec: LabSpec { loopback: true, mtu: 0, hosts: (1, 1), access: vec![], ..st.spec.clone() },
        hosts: vec![],
        pid: 7,
    };
    insta::assert_snapshot!("lab_status_loopback", render::lab::status(&lo, None));
    insta::assert_snapshot!("lab_profiles", render::lab::profiles(&gridperf_core::lab::cfg::profiles()));
    let p = Point {
        rate_bps: 100_000_000,
        delay_ns: 25_000_000,
        queue_bytes: 625_000,
        offered_rate_bps: 110_000_000.0,
        measured_rate_bps: 99_980_000.0,
        rate_error: -0.0002,
        tcp_rate_bps: 99_980_000.0,
        tcp_rate_error: -0.0002,
        tcp_retransmits: 912,
        tcp_window_limited: 0.0,
        tcp_receive_window_bytes: 2_400_000,
        tcp_receiver_threshold_bytes: 2_400_000,
        tcp_memory_pressure: None,
        baseline_rtt_ns: 174_000.0,
        baseline_rtt_p99_ns: 290_000.0,
        delay_error_median_ns: 37_000.0,
        delay_error_p99_ns: 570_000.0,
        table_errors_ns: vec![(0.1, 12_000.0), (0.5, -31_000.0), (0.9, 48_000.0), (0.99, 210_000.0)],
        table_samples: 1480,
        loaded_rtt_median_ns: 100_400_000.0,
        loaded_rtt_p99_ns: 100_600_000.0,
        loaded_rtt_max_ns: 100_900_000.0,
        queue_bound_ns: 100_500_000.0,
        emulator_cpu_percent: 68.0,
        sink_drops: 0,
        sink_drops_datagrams: 0,
        invalid: None,
        lag_p99_us: Some(128),
        queue_wait_p99_us: Some(256),
        queue_wait_max_us: 700,
        overload_queue_wait_p99_us: Some(512),
        targets_met: true,
        tries: 1,
        earlier_invalid: Vec::new(),
        by_round_trip: Some(ByRoundTrip {
            left_out: 0,
            counted: 1_880,
            delay_error_median_ns: 37_000.0,
            delay_error_p99_ns: 570_000.0,
            table_errors_ns: vec![(0.1, 12_000.0), (0.5, -31_000.0), (0.9, 48_000.0), (0.99, 210_000.0)],
        }),
    };
    let short = Point {
        offered_rate_bps: 90_000_000.0,
        tcp_rate_bps: 5_600_000.0,
        tcp_rate_error: -0.944,
        tcp_window_limited: 0.93,
        tcp_receive_window_bytes: 5_792,
        tcp_receiver_threshold_bytes: 2_896,
        tcp_memory_pressure: None,
        invalid: Some("572 packets overflowed a TUN queue".into()),
        tries: 2,
        earlier_invalid: vec!["the emulator was held up 3 time(s) for more than 10 ms".into()],
        delay_error_median_ns: 287_000.0,
        by_round_trip: Some(ByRoundTrip {
            left_out: 93,
            counted: 1_880,
            delay_error_median_ns: 41_000.0,
            delay_error_p99_ns: 611_000.0,
            table_errors_ns: vec![(0.1, 15_000.0), (0.5, -28_000.0), (0.9, 52_000.0), (0.99, 230_000.0)],
        }),
        ..p.clone()
    };
    insta::assert_snapshot!("lab_calibration", render::lab::calibration(&[p, short]));
}

mod store_fixture {
    pub use gridperf::store::{PointRow, RunRow, Stored, StreamPoint};
}

fn run_row(id: i64, kind: &str, network: &str, env: Option<Environment>) -> store_fixture::RunRow {
    store_fixture::RunRow {
        id,
        survey_id: Some(3),
        sweep_id: None,
        kind: kind.into(),
        network: network.into(),
        target: network.into(),
        command_line: format!("gridperf {kind} --cpu 0"),
        version: "gridperf 0.1.0".into(),
        started: 1_795_000_000.0,
        finished: Some(1_795_000_060.0),
        settings: serde_json::json!({ "spec": { "interval_ms": 1000 } }),
        env,
        lab_profile: Some(network.into()),
        mtu: Some(1500),
        invalid: None,
        status: "done".into(),
        points: 0,
    }
}

fn stored_runs() -> Vec<(store_fixture::RunRow, Vec<store_fixture::PointRow>)> {
    use store_fixture::*;
    let rtt = rtt_report();
    let tr = transfer_report();
    let rtt_rows: Vec<PointRow> = rtt.points.iter().map(Stored::row).collect();
    let tr_rows: Vec<PointRow> = tr.points.iter().map(Stored::row).collect();
    let stream = stream_report(vec![stream_run(vec![tcp_stream(0, 4_000_000_000, 20)])]);
    let stream_rows: Vec<PointRow> =
        stream.runs[0].streams.iter().map(|s| StreamPoint { spec: &stream.spec, result: s }.row()).collect();
    let fanout_rows: Vec<PointRow> = fanout_points().iter().map(Stored::row).collect();
    let mut invalid = run_row(4, "transfer", "man", Some(tr.env.clone()));
    invalid.invalid = Some("12 of 900 packets were delivered more than 1000 us behind schedule".into());
    invalid.status = "failed".into();
    vec![
        (run_row(3, "rtt", "man", Some(rtt.env.clone())), rtt_rows),
        (invalid, tr_rows),
        (run_row(5, "stream", "loopback", Some(stream.runs[0].env.clone())), stream_rows),
        (run_row(6, "fanout", "loopback", None), fanout_rows),
    ]
}

/// Regression (issue 13): a point whose every message was lost (UDP at
/// 64000 B across the WAN profile) kept an empty list of samples, and the
/// report's distribution chart panicked on it (index out of bounds) after
/// a whole survey had been measured.
#[test]
fn a_point_that_lost_every_message_is_drawn_without_it() {
    let mut runs = stored_runs();
    let rows = &mut runs[0].1;
    let largest = rows.iter().map(|p| p.size).max().expect("points");
    for p in rows.iter_mut().filter(|p| p.size == largest) {
        p.samples = Some(Vec::new());
        (p.median_ns, p.q1_ns, p.q3_ns) = (None, None, None);
    }
    let smallest = rows.iter().map(|p| p.size).min().expect("points");
    for p in rows.iter_mut().filter(|p| p.size == smallest) {
        p.samples = Some(Vec::new());
    }
    let (html, svgs) = render::html::render(&runs);
    assert!(html.contains("<svg") && !svgs.is_empty());
    let analysis = render::survey::analyse(&runs);
    let _ = render::survey::best_table_text(&analysis);
}

#[test]
fn runs_show_compare_export() {
    let runs = stored_runs();
    let (rtt, rtt_points) = &runs[0];
    insta::assert_snapshot!("runs_show_rtt", render::runs::show(rtt, rtt_points));
    let mut later = rtt_points.clone();
    for p in &mut later {
        p.median_ns = p.median_ns.map(|m| m * 1.1);
    }
    later.pop();
    insta::assert_snapshot!("runs_compare", render::runs::compare(rtt, rtt_points, &runs[1].0, &later));
    insta::assert_snapshot!("runs_export_csv", render::runs::csv(rtt, rtt_points));
}

/// Regression (issue 12): `runs show` and `runs export` of a stored stream
/// or fanout run printed empty cells (`tcp 128 KiB - - -`; two identical
/// `drain 1 KiB` rows without the message count or bandwidth), and `runs
/// show` left out the environment.
#[test]
fn runs_show_and_export_of_stream_and_fanout_runs_have_their_figures() {
    let runs = stored_runs();
    let (stream, stream_points) = &runs[2];
    let show = render::runs::show(stream, stream_points);
    assert!(show.contains("16.00 Gbit/s") && show.contains("the path's rate"), "{show}");
    assert!(show.contains("client-host (Linux 6.18.0 x86_64)") && show.contains("net.ipv4.tcp_rmem"), "{show}");
    assert!(!show.contains("     -           -           -"), "{show}");
    insta::assert_snapshot!("runs_show_stream", show);
    let csv = render::runs::csv(stream, stream_points);
    assert!(csv.starts_with("stream,direction,sent_bytes,received_bytes,throughput_bps"), "{csv}");
    assert!(csv.lines().nth(1).is_some_and(|l| l.starts_with("0,up,4000000000,4000000000,16000000000,")), "{csv}");
    insta::assert_snapshot!("runs_export_stream_csv", csv);

    let (fanout, fanout_points) = &runs[3];
    let show = render::runs::show(fanout, fanout_points);
    let drain: Vec<&str> = show.lines().filter(|l| l.starts_with("drain")).collect();
    assert_eq!(drain.len(), 2, "{show}");
    assert_ne!(drain[0], drain[1], "two points must not read the same: {show}");
    assert!(drain[0].contains(" 16 ") && drain[0].contains("Gbit/s"), "{show}");
    assert!(show.contains("DEADLOCK"), "{show}");
    insta::assert_snapshot!("runs_show_fanout", show);
    let csv = render::runs::csv(fanout, fanout_points);
    assert!(csv.starts_with("variant,nodes,size,messages,repetitions,bandwidth_bps"), "{csv}");
    insta::assert_snapshot!("runs_export_fanout_csv", csv);
}

#[test]
fn survey_tables_and_html_report() {
    let runs = stored_runs();
    let analysis = render::survey::analyse(&runs);
    insta::assert_snapshot!("survey_best_table", render::survey::best_table_text(&analysis));
    insta::assert_snapshot!("survey_thresholds", render::survey::thresholds_text(&analysis));
    let (html, svgs) = render::html::render(&runs);
    let names: Vec<&str> = svgs.iter().map(|(n, _)| n.as_str()).collect();
    insta::assert_snapshot!("report_svg_names", names.join("\n"));
    insta::assert_snapshot!("report_html", html);
}

/// A DataTAG-like sweep as stored: two profiles, two windows, three delays.
fn datatag_sweep() -> gridperf::store::SweepRow {
    use gridperf_core::model::SweepPoint;
    let mut points = Vec::new();
    for (profile, link) in [("lambda", 622_000_000u64), ("internet", 1_000_000_000)] {
        for w in ["4194304", "16777216"] {
            for (delay, paced) in [("0us", None), ("5us", Some(705_882_353u64)), ("20us", Some(375_000_000))] {
                let base = if w == "4194304" { 300e6 } else { 450e6 };
                let p = SweepPoint {
                    settings: vec![
                        ("profile".into(), profile.into()),
                        ("w".into(), w.into()),
                        ("delay".into(), delay.into()),
                        ("paced".into(), paced.map(|b| format!("{b}")).unwrap_or_else(|| "no".into())),
                    ],
                    runs_bps: vec![base * 0.9, base],
                    best_bps: Some(base),
                    median_bps: Some(base * 0.95),
                    verdicts: vec!["congestion".into(), "congestion".into()],
                    invalid: None,
                    error: None,
                    link_bps: Some(link),
                    rtt_ns: Some(100_000_000),
                    window_bytes: w.parse().ok(),
                    pacing_bps: paced,
                };
                points
                    .push((format!("profile={profile} w={w} delay={delay}"), serde_json::to_value(&p).expect("json")));
            }
        }
    }
    gridperf::store::SweepRow {
        id: 7,
        started: 1_795_000_000.0,
        finished: Some(1_795_001_000.0),
        command_line: "gridperf stream --preset datatag".into(),
        spec: serde_json::json!({
            "preset": "datatag",
            "axes": [
                { "field": "profile", "values": ["lambda", "internet"] },
                { "field": "w", "values": ["4194304", "16777216"] },
                { "field": "delay", "values": ["0us", "5us", "20us"] },
            ],
            "repeat": 2,
            "best": true,
        }),
        status: "done".into(),
        points,
    }
}

#[test]
fn a_sweep_is_drawn_as_the_documents_did_a_chart_per_profile_a_line_per_window() {
    let sweep = datatag_sweep();
    let charts = render::sweep::charts(&sweep);
    let names: Vec<&str> = charts.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["sweep7-delay-lambda.svg", "sweep7-delay-internet.svg"]);
    let (_, lambda) = &charts[0];
    assert_eq!(lambda.title, "datatag sweep 7: throughput on lambda");
    assert_eq!(lambda.x_label, "per-packet delay on the sender (us)");
    assert!(lambda.y_label.contains("best of 2 runs"), "{}", lambda.y_label);
    let labels: Vec<&str> = lambda.series.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(labels, ["w 4 MiB", "w 16 MiB"]);
    // the best of each point, in Mbit/s, with the runs' spread
    let p = lambda.series[0].points[1];
    assert_eq!((p.x, p.y, p.band), (5.0, 300.0, Some((270.0, 300.0))));
    let refs: Vec<(&str, Vec<(f64, f64)>)> =
        lambda.references.iter().map(|r| (r.label.as_str(), r.points.iter().map(|p| (p.x, p.y)).collect())).collect();
    // 4 MiB per 100 ms is 335.5 Mbit/s; 16 MiB's 1342 is past 1.3 x the link's 622: left out
    let w4 = 4194304.0 * 8.0 / 0.1 / 1e6;
    assert_eq!(refs[0], ("W/RTT, W 4 MiB", vec![(0.0, w4), (5.0, w4), (20.0, w4)]));
    assert_eq!(refs[1], ("W/RTT, W 16 MiB", vec![]));
    assert_eq!(refs[2], ("link 622.00 Mbit/s", vec![(0.0, 622.0), (20.0, 622.0)]));
    // the delays' pacing: none at 0 (unpaced); 705.9 above the link and 375 below it
    assert_eq!(refs[3], ("the delay's pacing", vec![(5.0, 705.882353), (20.0, 375.0)]));
    // the page: the figures and a row per point, self-contained
    let (page, svgs) = render::sweep::html(&sweep);
    assert_eq!(svgs.len(), 2);
    assert_eq!(page.matches("<tr>").count() + page.matches("<tr class").count(), 13, "a header and 12 points");
    assert!(page.contains("gridperf sweep 7 (preset datatag)"));
    assert!(!page.contains("<script") && !page.contains("href=\"http"));
}

#[test]
fn a_copys_table_names_each_file_its_hash_and_what_is_not_in_place() {
    use gridperf_core::model::{CopyFileResult, CopyReport, CopyStream};
    let file = |path: &str, error: Option<&str>| CopyFileResult {
        path: path.into(),
        size: 5 << 20,
        blake3: error.is_none().then(|| "ab".repeat(32)),
        moved: 4 << 20,
        kept: 1 << 20,
        resent: 1,
        error: error.map(str::to_string),
        checksum: error.is_none().then(|| "024d0127".to_string()),
    };
    let r = CopyReport {
        schema: "gridperf.copy/1".into(),
        direction: "push".into(),
        source: "run1".into(),
        destination: "dtn2:in/".into(),
        streams: 2,
        streams_auto: None,
        block: 1 << 20,
        checksum: Some("adler32".into()),
        files: vec![file("in/run1/a.dat", None), file("in/run1/b.dat", Some("the source changed during the copy"))],
        skipped: vec![("run1/link".into(), "a symbolic link: not followed".into())],
        bytes_moved: 8 << 20,
        bytes_kept: 2 << 20,
        blocks_resent: 2,
        seconds: 0.5,
        throughput_bps: (8u64 << 20) as f64 * 8.0 / 0.5,
        per_stream: vec![
            CopyStream {
                index: 0,
                bytes: 4 << 20,
                blocks: 4,
                retransmits: Some(3),
                rtt_us: Some(2100),
                ..Default::default()
            },
            CopyStream {
                index: 1,
                slot: 1,
                bytes: 1 << 20,
                blocks: 1,
                ended: Some("restarted: 1.0 Mbit/s against its peers' median 100.0 Mbit/s".into()),
                ..Default::default()
            },
            CopyStream { index: 2, slot: 1, bytes: 3 << 20, blocks: 3, tail_blocks: 1, ..Default::default() },
        ],
        pairs: Vec::new(),
        agent_streams: Vec::new(),
        encryption: Some("AES-256-GCM, keys by X25519 (no key: ...)".into()),
        verdict: "limited by the network: the sockets waited (the sending end 90% of its time)".into(),
        interval_ms: 1000,
        events: vec![gridperf_core::model::CopyEvent {
            t_s: 2.25,
            kind: "restart".into(),
            stream: Some(1),
            new_stream: Some(2),
            why: "1.0 Mbit/s against its peers' median 100.0 Mbit/s".into(),
        }],
        tail_blocks: 1,
        env: env(&[]),
    };
    let t = render::copy::table(&r);
    assert!(
        t.starts_with("gridperf copy (push): run1 -> dtn2:in/: 2 files, 10 MiB, 2 streams, blocks of 1 MiB"),
        "{t}"
    );
    assert!(t.contains(&format!("{}  adler32 024d0127", "ab".repeat(32))), "{t}");
    assert!(t.contains("NOT IN PLACE: the source changed during the copy"), "{t}");
    assert!(t.contains("skipped run1/link: a symbolic link: not followed"), "{t}");
    assert!(
        t.contains("total: moved 8 MiB in 0.50 s: 134.22 Mbit/s · kept 2 MiB from before · 2 blocks sent again"),
        "{t}"
    );
    assert!(t.contains("stream 0: 4 MiB in 4 blocks, 3 retransmits, RTT 2.10 ms\n"), "{t}");
    assert!(t.contains("stream 1: 1 MiB in 1 blocks; ended early: restarted: 1.0 Mbit/s against"), "{t}");
    assert!(t.contains("stream 2 (in stream 1's place): 3 MiB in 3 blocks, 1 sent again at the tail"), "{t}");
    assert!(t.contains("events: 1 restarts, 0 additions and 0 removals by -P auto, 0 broken, 1 blocks sent again at the tail\n      2.2 s  restart stream 1 -> 2: 1.0 Mbit/s"), "{t}");
    assert!(t.contains("encrypted: AES-256-GCM, keys by X25519 (no key: ...)\nlimited by the network"), "{t}");
}

#[test]
fn a_copys_report_draws_each_connection_and_lists_its_events() {
    use gridperf_core::model::{CopyEvent, CopyFileResult, CopyStream};
    use store_fixture::*;
    let file = CopyFileResult {
        path: "f.dat".into(),
        size: 8 << 20,
        blake3: Some("ab".repeat(32)),
        moved: 8 << 20,
        kept: 0,
        resent: 0,
        error: None,
        checksum: None,
    };
    let stream = |index: u32, slot: u32, iv: Vec<u64>| CopyStream {
        index,
        slot,
        bytes: iv.iter().sum(),
        interval_bytes: iv,
        last_interval_ms: 500,
        ..Default::default()
    };
    let event = CopyEvent {
        t_s: 2.25,
        kind: "restart".into(),
        stream: Some(1),
        new_stream: Some(2),
        why: "1.0 Mbit/s against its peers' median 100.0 Mbit/s <over> the last 1.0 s".into(),
    };
    let mut rows: Vec<PointRow> = vec![file.row()];
    rows.extend(
        [stream(0, 0, vec![1 << 20, 3 << 20]), stream(1, 1, vec![1 << 18, 0]), stream(2, 1, vec![0, 3 << 20])]
            .iter()
            .map(Stored::row),
    );
    rows.push(event.row());
    assert_eq!(
        rows.last().map(|p| (p.proto.as_str(), p.setting.as_str())),
        Some(("copy-event", "restart stream 1 -> 2 at 2.2 s"))
    );
    let runs = vec![(run_row(7, "copy", "lab cern-icepp", None), rows)];
    let (html, svgs) = render::html::render(&runs);
    assert_eq!(svgs.len(), 1, "one chart of the connections");
    assert!(svgs[0].1.contains("stream 2 (in 1&apos;s place)"), "{}", svgs[0].1);
    // the file table holds the file only, the events table the restart, escaped
    assert_eq!(html.matches("<td>f.dat</td>").count(), 1, "{html}");
    assert!(
        html.contains("<tr><td>2.2 s</td><td>restart</td><td>stream 1 -&gt; 2</td><td>1.0 Mbit/s against"),
        "{html}"
    );
    assert!(html.contains("&lt;over&gt;"), "{html}");
}

/// Regression (issue 32): `report 1 2` of two rtt runs on one network drew
/// the first run's analysis under both headings (byte-identical plots) and
/// its table merged them.
#[test]
fn two_runs_of_one_network_are_drawn_apart() {
    let runs = stored_runs();
    let (first, points) = runs[0].clone();
    let mut slower = points.clone();
    for p in &mut slower {
        for v in [&mut p.median_ns, &mut p.q1_ns, &mut p.q3_ns] {
            *v = v.map(|ns| ns * 3.0);
        }
        p.samples = p.samples.as_ref().map(|s| s.iter().map(|ns| ns * 3).collect());
    }
    let second = store_fixture::RunRow { id: 9, ..first.clone() };
    let two = vec![(first, points), (second, slower)];
    let (html, svgs) = render::html::render(&two);
    let rtt: Vec<&String> = svgs.iter().filter(|(n, _)| n.ends_with("-rtt.svg")).map(|(_, s)| s).collect();
    assert_eq!(rtt.len(), 2, "a chart per run");
    assert_ne!(rtt[0], rtt[1], "each run its own figures");
    let analysis = render::survey::analyse(&two);
    assert_eq!(analysis.iter().map(|a| a.run).collect::<Vec<_>>(), vec![3, 9]);
    assert!(html.contains("man (run 3)") && html.contains("man (run 9)"), "the table tells the runs apart");
}

/// Regression (issue 32): a UDP transfer point that lost messages was drawn
/// at its time, which counts a timeout per lost message (1.024 s on a
/// 13 ms curve); it is marked where it would be, not drawn.
#[test]
fn a_transfer_point_that_lost_messages_is_marked_not_drawn() {
    let mut runs = stored_runs();
    let rows = &mut runs[1].1;
    let udp = rows.iter_mut().find(|p| p.proto == "udp" && p.median_ns.is_some()).expect("a udp point");
    udp.figures["lost"] = serde_json::json!(3);
    let (_, svgs) = render::html::render(&runs);
    let (_, svg) = svgs.iter().find(|(n, _)| n.ends_with("-transfer.svg")).expect("a transfer chart");
    assert!(svg.contains("udp lost 3: not drawn"), "{svg}");
    assert!(!svg.contains("class=\"series\" data-label=\"udp\""), "{svg}");
    assert!(svg.contains("class=\"series\" data-label=\"tcp\""), "{svg}");
}

/// Regression (issue 32): throughput axes started just below the lowest
/// interval, so a dip looked like a collapse.
#[test]
fn throughput_axes_start_at_zero() {
    let (_, svgs) = render::html::render(&stored_runs());
    let (_, svg) = svgs.iter().find(|(n, _)| n.ends_with("-intervals.svg")).expect("a stream's intervals");
    assert!(svg.contains(r#"text-anchor="end">0</text>"#), "{svg}");
}

/// Regression (issue 32): a stream's last 50 ms (its drain) was drawn as a
/// rate, a fall from 95 to 77 Mbit/s that reads as a collapse.
#[test]
fn a_short_last_interval_is_not_drawn_as_a_collapse() {
    use store_fixture::*;
    let mut st = tcp_stream(0, 4_000_000_000, 20);
    st.receiver.intervals.push(1_000_000);
    st.receiver.last_interval_ns = Some(50_000_000);
    st.interval_bps.push(1_000_000.0 * 8.0 / 0.05);
    let report = stream_report(vec![stream_run(vec![st])]);
    let rows: Vec<PointRow> =
        report.runs[0].streams.iter().map(|s| StreamPoint { spec: &report.spec, result: s }.row()).collect();
    let runs = vec![(run_row(5, "stream", "loopback", None), rows)];
    let (_, svgs) = render::html::render(&runs);
    let (_, svg) = svgs.iter().find(|(n, _)| n.ends_with("-intervals.svg")).expect("a stream's intervals");
    assert_eq!(svg.matches("class=\"marker\"").count(), 2, "the two whole intervals, not the 50 ms tail: {svg}");
    assert!(svg.contains("too short to be a rate: not drawn"), "and it says so: {svg}");
}
