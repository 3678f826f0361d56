//! `--lab PROFILE` for the benchmarks: bring a lab up for one run, start an
//! agent on host b, move the calling thread into host a, and take it all
//! down again when the run ends (or fails, or is interrupted).

use super::{LabSpec, Side};
use crate::error::{Error, Result};
use gridperf_core::lab::cfg;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A lab brought up for one run. The thread that started it runs in host a
/// until it is dropped.
pub struct LabRun {
    pub name: String,
    /// Where the agent on host b listens.
    pub agent: SocketAddr,
    /// The profile and overrides, in words, for the run's record.
    pub description: String,
    /// The profile's name.
    pub profile: String,
    child: Option<Child>,
    home: Option<File>,
    signals: Option<signal_hook::iterator::Handle>,
}

/// The lab spec for a profile with `--lab-set` overrides, named `name`.
pub fn spec_for(name: &str, profile: &str, sets: &[String]) -> Result<LabSpec> {
    spec_with_hosts(name, profile, sets, (1, 1))
}

/// The same, with `hosts` on each side of the bottleneck (a dumbbell).
pub fn spec_with_hosts(name: &str, profile: &str, sets: &[String], hosts: (usize, usize)) -> Result<LabSpec> {
    let lab_err = |e: cfg::LabError| Error::usage(e.to_string());
    let (mut s, mut s_ba, mut words, label) = if is_profile_file(profile) {
        let (ab, ba, words) = profile_file(std::path::Path::new(profile))?;
        (ab, ba, words, profile.to_string())
    } else {
        let prof = cfg::profile(profile).map_err(lab_err)?;
        let words = vec![format!("profile {} ({})", prof.name, prof.source)];
        (prof.settings(), prof.settings(), words, prof.name.to_string())
    };
    let loopback = label == "loopback";
    let mut sysctls = Vec::new();
    let (mut n_paths, mut own) = (1, Vec::new());
    for set in sets {
        let set_ = set.trim_start();
        // a net.* sysctl is the hosts' (an old kernel's buffers); paths=N and
        // pathK:... the bottleneck's parallel paths; the rest the link's
        if set_.starts_with("net.") {
            sysctls.push(super::host_sysctl(set)?);
        } else if let Some(n) = set_.strip_prefix("paths=") {
            n_paths = cfg::parse_paths(n).map_err(lab_err)?;
        } else if let Some(p) = set_.strip_prefix("path").filter(|p| p.starts_with(|c: char| c.is_ascii_digit())) {
            own.push(cfg::parse_path_set(p).map_err(lab_err)?);
        } else {
            cfg::apply_set(&mut s, set).map_err(lab_err)?;
            cfg::apply_set(&mut s_ba, set).map_err(lab_err)?;
        }
        words.push(set.clone());
    }
    let link = s.link_config().map_err(lab_err)?;
    let link_ba = s_ba.link_config().map_err(lab_err)?;
    let paths = paths_of(&s, n_paths, &own)?;
    let paths_ba = paths_of(&s_ba, n_paths, &own)?;
    if loopback && link != gridperf_core::lab::emu::LinkConfig::default() {
        return Err(Error::usage("the loopback profile has no link to shape: only mtu= applies to it"));
    }
    let mtu_given = sets.iter().any(|s| s.trim_start().starts_with("mtu="));
    if loopback && !paths.is_empty() {
        return Err(Error::usage("the loopback profile has no link, so no paths to split it into"));
    }
    if loopback && hosts != (1, 1) {
        return Err(Error::usage("the loopback profile has one namespace for both ends: no dumbbell"));
    }
    Ok(LabSpec {
        name: name.to_string(),
        hosts,
        mtu: if loopback && !mtu_given { 0 } else { s.mtu },
        ab: link,
        ba: link_ba,
        seed: 1,
        profile: Some(label),
        description: words.join(", "),
        loopback,
        access: Vec::new(),
        owner: Some(std::process::id()),
        sysctls,
        paths: paths.into_iter().zip(paths_ba).collect(),
        floor_ns: None,
    })
}

/// Both directions from a profile file (`lab clone`'s), every field checked
/// before anything is brought up; the hosts' one MTU is the smaller of the two.
pub fn profile_file(path: &std::path::Path) -> Result<(cfg::LabSettings, cfg::LabSettings, Vec<String>)> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::usage(format!("{}: {e}", path.display())))?;
    let f = gridperf_core::lab::clone::CloneFile::parse(&text)
        .map_err(|e| Error::usage(format!("{}: {e}", path.display())))?;
    let bad = |e: gridperf_core::lab::clone::ProfileError| Error::usage(format!("{}: {e}", path.display()));
    let (mut ab, mut w_ab) = f.profile.ab.settings("ab").map_err(bad)?;
    let (mut ba, w_ba) = f.profile.ba.settings("ba").map_err(bad)?;
    let mtu = ab.mtu.min(ba.mtu);
    (ab.mtu, ba.mtu) = (mtu, mtu);
    let mut words = vec![format!(
        "profile file {} (cloned from {} on {})",
        path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        f.source.host,
        f.source.date
    )];
    w_ab.extend(w_ba);
    words.extend(w_ab);
    Ok((ab, ba, words))
}

/// Whether a --lab value names a profile file rather than a built-in profile.
pub fn is_profile_file(profile: &str) -> bool {
    profile.ends_with(".json") || profile.contains('/')
}

/// The bottleneck's parallel paths from the link's settings (each direction
/// alike), or none for one path; path settings without paths=N are refused.
pub fn paths_of(
    link: &cfg::LabSettings,
    n: usize,
    own: &[(usize, Vec<String>)],
) -> Result<Vec<gridperf_core::lab::emu::LinkConfig>> {
    let lab_err = |e: cfg::LabError| Error::usage(e.to_string());
    if n == 1 {
        if let Some((k, _)) = own.first() {
            return Err(Error::usage(format!(
                "path {} has settings, but the bottleneck is one path: give paths=N (lab up --paths N) first",
                k + 1
            )));
        }
        return Ok(Vec::new());
    }
    cfg::split_paths(link, n, own).map_err(lab_err)?.iter().map(|p| p.link_config().map_err(lab_err)).collect()
}

impl LabRun {
    /// Brings the lab up, as a run that takes it down when dropped (no agent
    /// yet, the calling thread where it is).
    fn bring_up(spec: LabSpec) -> Result<(LabRun, super::LabState)> {
        if let Some(w) = super::calibrate::advice_for(&spec) {
            eprintln!("gridperf: warning: {w}");
        }
        let spec = super::calibrate::without_floor(spec)?;
        let description = spec.description.clone();
        let profile = spec.profile.clone().unwrap_or_default();
        let name = spec.name.clone();
        let st = super::up(spec)?;
        let run = LabRun {
            name,
            agent: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            description,
            profile,
            child: None,
            home: None,
            signals: None,
        };
        Ok((run, st))
    }

    /// Brings up `spec`, starts `gridperf serve --once` on host b, waits
    /// until it listens, and moves the calling thread into host a.
    pub fn start(spec: LabSpec) -> Result<LabRun> {
        Self::start_serving(spec, &Serving::default())
    }

    /// The same, the agent serving `serving` too (a copy's destination).
    pub fn start_serving(spec: LabSpec, serving: &Serving) -> Result<LabRun> {
        let name = spec.name.clone();
        let (mut run, st) = LabRun::bring_up(spec)?;
        let host = |side: Side| st.hosts.iter().find(|h| h.side == side).cloned();
        let (Some(a), Some(b)) = (host(Side::A), host(Side::B)) else {
            return Err(Error::internal("the lab has no hosts a and b"));
        };
        run.agent = SocketAddr::from((b.addr, gridperf_core::wire::DEFAULT_PORT));
        // as root's real-time emulator comes first, a rootless one weighs
        // more than what runs on the hosts: the agent here. (Not this
        // thread, the client: what it starts would inherit the nice value,
        // the next lab's emulator of a survey too, and it cannot be undone.)
        let niced = super::hosts_niced(&name);
        run.child = Some(start_agent_with(&b, gridperf_core::wire::DEFAULT_PORT, &serving.agent_args(), niced)?);
        run.signals = Some(watch(&name, run.child.as_ref().map(|c| c.id()))?);
        run.home = Some(
            File::open("/proc/thread-self/ns/net")
                .map_err(|e| Error::internal(format!("remembering this thread's namespace: {e}")))?,
        );
        gridperf_sys::netns_enter(&a.netns).map_err(|e| Error::internal(format!("entering {}: {e}", a.netns)))?;
        Ok(run)
    }
}

/// What a lab's own agent serves beyond tests.
#[derive(Debug, Clone, Default)]
pub struct Serving {
    /// Files under this directory (a copy's destination), to and from the
    /// lab's own addresses only.
    pub root: Option<std::path::PathBuf>,
}

impl Serving {
    /// The agent's arguments for it.
    fn agent_args(&self) -> Vec<String> {
        match &self.root {
            None => Vec::new(),
            Some(root) => vec![
                "--root".into(),
                root.display().to_string(),
                "--allow".into(),
                format!("{}/{}", super::LAB_NET, super::LAB_PREFIX),
            ],
        }
    }
}

/// Starts `gridperf serve` on a lab host, on `port`, and waits until it
/// listens (asked on the host's own loopback: across the lab a connection
/// takes a round trip, 270 ms on some profiles), niced as a host's process
/// when `niced` ([`super::hosts_niced`]). The caller ends it.
pub fn start_agent(host: &super::Host, port: u16, niced: bool) -> Result<std::process::Child> {
    start_agent_with(host, port, &[], niced)
}

/// The same, with more arguments for the agent.
fn start_agent_with(host: &super::Host, port: u16, extra: &[String], niced: bool) -> Result<std::process::Child> {
    let exe = std::env::current_exe().map_err(|e| Error::internal(e.to_string()))?;
    let extra = extra.to_vec();
    let mut child = gridperf_sys::in_netns(&host.netns, move || {
        super::nice_as_host(niced);
        Command::new(exe)
            // the lab's own agent: busy-polling is the user's to ask for
            .args(["serve", "--max-tests", "1", "--allow-busy-poll", "--port", &port.to_string()])
            .args(&extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
    })
    .map_err(|e| Error::internal(format!("starting the agent on host {}: {e}", host.name)))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    let local = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    loop {
        let listening = gridperf_sys::in_netns(&host.netns, move || {
            Ok(std::net::TcpStream::connect_timeout(&local, Duration::from_millis(200)).is_ok())
        })
        .unwrap_or(false);
        if listening {
            return Ok(child);
        }
        if let Ok(Some(st)) = child.try_wait() {
            return Err(Error::internal(format!(
                "the agent on the lab's host {} exited ({st}) before it listened on port {port} (is the port taken?)",
                host.name
            )));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::internal(format!(
                "the agent on the lab's host {} did not start listening within 5 s",
                host.name
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ctrl-C (or SIGTERM) during a lab run: a thread that stays in this
/// process's first namespace takes the lab down (after the run's agent),
/// then exits as the signal would have.
fn watch(name: &str, agent_pid: Option<u32>) -> Result<signal_hook::iterator::Handle> {
    let mut signals = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM])
        .map_err(|e| Error::internal(format!("catching signals: {e}")))?;
    let handle = signals.handle();
    let lab = name.to_string();
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
            eprintln!("gridperf: interrupted: taking lab {lab} down");
            if let Some(p) = agent_pid {
                let _ = gridperf_sys::signal(p, libc::SIGTERM);
            }
            let _ = super::down(&lab);
            std::process::exit(128 + sig);
        }
    });
    Ok(handle)
}

impl LabRun {
    /// Brings up `spec` for a run that puts its own sockets in the lab's
    /// hosts (fanout): no agent, and the calling thread stays where it is.
    pub fn hosts_only(spec: LabSpec) -> Result<(LabRun, Vec<super::Host>)> {
        let name = spec.name.clone();
        let (mut run, st) = LabRun::bring_up(spec)?;
        run.signals = Some(watch(&name, None)?);
        Ok((run, st.hosts.clone()))
    }
}

/// Set when a signal arrived during a lab run: the signal's thread takes
/// the lab down and exits; the run's own unwinding leaves it to that thread.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Drop for LabRun {
    fn drop(&mut self) {
        if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
            // the run failed because its lab is going away: let the
            // signal's thread finish and exit with the signal's status
            std::thread::sleep(Duration::from_secs(15));
        }
        if let Some(h) = self.signals.take() {
            h.close();
        }
        if let Some(home) = self.home.take() {
            let _ = gridperf_sys::setns_net(&home);
        }
        if let Some(mut c) = self.child.take() {
            super::stop_child(&mut c, Duration::from_secs(2));
        }
        let _ = super::down(&self.name);
    }
}
