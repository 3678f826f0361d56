//! `gridperf copy`'s arguments.

use super::{buffer, duration, rate};
use crate::commands::copy::{AgentPath, End, Opts, Shape};
use crate::engines::copy::CopyOptions;
use crate::error::{Error, Result};
use crate::runner::{resolve_family, Deadlines};
use clap::Args;
use std::time::Duration;

#[derive(Args)]
#[command(mut_arg("json", |a| a.help("Print gridperf.copy/1 JSON (docs/json.md) instead of the table")))]
pub struct CopyArgs {
    /// What to copy, then where: local paths, or HOST:PATH beneath a `gridperf serve --root DIR` agent's root
    /// ([v6addr]:PATH for IPv6). From here to there is a push, from there to here a pull; two local paths copy
    /// through an agent of this process. A directory is copied with everything in it. Both ends on agents is a
    /// copy between agents (third-party: the data goes straight from one to the other); a comma list of agents
    /// on either side (a1:data/f,a2:data/f b1:data/f,b2:data/f) makes host pairs, a source agent each, the
    /// sources holding the same data: one destination (every pair writes to it) or one per source (on storage
    /// they share). Every pair takes its blocks from one queue, so a faster pair carries more.
    #[arg(required = true, num_args = 2.., value_name = "SRC... DEST")]
    pub paths: Vec<String>,
    /// Host pairs all write to the first destination agent (the study's "same destination"), whatever
    /// other destinations are named.
    #[arg(long)]
    pub same_destination: bool,
    /// The agent's control port (every agent named: HOST:PATH takes no port).
    #[arg(short = 'p', long, default_value_t = gridperf_core::wire::DEFAULT_PORT)]
    pub port: u16,
    /// Parallel TCP streams; every stream takes the next block from one queue, so a fast stream carries more.
    /// `auto` (or MIN..MAX, e.g. 2..32) adapts the count while the copy runs: it starts with 2 (within MIN..MAX),
    /// waits while their rate still ramps up, adds half as many again while they are bound by their window or
    /// send buffer and each addition paid 10%, takes back one that did not pay, removes one when
    /// retransmissions rise without gain, and probes with one more every 30 windows; within MIN..MAX (auto:
    /// 1..16). Every change is an event in the summary.
    #[arg(short = 'P', long, default_value = "4", value_name = "N|auto|MIN..MAX")]
    pub parallel: String,
    /// Do not restart slow streams. By default the sending end (the agent in a pull) closes a stream and opens
    /// it again from a new port, its blocks back on the queue, once the copy's rate has stopped ramping up (under
    /// 10% growth a window), when over several round trips its rate stays
    /// below a third of its peers' median AND its TCP_INFO shows losses while not limited by a window or
    /// buffer; at most 6 a minute, one per window; a replacement slow too by the same rule is left alone,
    /// and once two such are half the restarts or more, restarting stops (the path is slow for all).
    #[arg(long)]
    pub no_restart: bool,
    /// Do not send the last blocks again at the tail. By default, once no block is left to take, an
    /// idle stream sends again a block that a slow stream (below half its peers' median, or stalled) has had
    /// unacknowledged for 4 round trips; the first verified copy wins and the slower stream is reset at the end.
    #[arg(long)]
    pub no_tail: bool,
    /// How blocks are shared among the streams: dynamic (one queue every stream takes from: a fast stream
    /// carries more) or static (each stream a fixed contiguous slice, as bbftp does: the slowest sets the finish;
    /// no restarts, no tail; a push only; for comparison).
    #[arg(long, default_value = "dynamic", value_name = "dynamic|static")]
    pub split: String,
    /// Block size: a power of two from 64K to 64M. Each stream holds one block in memory at each end and may have
    /// 256 MiB (at least 4 blocks) sent and not yet acknowledged, kept as block numbers, not data, and at most 2 blocks
    /// written to its socket and not yet sent (the rest stay in the queue for whichever stream is free); every block
    /// is hashed (BLAKE3) at both ends and sent again if they differ.
    #[arg(long, default_value = "4M", value_name = "SIZE")]
    pub block: String,
    /// SO_SNDBUF and SO_RCVBUF on the data sockets (the kernel doubles it, capped at net.core.wmem_max /
    /// rmem_max); default: the kernel autotunes.
    #[arg(short = 'w', long, value_name = "SIZE")]
    pub window: Option<String>,
    /// TCP congestion control of the data sockets: reno, cubic, bbr, ...
    #[arg(short = 'C', long, value_name = "NAME")]
    pub congestion: Option<String>,
    /// Cap each stream at RATE (SO_MAX_PACING_RATE), bits per second: 500M.
    #[arg(long, value_name = "RATE")]
    pub pacing: Option<String>,
    #[command(flatten)]
    pub across: super::LabArgs,
    /// Go on with an interrupted copy: partial files are hashed again block by block against their journal
    /// (always; a size is never trusted), and a destination an earlier run finished (its size and time the
    /// source's) is kept instead of refused.
    #[arg(long)]
    pub resume: bool,
    /// Replace destinations that exist.
    #[arg(long)]
    pub force: bool,
    /// Also compute this checksum at the writing end, as the blocks arrive (md5, sha256 or adler32: what a
    /// catalogue such as Rucio or FTS expects); printed and in --json beside each file's BLAKE3.
    #[arg(long, value_name = "ALGO")]
    pub checksum: Option<String>,
    /// Encrypt the data connections: keys agreed by X25519 for this copy alone (bound to the session's key when
    /// the agent asks for one: --key), every block, header and acknowledgment sealed with AES-256-GCM. Never
    /// downgraded: an agent that does not answer with its key gets nothing.
    #[arg(long)]
    pub encrypt: bool,
    /// The longest a stream waits on the other end (a block, an acknowledgment) before the copy fails.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub idle: String,
    /// Wait up to DURATION in the agent's queue when it is busy (default: fail at once).
    #[arg(long, value_name = "DURATION")]
    pub queue: Option<String>,
    /// Deadline for connecting to the agent and for each of its control answers.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub connect_timeout: String,
    /// A line a second with the total rate and each stream's (bytes acknowledged or verified, counted a block at
    /// a time: one second's figure can exceed the link's rate by a block's worth).
    #[arg(short = 'v', long)]
    pub verbose: bool,
    #[command(flatten)]
    pub print: super::JsonArgs,
    /// JSON lines on stdout while the copy runs, as iperf3's --json-stream: {"event":"interval","data":{t_s,
    /// bytes (per stream), bps}} each second, {"event":"restart"|"give-up"|"stop-restarts"|"add"|"remove"|
    /// "broken","data":{t_s, stream, new_stream, why}} as they happen, then {"event":"end","data":<gridperf.copy/1>}.
    #[arg(long, conflicts_with = "json")]
    pub json_stream: bool,
    #[command(flatten)]
    pub store: super::StoreArgs,
    /// Test seam: the writing end (an agent of this process) damages the N-th block it receives.
    #[arg(long, hide = true, value_name = "N")]
    pub fault_flip_block: Option<u64>,
}

/// `-P`: N streams, or `auto` (1..16), or MIN..MAX: the streams at first
/// and the bounds of an adaptive count.
pub fn parse_parallel(p: &str) -> Result<(u32, Option<(u32, u32)>)> {
    let max = gridperf_core::wire::MAX_STREAMS;
    let bad =
        || Error::usage(format!("-P {p}: give a number of streams from 1 to {max}, auto, or MIN..MAX (e.g. 2..32)"));
    let count = |s: &str| s.trim().parse::<u32>().ok().filter(|n| (1..=max).contains(n)).ok_or_else(bad);
    match p.trim() {
        "auto" => Ok((gridperf_core::copy::pool::AutoStreams::start(1, 16), Some((1, 16)))),
        r => match r.split_once("..") {
            Some((lo, hi)) => {
                let (lo, hi) = (count(lo)?, count(hi)?);
                if lo > hi {
                    return Err(bad());
                }
                Ok((gridperf_core::copy::pool::AutoStreams::start(lo, hi), Some((lo, hi))))
            }
            None => Ok((count(r)?, None)),
        },
    }
}

/// One end, or a comma list of agents (host pairs): a1:PATH,a2:PATH.
pub fn ends(s: &str, port: u16) -> Result<Vec<End>> {
    if s.contains(',') {
        let parts: Vec<End> = s.split(',').map(|p| end(p, port)).collect::<Result<_>>()?;
        if parts.len() > 1 && parts.iter().all(|e| matches!(e, End::Remote { .. })) {
            return Ok(parts);
        }
    }
    Ok(vec![end(s, port)?])
}

/// Which way the copy goes, from its ends: local sources are a push,
/// sources on one agent into a local path a pull, agents on both sides a
/// copy between agents. Mixed sources, sources on several agents into a
/// local path, several destinations without agents on both sides, and a
/// lab for anything but two local paths are refused, saying what is valid.
pub fn shape(sources: Vec<End>, dest: End, dests_more: Vec<End>, lab: bool) -> Result<Shape> {
    let remote = |e: &End| match e {
        End::Remote { addr, host, path } => Some((*addr, host.clone(), path.clone())),
        End::Local(_) => None,
    };
    let agents: Vec<AgentPath> = sources.iter().filter_map(remote).collect();
    if lab && !(matches!(dest, End::Local(_)) && agents.is_empty()) {
        return Err(Error::usage(
            "--lab copies between two local paths: the lab's agent writes beneath the destination, this host sends",
        ));
    }
    if !dests_more.is_empty() && !matches!(dest, End::Remote { .. }) {
        return Err(Error::usage("several destinations are for host pairs: name agents on both sides"));
    }
    if agents.is_empty() {
        let paths = sources.into_iter().filter_map(|s| if let End::Local(p) = s { Some(p) } else { None }).collect();
        return Ok(Shape::Push { sources: paths, dest });
    }
    match dest {
        End::Remote { .. } => {
            if agents.len() != sources.len() {
                return Err(Error::usage(
                    "mixed sources: a copy between agents takes HOST:PATH sources only (a1:PATH,a2:PATH for pairs)",
                ));
            }
            let dests = std::iter::once(&dest).chain(&dests_more).filter_map(remote).collect();
            Ok(Shape::Pairs { sources: agents, dests })
        }
        End::Local(dest) => {
            if agents.len() != sources.len() {
                return Err(Error::usage("mixed sources: give local files (a push) or HOST:PATH (a pull), not both"));
            }
            let addr = agents[0].0;
            if agents.iter().any(|(a, ..)| *a != addr) {
                return Err(Error::usage("sources on several agents: one agent per copy"));
            }
            for (_, _, p) in &agents {
                gridperf_core::copy::check_relative(p).map_err(Error::usage)?;
            }
            Ok(Shape::Pull { addr, paths: agents.into_iter().map(|(_, _, p)| p).collect(), dest })
        }
    }
}

/// HOST:PATH (or [v6]:PATH) on an agent, else a local path.
pub fn end(s: &str, port: u16) -> Result<End> {
    let local = || End::Local(s.into());
    if s.starts_with('/') || s.starts_with('.') || s.starts_with('~') {
        return Ok(local());
    }
    let (host, path) = if let Some(rest) = s.strip_prefix('[') {
        let Some((h, p)) = rest.split_once("]:") else { return Ok(local()) };
        (h.to_string(), p.to_string())
    } else {
        match s.split_once(':') {
            Some((h, p)) if !h.is_empty() && !h.contains('/') => (h.to_string(), p.to_string()),
            _ => return Ok(local()),
        }
    };
    // scp's and rsync's habits: said, with gridperf's way
    if let Some((user, h)) = host.split_once('@') {
        return Err(Error::usage(format!(
            "{s}: {user}@{h}:PATH is scp's form: gridperf has no ssh; run `gridperf serve --root DIR` on {h} and \
             give {h}:PATH (PATH beneath that DIR)"
        )));
    }
    let port_first: String = path.chars().take_while(char::is_ascii_digit).collect();
    if !port_first.is_empty() && port_first.len() <= 5 && path[port_first.len()..].starts_with(':') {
        return Err(Error::usage(format!(
            "{s}: HOST:PORT:PATH is not a form gridperf takes: give the port with -p (gridperf copy SRC \
             {host}:{} -p {port_first})",
            &path[port_first.len() + 1..]
        )));
    }
    let addr = resolve_family(&host, port, None)?;
    Ok(End::Remote { addr, host, path })
}

impl TryFrom<CopyArgs> for Opts {
    type Error = Error;
    fn try_from(a: CopyArgs) -> Result<Opts> {
        let (dest, sources) = a.paths.split_last().ok_or_else(|| Error::usage("give SRC... DEST"))?;
        let block = gridperf_core::units::parse_bytes(&a.block, "--block")?;
        gridperf_core::copy::check_block(block).map_err(|m| Error::usage(format!("--block {m}")))?;
        let (streams, auto) = parse_parallel(&a.parallel)?;
        let split_static = match a.split.as_str() {
            "dynamic" => false,
            "static" if auto.is_some() => {
                return Err(Error::usage("--split static gives each of a fixed number of streams its slice: give -P N"))
            }
            "static" => true,
            other => return Err(Error::usage(format!("--split {other}: give dynamic or static"))),
        };
        let connect = duration(&a.connect_timeout, "--connect-timeout")?;
        let mut all_sources = Vec::new();
        for s in sources {
            let e = ends(s, a.port)?;
            if e.len() > 1 && sources.len() > 1 {
                return Err(Error::usage(format!(
                    "{s}: host pairs take one source, named on each of its agents (a1:PATH,a2:PATH)"
                )));
            }
            all_sources.extend(e);
        }
        let mut dests = ends(dest, a.port)?;
        if a.same_destination && !(dests.len() > 1 || all_sources.len() > 1) {
            return Err(Error::usage(
                "--same-destination is for host pairs: name several source agents (a1:PATH,a2:PATH)",
            ));
        }
        if a.same_destination {
            dests.truncate(1);
        }
        let dest = dests.remove(0);
        let words = |e: &End| match e {
            End::Local(p) => p.display().to_string(),
            End::Remote { host, path, .. } => format!("{host}:{path}"),
        };
        let source_words = all_sources.iter().map(words).collect::<Vec<_>>().join(" ");
        let dest_words = words(&dest);
        Ok(Opts {
            shape: shape(all_sources, dest, dests, a.across.lab.is_some())?,
            source_words,
            dest_words,
            copy: CopyOptions {
                streams,
                auto,
                restart: !a.no_restart && !split_static,
                tail: !a.no_tail && !split_static,
                split_static,
                block,
                window: buffer(&a.window, "--window")?,
                congestion: a.congestion,
                pacing_bps: a.pacing.as_deref().map(|p| rate(p, "--pacing")).transpose()?,
                resume: a.resume,
                force: a.force,
                checksum: a
                    .checksum
                    .as_deref()
                    .map(gridperf_core::copy::Checksum::parse)
                    .transpose()
                    .map_err(Error::usage)?,
                deadlines: Deadlines {
                    connect,
                    control: connect.max(Duration::from_secs(5)),
                    message: Duration::from_secs(1),
                    queue: a.queue.as_deref().map(|q| duration(q, "--queue")).transpose()?.unwrap_or(Duration::ZERO),
                },
                idle: duration(&a.idle, "--idle")?,
                encrypt: a.encrypt,
            },
            store: a.store.choice(),
            json_stream: a.json_stream,
            fault_flip_block: a.fault_flip_block,
            verbose: a.verbose,
            watched: super::watched_lab(),
            lab: match a.across.lab {
                Some(p) => {
                    // checked before anything is brought up
                    crate::lab::run::spec_for("check", &p, &a.across.sets)?;
                    Some((p, a.across.sets))
                }
                None => None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ends_make_the_shape_or_are_refused_saying_what_is_valid() {
        let local = |p: &str| End::Local(p.into());
        let agent = |port: u16, p: &str| End::Remote {
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            host: format!("h{port}"),
            path: p.into(),
        };
        let refused = |s: Result<Shape>| s.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(matches!(shape(vec![local("a"), local("b")], local("d/"), vec![], true), Ok(Shape::Push { .. })));
        assert!(matches!(shape(vec![local("a")], agent(1, "x"), vec![], false), Ok(Shape::Push { .. })));
        let pull = shape(vec![agent(1, "x"), agent(1, "y")], local("d"), vec![], false);
        assert!(matches!(pull, Ok(Shape::Pull { ref paths, .. }) if paths == &["x", "y"]), "{pull:?}");
        let pairs = shape(vec![agent(1, "x"), agent(2, "x")], agent(3, "d"), vec![agent(4, "d")], false);
        assert!(matches!(pairs, Ok(Shape::Pairs { ref dests, .. }) if dests.len() == 2), "{pairs:?}");
        assert!(
            refused(shape(vec![agent(1, "x")], local("d"), vec![], true)).contains("--lab copies between two local")
        );
        assert!(refused(shape(vec![local("a")], local("d"), vec![local("e")], false)).contains("for host pairs"));
        assert!(refused(shape(vec![local("a"), agent(1, "x")], local("d"), vec![], false)).contains("mixed sources"));
        assert!(refused(shape(vec![local("a"), agent(1, "x")], agent(2, "d"), vec![], false))
            .contains("HOST:PATH sources only"));
        assert!(refused(shape(vec![agent(1, "x"), agent(2, "y")], local("d"), vec![], false))
            .contains("one agent per copy"));
        assert!(
            !refused(shape(vec![agent(1, "../x")], local("d"), vec![], false)).is_empty(),
            "a path out of the root"
        );
    }

    #[test]
    fn parallel_is_a_count_auto_or_bounds() {
        assert_eq!(parse_parallel("4").ok(), Some((4, None)));
        assert_eq!(parse_parallel("auto").ok(), Some((2, Some((1, 16)))));
        assert_eq!(parse_parallel("2..32").ok(), Some((2, Some((2, 32)))));
        assert_eq!(parse_parallel("4..32").ok(), Some((4, Some((4, 32)))));
        assert_eq!(parse_parallel("1..2").ok(), Some((2, Some((1, 2)))));
        for bad in ["0", "129", "x", "4..2", "..4", "1..", "auto..4", "-1"] {
            let e = parse_parallel(bad).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("from 1 to 128, auto, or MIN..MAX"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_port_in_the_path_or_a_user_at_a_host_is_refused_with_the_right_form() {
        let e = end("127.0.0.1:5302:z/", 5301).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("HOST:PORT:PATH is not a form gridperf takes") && e.contains("127.0.0.1:z/ -p 5302"), "{e}");
        let e = end("alice@dtn1:data/x", 5301).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("scp's form") && e.contains("gridperf serve --root DIR") && e.contains("dtn1:PATH"), "{e}");
        // a path whose first part is a number, without a colon after it, is a path
        assert!(matches!(end("127.0.0.1:2024/run1", 5301), Ok(End::Remote { .. })));
    }

    #[test]
    fn host_path_is_remote_and_anything_else_local() {
        for local in ["./a:b", "/data/x", "file.dat", "dir/sub:x", "~/x"] {
            assert!(matches!(end(local, 5301), Ok(End::Local(_))), "{local}");
        }
        match end("127.0.0.1:data/run1", 5301) {
            Ok(End::Remote { addr, host, path }) => {
                assert_eq!((addr.port(), host.as_str(), path.as_str()), (5301, "127.0.0.1", "data/run1"));
            }
            other => panic!("{other:?}"),
        }
        match end("[::1]:in/", 5400) {
            Ok(End::Remote { addr, path, .. }) => {
                assert_eq!((addr.to_string(), path.as_str()), ("[::1]:5400".into(), "in/"))
            }
            other => panic!("{other:?}"),
        }
    }
}
