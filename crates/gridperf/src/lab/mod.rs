//! `gridperf lab`: emulated networks on one machine. Each host is a network
//! namespace with a TUN device `gp0`; one emulator process holds every TUN
//! descriptor and joins the two sides of the bottleneck through the link
//! model.
//!
//! As root, the namespaces are named (`ip netns exec gp-NAME-a ...` works)
//! and the state lives under /run/gridperf. Any other user's lab is
//! rootless: `main` moves the process into a user namespace of its own
//! before anything else ([`prepare`]), in which it is root over what it
//! makes and nothing more; the emulator holds the network namespaces open
//! (`/proc/PID/fd/N`, no name), and the state lives in the user's own
//! runtime directory ([`run_dir`]), where no other user can see or touch it.
//!
//! `lab up` starts the emulator in the background and waits until it says
//! the lab is ready; the emulator writes its state and its health figures
//! under RUN_DIR/lab-NAME/. `lab down` stops it, and removes whatever a
//! crashed emulator left behind.

pub mod calibrate;
pub mod emulator;
pub mod run;

use crate::error::{Error, Result};
use emulator::{Health, Port, Side};
use gridperf_core::lab::emu::LinkConfig;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where root's labs keep their state.
pub const RUN_DIR: &str = "/run/gridperf";

/// What a command does with labs, for [`prepare`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespaces {
    /// Nothing (or only reads a lab's files, or signals its own processes).
    None,
    /// Makes namespaces: a lab, or a private loopback.
    Own,
    /// Enters a running lab's namespaces (`lab exec`, `tune --in-lab`).
    OfLab(String),
}

/// Called first thing in `main`, while the process is single-threaded: a
/// user who is not root moves into a user namespace of their own to make a
/// lab, or into a lab's to enter it. Root stays where it is, and so does a
/// process already inside (one that `lab exec` started). What fails is said
/// when the command needs it ([`crate::host::may_make_namespaces`]).
pub fn prepare(what: Namespaces) {
    match what {
        Namespaces::None => {}
        Namespaces::Own => crate::host::make_own_userns(),
        Namespaces::OfLab(name) => {
            if let Ok(s) = running(&name) {
                crate::host::enter_userns_of(s.pid);
            }
        }
    }
}

/// Where this user's labs keep their state: /run/gridperf for root;
/// otherwise $XDG_RUNTIME_DIR/gridperf when that directory is the user's
/// own, else /tmp/gridperf-UID. Inside a rootless lab's user namespace it is
/// the same directory as outside it.
pub fn run_dir() -> PathBuf {
    if crate::host::is_root() {
        return PathBuf::from(RUN_DIR);
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        if x.is_absolute() && private(&x) {
            return x.join("gridperf");
        }
    }
    PathBuf::from(format!("/tmp/gridperf-{}", gridperf_sys::outside_uid()))
}

/// Whether a directory is this user's and closed to others' writes (not a
/// symbolic link another user could have planted in /tmp).
fn private(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == gridperf_sys::euid() && m.mode() & 0o022 == 0)
}

/// The run directory, made if missing (0700 for a user's own) and checked.
fn ensure_run_dir() -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let d = run_dir();
    if crate::host::is_root() {
        std::fs::create_dir_all(&d).map_err(|e| Error::internal(format!("{}: {e}", d.display())))?;
        return Ok(d);
    }
    match std::fs::DirBuilder::new().mode(0o700).create(&d) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::internal(format!("making {}: {e}", d.display()))),
    }
    if !private(&d) {
        return Err(Error::usage(format!(
            "{} is not a directory of yours closed to others: remove it (or set XDG_RUNTIME_DIR to a directory \
             of yours) so that labs can keep their state there",
            d.display()
        )));
    }
    Ok(d)
}

/// The environment variable `gridperf lab exec` sets for the command it
/// runs: the lab that command's measurements cross. The command line reads
/// it once and passes the lab along explicitly.
pub const LAB_ENV: &str = "GRIDPERF_LAB";

/// What a lab is made of, as `lab up` resolved it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabSpec {
    pub name: String,
    /// Hosts on the A side and on the B side of the bottleneck.
    pub hosts: (usize, usize),
    pub mtu: u32,
    /// The link from A to B, and from B to A.
    pub ab: LinkConfig,
    pub ba: LinkConfig,
    pub seed: u64,
    /// The profile it came from, if any, and the settings in words.
    pub profile: Option<String>,
    pub description: String,
    /// The loopback profile: one private namespace with lo only, which hosts
    /// a and b share (127.0.0.1); no emulated link. `mtu` 0 keeps lo's own.
    #[serde(default)]
    pub loopback: bool,
    /// Access links: (host, settings), host None for every host; a host's
    /// own entry wins over the one for all.
    #[serde(default)]
    pub access: Vec<(Option<String>, LinkConfig)>,
    /// The process that brought the lab up for one run (`--lab`) and runs
    /// in it: it takes the lab down itself, so the emulator spares it when
    /// it ends every other process in the lab's namespaces.
    #[serde(default)]
    pub owner: Option<u32>,
    /// Per-namespace sysctls set in every host once the lab is up
    /// (`lab up --sysctl`), e.g. an old kernel's buffer limits.
    #[serde(default)]
    pub sysctls: Vec<(String, String)>,
    /// The bottleneck as parallel paths (`--paths N`), each path's A to B
    /// and B to A; a connection's 5-tuple picks its path. Empty: one path,
    /// `ab` and `ba` themselves.
    #[serde(default)]
    pub paths: Vec<(LinkConfig, LinkConfig)>,
    /// The lab's own round trip on this machine, ns, measured on a bare
    /// twin when the lab came up and taken off its delays, half each way
    /// ([`calibrate::without_floor`]); none for a lab without delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_ns: Option<f64>,
}

/// A sysctl every host of a lab gets (`lab up --sysctl`, `--lab-set
/// net.*=...`): a net.* name and value; a global one is refused, as a host
/// cannot have its own.
pub fn host_sysctl(line: &str) -> Result<(String, String)> {
    let (k, v) = crate::host::split_line(line)?;
    if gridperf_core::analysis::tune::per_namespace(&k) == Some(false) {
        return Err(Error::usage(format!(
            "{k}: global on Linux, not per network namespace; a lab host cannot have its own"
        )));
    }
    Ok((k, v))
}

/// What comes off each direction's delay for a lab's own round trip of `floor` ns.
pub fn floor_each_way_ns(floor: f64) -> u64 {
    (floor / 2.0).round() as u64
}

impl LabSpec {
    /// The round trip the lab was asked for, end to end: its links' delays
    /// both ways and what was taken off each for its own round trip
    /// ([`floor_each_way_ns`], to the nanosecond: a BDP from it is the
    /// asked one's).
    pub fn rtt_ns(&self) -> u64 {
        self.ab.delay_ns + self.ba.delay_ns + 2 * self.floor_ns.map_or(0, floor_each_way_ns)
    }

    /// The bottleneck's paths, A to B and B to A: `paths`, or the one link.
    pub fn bottleneck(&self) -> Vec<(LinkConfig, LinkConfig)> {
        if self.paths.is_empty() {
            vec![(self.ab.clone(), self.ba.clone())]
        } else {
            self.paths.clone()
        }
    }

    /// The access link of one host, if any.
    pub fn access_of(&self, host: &str) -> Option<LinkConfig> {
        let own = self.access.iter().rev().find(|(h, _)| h.as_deref() == Some(host));
        let all = self.access.iter().rev().find(|(h, _)| h.is_none());
        own.or(all).map(|(_, l)| l.clone())
    }
}

/// One host of a running lab.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Host {
    /// a, b (two hosts) or a1, a2, b1, ... (a dumbbell).
    pub name: String,
    /// Its network namespace: a name under /run/netns (root's labs), or
    /// /proc/PID/fd/N, held open by the emulator (a rootless lab's).
    pub netns: String,
    /// The namespace's inode, once made: how the processes still in it are
    /// found after the emulator that held it is gone.
    #[serde(default)]
    pub ns_inode: Option<u64>,
    pub addr: Ipv4Addr,
    pub side: Side,
}

/// What a running lab's emulator wrote about itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabState {
    pub spec: LabSpec,
    pub pid: u32,
    pub hosts: Vec<Host>,
}

fn dir(name: &str) -> PathBuf {
    run_dir().join(format!("lab-{name}"))
}

/// The nice value of what runs on a lab's hosts when its emulator has no
/// real-time priority (a lab that is not root's): as SCHED_FIFO puts the
/// emulator first as root, this weighs it about three to one against each
/// host's busy thread (1024 against 335) and still far above a niced
/// build (15).
pub const HOST_NICE: i32 = 5;

/// Whether what runs on lab `name`'s hosts is niced to [`HOST_NICE`]: its
/// emulator has no real-time priority. Its first report says so; a lab
/// that has not reported within a second is taken as real-time (nothing
/// niced).
pub fn hosts_niced(name: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        if let Some(rt) = health(name).and_then(|h| h.realtime) {
            return !rt;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Nices the calling thread to [`HOST_NICE`] (what it starts inherits it),
/// as a lab host's process, when `niced`. A thread already niced further
/// (a user's `nice -n 19 gridperf ...`) stays as it is. Only a thread of
/// its own (`in_netns`'s) may be niced: a user cannot undo it, and a lab's
/// emulator started after it would inherit it.
pub fn nice_as_host(niced: bool) {
    if niced && gridperf_sys::thread_nice().is_ok_and(|n| n < HOST_NICE) {
        let _ = gridperf_sys::set_thread_nice(HOST_NICE);
    }
}

/// Every lab host's address is in 10.77.0.0/16 (the lab's own: inside the
/// lab only), `LAB_NET` / `LAB_PREFIX`.
pub const LAB_NET: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 0);
pub const LAB_PREFIX: u8 = 16;

/// The hosts of a lab: names, namespaces and addresses (10.77.1.i on the A
/// side, 10.77.2.i on the B side, all in [`LAB_NET`]).
pub fn hosts(name: &str, (na, nb): (usize, usize)) -> Vec<Host> {
    let mut out = Vec::new();
    let [n0, n1, ..] = LAB_NET.octets();
    for (side, n, letter, net) in [(Side::A, na, 'a', 1u8), (Side::B, nb, 'b', 2u8)] {
        for i in 1..=n {
            let hname = if na == 1 && nb == 1 { letter.to_string() } else { format!("{letter}{i}") };
            out.push(Host {
                netns: format!("gp-{name}-{hname}"),
                ns_inode: None,
                name: hname,
                addr: Ipv4Addr::new(n0, n1, net, i as u8),
                side,
            });
        }
    }
    out
}

/// The hosts of a lab as specified (the loopback lab's two share one namespace).
pub fn hosts_of(spec: &LabSpec) -> Vec<Host> {
    if spec.loopback {
        let netns = format!("gp-{}-lo", spec.name);
        return vec![
            Host { name: "a".into(), netns: netns.clone(), ns_inode: None, addr: Ipv4Addr::LOCALHOST, side: Side::A },
            Host { name: "b".into(), netns, ns_inode: None, addr: Ipv4Addr::LOCALHOST, side: Side::B },
        ];
    }
    hosts(&spec.name, spec.hosts)
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 24 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(Error::usage(format!("lab name {name:?}: use 1 to 24 letters, digits or -")));
    }
    Ok(())
}

/// Whether this process may make a lab: root, or a user in a user
/// namespace of their own; and a TUN device to make (`tun`: the lab's
/// hosts are TUN devices, not the loopback lab's one namespace).
fn may_make(what: &str, tun: bool) -> Result<()> {
    crate::host::may_make_namespaces(what)?;
    let dev = "/dev/net/tun";
    if !tun {
        return Ok(());
    }
    if !std::path::Path::new(dev).exists() {
        return Err(Error::usage(format!("{what} needs {dev} (the tun kernel module)")));
    }
    // opening it makes nothing (a device is made by TUNSETIFF); a user who
    // is not root needs it open to all, as udev's rule leaves it (mode 0666)
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open(dev) {
        use std::os::unix::fs::PermissionsExt;
        let mode =
            std::fs::metadata(dev).map(|m| format!("{:04o}", m.permissions().mode() & 0o777)).unwrap_or_default();
        return Err(Error::usage(format!(
            "{what} makes its hosts' network devices with {dev}, which this user cannot open ({e}; its mode is {mode}, \
             where udev's rule makes it 0666): run it as root (sudo), or open the device to users as udev does: \
             sudo chmod 0666 {dev}"
        )));
    }
    Ok(())
}

/// A file of a lab's, read only from a run directory that is this user's own.
fn read_lab_file(name: &str, file: &str) -> Option<String> {
    let d = run_dir();
    if !crate::host::is_root() && !private(&d) {
        return None;
    }
    std::fs::read_to_string(d.join(format!("lab-{name}")).join(file)).ok()
}

/// Reads a lab's state; None when no lab of that name runs.
pub fn state(name: &str) -> Option<LabState> {
    serde_json::from_str(&read_lab_file(name, "state.json")?).ok()
}

/// A lab's state when its emulator runs; when it has gone (killed, or the
/// machine's process table says otherwise), an error that says how to
/// clean up after it.
pub fn running(name: &str) -> Result<LabState> {
    let flag = if name == "default" { String::new() } else { format!(" --name {name}") };
    match state(name) {
        Some(s) if emulator_alive(s.pid) => Ok(s),
        Some(s) => Err(Error::usage(format!(
            "lab {name:?} is not up: its emulator (pid {}) has gone; `gridperf lab down{flag}` removes what it left",
            s.pid
        ))),
        None => Err(Error::usage(format!("no lab named {name:?} is up: `gridperf lab up{flag}` first"))),
    }
}

/// The latest health figures the emulator wrote.
pub fn health(name: &str) -> Option<Health> {
    serde_json::from_str(&read_lab_file(name, "health.json")?).ok()
}

/// The emulator's first health reading taken after `mono_ns`
/// (CLOCK_MONOTONIC): it writes one every 250 ms, so this waits for the
/// next, at most `within` (an emulator that is gone writes none).
pub fn health_after(name: &str, mono_ns: u64, within: Duration) -> Option<Health> {
    let until = Instant::now() + within;
    loop {
        if let Some(h) = health(name).filter(|h| h.mono_ns > mono_ns) {
            return Some(h);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether `pid` is still a lab emulator (and not a process that took its
/// number after it died).
fn emulator_alive(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        let args: Vec<&[u8]> = c.split(|&b| b == 0).collect();
        args.windows(2).any(|w| w == [&b"lab"[..], &b"emulator"[..]])
    })
}

/// Ends the processes still running inside a host's namespace (what `lab
/// exec` started there): SIGTERM, then SIGKILL after a second. The
/// namespace is found by its file while that is there (a name, or the
/// emulator's descriptor), else by its inode.
/// The processes in a host's namespace: found by its name, else (a
/// rootless lab's, or a name already gone) by its inode; None when neither
/// says.
fn processes_in(netns: &str, ns_inode: Option<u64>) -> Option<Vec<u32>> {
    match (gridperf_sys::netns_pids(netns), ns_inode) {
        (Ok(p), _) => Some(p),
        (Err(_), Some(inode)) => Some(gridperf_sys::netns_inode_pids(inode).unwrap_or_default()),
        (Err(_), None) => None,
    }
}

fn end_processes_in(netns: &str, ns_inode: Option<u64>, spare: Option<u32>) {
    let Some(pids) = processes_in(netns, ns_inode) else { return };
    let me = std::process::id();
    let pids: Vec<u32> = pids.into_iter().filter(|&p| p != me && Some(p) != spare).collect();
    for &p in &pids {
        let _ = gridperf_sys::signal(p, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &p in &pids {
        if alive(p) {
            let _ = gridperf_sys::signal(p, libc::SIGKILL);
        }
    }
    // until their sockets are closed (a zombie's are), for abort_sockets_in
    let deadline = Instant::now() + Duration::from_secs(1);
    while pids.iter().any(|&p| alive(p) && !zombie(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` has ended but not been collected (its files are closed).
fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// Resets the TCP sockets left in a lab host's namespace once its
/// processes have ended: a process ended mid-transfer leaves its sockets
/// as orphans with their data unsent, and once the lab's links are gone
/// they retry into nothing for minutes, holding their buffers in the
/// machine's TCP memory. Across a 10 Gbit/s lab that was 1.2 GB from one
/// interrupted copy, enough to put TCP under memory pressure, where the
/// kernel clamps every window on the machine to four segments and the runs
/// after measured that (a calibration's TCP flow at 6 KB windows, 5.9
/// Mbit/s across 10 Gbit/s). Best effort: what cannot be reset times out.
fn abort_sockets_in(netns: &str) {
    if gridperf_sys::netns_exists(netns) {
        let _ = gridperf_sys::in_netns(netns, gridperf_sys::abort_tcp_sockets);
    }
}

/// Removes, by name, every namespace and file a lab of this name may have
/// left, and ends the processes still running in its namespaces.
fn clean(name: &str, hosts_guess: &[Host]) {
    for h in hosts_guess {
        end_processes_in(&h.netns, h.ns_inode, None);
        abort_sockets_in(&h.netns);
        if gridperf_sys::netns_exists(&h.netns) {
            let _ = gridperf_sys::netns_delete(&h.netns);
        }
    }
    // root's named hosts of any shape this lab may have had
    if let (true, Ok(entries)) = (crate::host::is_root(), std::fs::read_dir(gridperf_sys::NETNS_DIR)) {
        let prefix = format!("gp-{name}-");
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with(&prefix) {
                end_processes_in(&n, None, None);
                abort_sockets_in(&n);
                let _ = gridperf_sys::netns_delete(&n);
            }
        }
    }
    let _ = std::fs::remove_dir_all(dir(name));
}

/// Watches a lab's emulator over a run: its health before, and on
/// [`LabWatch::record`] what it says of itself over the run.
pub struct LabWatch {
    name: String,
    before: Option<Health>,
    /// Set when the run was judged round trip by round trip.
    by_round_trip: Option<RoundTrips>,
    /// The late windows read so far, and the reading they reach to: each
    /// read takes only those begun since, so a long run on a busy machine
    /// is not limited to the windows the emulator keeps (512; a quick
    /// survey's 33 s run across lan-gige under 7% steal began 761, and was
    /// judged as a whole)
    windows: Option<(Health, Vec<[u64; 2]>)>,
}

/// A run judged round trip by round trip ([`LabWatch::judged_by_round_trip`]),
/// or a transfer run by run (each run a loop of round trips).
#[derive(Debug, Clone, PartialEq)]
pub struct RoundTrips {
    /// What was counted: "round trips", or "transfer runs".
    pub what: &'static str,
    /// Left out only when late for more than 1 in this many of its time
    /// (a transfer run), else for any crossing (a round trip).
    pub late_share_over: Option<u64>,
    /// The round trips counted, and those of them left out for crossing a
    /// window in which the emulator was late.
    pub counted: u64,
    pub left_out: u64,
    /// Why what was left out voids the run, if it does (too large a share
    /// of the run, or all of a point).
    pub too_many: Option<String>,
}

impl Default for RoundTrips {
    fn default() -> RoundTrips {
        RoundTrips { what: "round trips", late_share_over: None, counted: 0, left_out: 0, too_many: None }
    }
}

impl RoundTrips {
    /// A transfer judged run by run.
    pub fn transfer_runs() -> RoundTrips {
        RoundTrips { what: "transfer runs", late_share_over: Some(emulator::HELD_UP_PER), ..RoundTrips::default() }
    }

    /// " for over 1 in N of their time", for a count judged by its share.
    fn late_for(&self) -> String {
        self.late_share_over.map(|n| format!(" for over 1 in {n} of their time")).unwrap_or_default()
    }

    /// Counts a point's `counted` (round trips or runs), `left_out` of
    /// them; all of a point left out voids the run.
    pub fn count_point(&mut self, point: &str, counted: u64, left_out: u64) {
        self.counted += counted;
        self.left_out += left_out;
        if left_out > 0 && left_out >= counted && self.too_many.is_none() {
            self.too_many = Some(format!(
                "all {counted} {} of {point} crossed the lab's emulator while it was late{}",
                self.what,
                self.late_for()
            ));
        }
    }

    /// Once every point is counted: more than 1 in LEFT_OUT_PER of the run
    /// left out voids it.
    pub fn judge_run(&mut self) {
        if self.too_many.is_none() && too_many_left_out(self.left_out, self.counted) {
            self.too_many = Some(format!(
                "{} of the run's {} {} crossed the lab's emulator while it was late{} (more than 1 in {LEFT_OUT_PER})",
                self.left_out,
                self.counted,
                self.what,
                self.late_for()
            ));
        }
    }
}

/// A run may lose at most 1 in this many of its round trips to the
/// emulator's late windows. The windows fall where the hypervisor or the
/// machine's other tasks put them, not where the path is slow, so what is
/// kept is still a fair draw of the path's round trips; past a quarter,
/// the emulator was late so often that the run is not taken.
pub const LEFT_OUT_PER: u64 = 4;

/// Whether the round trips a run left out void it: more than 1 in
/// LEFT_OUT_PER of those it counted, and more than one (a single round
/// trip that met one hold-up says nothing of how often the emulator is
/// late), or every one of them. Judged over the run, not a point: a quick
/// survey's point across wan holds three or four round trips, and two of
/// four left out of one point (a rootless survey) is chance, not a rate.
pub fn too_many_left_out(left_out: u64, counted: u64) -> bool {
    (left_out * LEFT_OUT_PER > counted && left_out > 1) || (left_out > 0 && left_out >= counted)
}

impl LabWatch {
    pub fn start(name: &str) -> LabWatch {
        LabWatch { name: name.to_string(), before: health(name), by_round_trip: None, windows: None }
    }

    /// A watch that began at an earlier reading of the emulator's health.
    pub fn since(name: &str, before: Health) -> LabWatch {
        LabWatch { name: name.to_string(), before: Some(before), by_round_trip: None, windows: None }
    }

    /// The windows (CLOCK_MONOTONIC ns) in which the emulator was late since
    /// the watch began, through `through`: it waits for the emulator's
    /// first reading written after that (it writes one every 250 ms; at most
    /// 400 ms). None when they cannot be known: the emulator unread, or
    /// more windows begun since the last read than it keeps.
    pub fn late_windows(&mut self, through: u64) -> Option<Vec<[u64; 2]>> {
        let after = health_after(&self.name, through, Duration::from_millis(400))?;
        let (from, mut all) = match self.windows.take() {
            Some(read) => read,
            None => (self.before.clone()?, Vec::new()),
        };
        let since = emulator::late_windows_since(&from, &after)?;
        emulator::join_windows(&mut all, since);
        self.windows = Some((after, all.clone()));
        Some(all)
    }

    /// Whether the run so far, through the reading [`LabWatch::late_windows`]
    /// last waited for, is INVALID judged as a whole; None before such a read.
    pub fn invalid_as_a_whole(&self) -> Option<bool> {
        let (after, _) = self.windows.as_ref()?;
        Some(after.since(self.before.as_ref()?).invalid_because().is_some())
    }

    /// The run was judged round trip by round trip: its verdict leaves the
    /// emulator's late packets and hold-ups out, and says what was left out.
    pub fn judged_by_round_trip(&mut self, judged: RoundTrips) {
        self.by_round_trip = Some(judged);
    }

    /// The lab the run crossed and the emulator's verdict over it. The
    /// emulator writes its health every 250 ms: this waits for the next
    /// write (at most 300 ms, an emulator that is gone writes none) before
    /// reading it again.
    pub fn record(self) -> gridperf_core::model::LabRecord {
        let after = health_after(&self.name, gridperf_sys::monotonic_ns(), Duration::from_millis(300))
            .or_else(|| health(&self.name));
        let state = state(&self.name);
        let (emulator, invalid, cause, note) = match (&self.before, &after) {
            (Some(b), Some(a)) => {
                let d = a.since(b);
                let (invalid, cause, note) = match &self.by_round_trip {
                    None => (d.invalid_because(), d.invalid_cause(), d.held_up_note()),
                    Some(rt) => round_trip_verdict(&d, rt),
                };
                (serde_json::to_value(&d).unwrap_or_default(), invalid, cause, note)
            }
            _ => (
                serde_json::Value::Null,
                Some(format!("the emulator of lab {:?} could not be read", self.name)),
                Some(gridperf_core::model::LabCause::Emulator),
                None,
            ),
        };
        gridperf_core::model::LabRecord {
            name: self.name,
            profile: state.as_ref().and_then(|s| s.spec.profile.clone()),
            floor_ns: state.as_ref().and_then(|s| s.spec.floor_ns),
            description: state.map(|s| s.spec.description).unwrap_or_default(),
            emulator,
            invalid,
            cause,
            note,
        }
    }
}

/// The verdict on a run judged round trip by round trip: what voids it
/// beside the emulator's lateness, and too large a share left out; the
/// note says what was left out, and why.
fn round_trip_verdict(
    d: &Health,
    rt: &RoundTrips,
) -> (Option<String>, Option<gridperf_core::model::LabCause>, Option<String>) {
    use emulator::Judged;
    let other = d.invalid_because_with(Judged::ByRoundTrip);
    let invalid = match (&other, &rt.too_many) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.clone().or_else(|| b.clone()),
    };
    let cause = if other.is_some() {
        d.invalid_cause_with(Judged::ByRoundTrip)
    } else if rt.too_many.is_some() {
        // the lateness alone: what held the emulator up, as a whole run's
        d.invalid_cause().or(Some(gridperf_core::model::LabCause::Emulator))
    } else {
        None
    };
    // what held the emulator up, where a whole run's verdict would have said
    let lateness = d.invalid_because().filter(|_| other.is_none());
    let note = if rt.left_out > 0 {
        let mut w = format!(
            "{} of {} {} crossed the lab's emulator while it was late{} (held up, or a packet over {} us \
             behind schedule) and are left out of the figures; the rest crossed the path as configured",
            rt.left_out,
            rt.counted,
            rt.what,
            rt.late_for(),
            emulator::LAG_THRESHOLD_NS / 1000
        );
        if let Some(l) = &lateness {
            w += &format!(" (the run as a whole: {l})");
        }
        Some(w)
    } else {
        lateness
            .map(|l| format!("none of the {} counted crossed the lab's emulator while it was late ({l})", rt.what))
            .or_else(|| d.held_up_note())
    };
    (invalid, cause, note)
}

/// Ends a process gridperf started: SIGTERM, up to `grace` to exit, then
/// SIGKILL; reaped either way.
pub fn stop_child(child: &mut std::process::Child, grace: Duration) {
    let _ = gridperf_sys::signal(child.id(), libc::SIGTERM);
    let until = Instant::now() + grace;
    while child.try_wait().ok().flatten().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The most the emulator holds at once for a lab (every link's delay line
/// and queue full, [`LinkConfig::held_bytes`]), and the links whose hold has
/// no bound beyond that (no rate, or an unlimited queue).
pub fn memory_of(spec: &LabSpec) -> (u64, Vec<String>) {
    let mtu = if spec.mtu == 0 { 65_536 } else { spec.mtu };
    let mut links: Vec<(String, LinkConfig)> = Vec::new();
    for (k, (ab, ba)) in spec.bottleneck().into_iter().enumerate() {
        let path = if spec.paths.is_empty() { String::new() } else { format!(" (path {})", k + 1) };
        links.push((format!("A to B{path}"), ab));
        links.push((format!("B to A{path}"), ba));
    }
    for h in hosts_of(spec) {
        if let Some(a) = spec.access_of(&h.name) {
            links.push((format!("{}'s access link, up", h.name), a.clone()));
            links.push((format!("{}'s access link, down", h.name), a));
        }
    }
    let (mut total, mut unbounded) = (0u64, Vec::new());
    for (name, l) in links {
        let (held, bounded) = l.held_bytes(mtu);
        total = total.saturating_add(held);
        // a link that only passes packets on at once holds nothing to speak of
        if !bounded && (l.delay_ns > 0 || l.rate_bps.is_some()) {
            unbounded.push(name);
        }
    }
    (total, unbounded)
}

/// Every link a lab's emulator emulates: the bottleneck's, each way and
/// on each path, then the hosts' access links (one config for up and down).
fn emulated_links(spec: &LabSpec) -> Vec<LinkConfig> {
    let mut links: Vec<LinkConfig> = spec.bottleneck().into_iter().flat_map(|(ab, ba)| [ab, ba]).collect();
    links.extend(hosts_of(spec).iter().filter_map(|h| spec.access_of(&h.name)));
    links
}

/// What the emulator holds from the start, whatever passes: its read
/// buffers ([`emulator::ReadBuffers`]).
pub fn held_from_start(spec: &LabSpec) -> u64 {
    emulator::ReadBuffers::bytes_for(&emulated_links(spec))
}

/// The memory a lab may take: half of what the machine has available now.
fn memory_cap() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024 / 2)
}

/// A lab whose delay lines and queues, full, would take more than the cap
/// is refused before anything is made (a 10 Gbit/s link with a 10 s delay
/// would hold 12.5 GB each way).
fn check_memory(spec: &LabSpec) -> Result<()> {
    let (need, _) = memory_of(spec);
    let Some(cap) = memory_cap() else { return Ok(()) };
    if need > cap {
        use gridperf_core::units::fmt_size;
        return Err(Error::usage(format!(
            "this lab's delay lines and queues, full, would hold {} (each link's rate x its delay and jitter, plus its \
             queue), more than the {} the emulator may take (half of this machine's available memory): lower the \
             rate, the delay or the queue",
            fmt_size(need),
            fmt_size(cap)
        )));
    }
    Ok(())
}

/// Brings a lab up: starts the emulator and waits until it is ready.
pub fn up(spec: LabSpec) -> Result<LabState> {
    check_name(&spec.name)?;
    check_memory(&spec)?;
    may_make("lab up", !spec.loopback)?;
    if let Some(s) = state(&spec.name) {
        if emulator_alive(s.pid) {
            return Err(Error::usage(format!(
                "a lab named {:?} is already up (emulator pid {}): `gridperf lab down{}` first, or give another --name",
                spec.name,
                s.pid,
                if spec.name == "default" { String::new() } else { format!(" --name {}", spec.name) }
            )));
        }
    }
    // Ctrl-C while the lab comes up takes it down again: caught from before
    // anything is made, so that nothing is made that the catch cannot undo
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, interrupted.clone());
    }
    // whatever a crashed emulator left
    let guess = state(&spec.name).map(|s| s.hosts).unwrap_or_else(|| hosts_of(&spec));
    clean(&spec.name, &guess);
    let d = ensure_run_dir()?.join(format!("lab-{}", spec.name));
    std::fs::create_dir_all(&d).map_err(|e| Error::internal(format!("{}: {e}", d.display())))?;
    std::fs::write(d.join("spec.json"), serde_json::to_vec_pretty(&spec).map_err(|e| Error::internal(e.to_string()))?)
        .map_err(|e| Error::internal(e.to_string()))?;
    let log = std::fs::File::create(d.join("emulator.log")).map_err(|e| Error::internal(e.to_string()))?;
    let exe = std::env::current_exe().map_err(|e| Error::internal(e.to_string()))?;
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(exe)
        .args(["lab", "emulator", "--name", &spec.name])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        // its own process group: a Ctrl-C meant for `lab up` does not reach it later
        .process_group(0)
        .spawn()
        .map_err(|e| Error::internal(format!("cannot start the emulator: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if interrupted.load(std::sync::atomic::Ordering::SeqCst) {
            stop_child(&mut child, Duration::from_secs(3));
            clean(&spec.name, &hosts_of(&spec));
            return Err(Error::usage("interrupted: the lab was taken down again"));
        }
        if let Some(s) = state(&spec.name) {
            for (k, v) in &spec.sysctls {
                for h in &s.hosts {
                    if let Err(e) = crate::host::set_in(&h.netns, k, v) {
                        let _ = down(&spec.name);
                        return Err(Error::usage(format!("lab up --sysctl: {e}; the lab was taken down again")));
                    }
                }
            }
            return Ok(s);
        }
        if let Ok(Some(st)) = child.try_wait() {
            let log = std::fs::read_to_string(d.join("emulator.log")).unwrap_or_default();
            clean(&spec.name, &hosts_of(&spec));
            return Err(Error::internal(format!("the emulator exited ({st}) before the lab was up:\n{}", log.trim())));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            clean(&spec.name, &hosts_of(&spec));
            return Err(Error::internal("the emulator did not bring the lab up within 10 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops a lab and removes everything it made. Works after a crash too.
pub fn down(name: &str) -> Result<bool> {
    check_name(name)?;
    let st = state(name);
    let mut was_up = false;
    if let Some(s) = &st {
        // what `lab exec` started in the lab goes first, while its
        // namespaces still have their names
        for h in &s.hosts {
            end_processes_in(&h.netns, h.ns_inode, None);
        }
        // their sockets, orphans now, the emulator resets on its way out
        // (abort_sockets_in; clean does it for one that is gone)
        // an emulator of this process's that already ended is a zombie
        // until collected (emulator_alive counts it gone): collect it
        gridperf_sys::reap(s.pid);
        if emulator_alive(s.pid) {
            was_up = true;
            let _ = gridperf_sys::signal(s.pid, libc::SIGTERM);
            // gone, or a zombie: the emulator of a lab this process
            // brought up is its child, collected here
            let gone = |pid: u32| {
                gridperf_sys::reap(pid);
                !emulator_alive(pid)
            };
            let deadline = Instant::now() + Duration::from_secs(5);
            while !gone(s.pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if !gone(s.pid) {
                let _ = gridperf_sys::signal(s.pid, libc::SIGKILL);
                std::thread::sleep(Duration::from_millis(50));
                gridperf_sys::reap(s.pid);
            }
        }
    }
    let guess = st.map(|s| s.hosts).unwrap_or_default();
    clean(name, &guess);
    Ok(was_up)
}

/// Stops the whole lab for `length`, as a hypervisor pausing the machine
/// stops it: the emulator and every process in the lab's hosts get SIGSTOP,
/// then SIGCONT (each, whatever happens between). The pause is written to
/// the lab's [`emulator::PAUSES_FILE`] first, so the emulator knows the
/// hold-up for what it was. The hosts' kernels run on (a hypervisor's pause
/// stops them too): their timers fire, and what their sockets hold goes to
/// the TUN devices. Returns how many processes were stopped.
pub fn pause(name: &str, length: Duration) -> Result<usize> {
    check_name(name)?;
    let st = running(name)?;
    let me = std::process::id();
    let mut pids = vec![st.pid];
    for h in &st.hosts {
        let found = processes_in(&h.netns, h.ns_inode)
            .ok_or_else(|| Error::internal(format!("lab {name}: host {}'s processes cannot be found", h.name)))?;
        pids.extend(found.into_iter().filter(|&p| p != me));
    }
    pids.sort_unstable();
    pids.dedup();
    let start = gridperf_sys::monotonic_ns();
    let line = format!("{start} {}\n", start + length.as_nanos() as u64);
    let file = dir(name).join(emulator::PAUSES_FILE);
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&file)
        .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()))
        .map_err(|e| Error::internal(format!("writing {}: {e}", file.display())))?;
    /// Resumes every stopped process when dropped: no path out of pause leaves one stopped.
    struct Resume(Vec<u32>);
    impl Drop for Resume {
        fn drop(&mut self) {
            for &p in &self.0 {
                let _ = gridperf_sys::signal(p, libc::SIGCONT);
            }
        }
    }
    let mut stopped = Resume(Vec::new());
    for p in pids {
        if gridperf_sys::signal(p, libc::SIGSTOP).is_ok() {
            stopped.0.push(p);
        }
    }
    std::thread::sleep(length);
    Ok(stopped.0.len())
}

/// Runs a command on a lab host (in its namespace); returns its exit status.
pub fn exec(name: &str, host: &str, cmd: &[String]) -> Result<std::process::ExitStatus> {
    let st = running(name)?;
    may_make("lab exec", false)?;
    let h = st.hosts.iter().find(|h| h.name == host).ok_or_else(|| {
        let names: Vec<&str> = st.hosts.iter().map(|h| h.name.as_str()).collect();
        Error::usage(format!("lab {name:?} has no host {host:?}: its hosts are {}", names.join(", ")))
    })?;
    let (prog, args) = cmd.split_first().ok_or_else(|| Error::usage("lab exec HOST -- COMMAND [ARGS...]"))?;
    let (prog, args) = (prog.clone(), args.to_vec());
    let lab = name.to_string();
    let niced = hosts_niced(name);
    // SIGINT, SIGTERM and SIGHUP go on to the command: a script that ends
    // `lab exec` by its pid ends the server it started on a lab host
    let pending = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register_usize(sig, pending.clone(), sig as usize)
            .map_err(|e| Error::internal(e.to_string()))?;
    }
    // a child forked by a thread inside the namespace lives in that namespace
    // the command inherits the thread's namespace and nice value
    let mut child = gridperf_sys::in_netns(&h.netns, move || {
        nice_as_host(niced);
        Command::new(&prog).args(&args).env(LAB_ENV, lab).spawn()
    })
    .map_err(|e| Error::internal(format!("running {:?} on {host}: {e}", cmd[0])))?;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| Error::internal(format!("waiting for {:?}: {e}", cmd[0])))? {
            return Ok(status);
        }
        let sig = pending.swap(0, std::sync::atomic::Ordering::SeqCst);
        if sig != 0 {
            // our own child, not yet waited for: its pid is still its own
            let _ = gridperf_sys::signal(child.id(), sig as i32);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The emulator's own entry point (`gridperf lab emulator`, started by `lab up`).
pub fn emulator_main(name: &str) -> Result<()> {
    let d = dir(name);
    let spec: LabSpec = serde_json::from_slice(
        &std::fs::read(d.join("spec.json")).map_err(|e| Error::internal(format!("reading the lab spec: {e}")))?,
    )
    .map_err(|e| Error::internal(format!("the lab spec: {e}")))?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| Error::internal(e.to_string()))?;
    }
    // a lab brought up for one run goes when that run's process does, even
    // one killed before it could take the lab down
    let orphaned = Arc::new(AtomicBool::new(false));
    if let Some(owner) = spec.owner {
        watch_owner(owner, stop.clone(), orphaned.clone());
    }
    let mut hosts = hosts_of(&spec);
    // a rootless lab's namespaces, held open for as long as this runs
    let mut held = Vec::new();
    let result = if spec.loopback {
        run_loopback(&spec, &mut hosts, &mut held, &stop, &d)
    } else {
        build_and_run(&spec, &mut hosts, &mut held, &stop, &d)
    };
    // whatever happened, leave nothing behind
    for h in &hosts {
        if gridperf_sys::netns_exists(&h.netns) {
            end_processes_in(&h.netns, h.ns_inode, spec.owner);
            let _ = gridperf_sys::netns_delete(&h.netns);
        }
    }
    drop(held);
    if orphaned.load(std::sync::atomic::Ordering::SeqCst) {
        // nobody is left to run `lab down`
        let _ = std::fs::remove_dir_all(&d);
    } else {
        let _ = std::fs::remove_file(d.join("state.json"));
    }
    result
}

/// When a running process started: /proc/PID/stat's 22nd field (with the
/// PID, it names one process, even after the number is used again); None
/// for a process that is gone or a zombie.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the fields after the command name, which is in parentheses and may hold anything
    let rest: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    if rest.first() == Some(&"Z") {
        return None;
    }
    rest.get(19)?.parse().ok()
}

/// Stops the emulator (sets `stop` and `orphaned`) once the process that
/// owns the lab has gone; checked five times a second.
fn watch_owner(owner: u32, stop: Arc<AtomicBool>, orphaned: Arc<AtomicBool>) {
    use std::sync::atomic::Ordering;
    let born = start_time(owner);
    std::thread::spawn(move || loop {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        if born.is_none() || start_time(owner) != born {
            eprintln!("gridperf lab emulator: the run that owns this lab (pid {owner}) has gone: taking the lab down");
            orphaned.store(true, Ordering::SeqCst);
            stop.store(true, Ordering::SeqCst);
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    });
}

/// Makes a host's network namespace: named, for root; for anyone else a
/// namespace this process holds open, which the host's `netns` then names
/// as /proc/PID/fd/N (and which goes when this process does).
fn make_netns(h: &mut Host, held: &mut Vec<std::os::fd::OwnedFd>) -> Result<()> {
    if crate::host::is_root() {
        gridperf_sys::netns_create(&h.netns)
            .map_err(|e| Error::internal(format!("creating namespace {}: {e}", h.netns)))?;
    } else {
        use std::os::fd::AsRawFd;
        let fd = gridperf_sys::netns_hold().map_err(|e| Error::internal(format!("creating a namespace: {e}")))?;
        h.netns = format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd());
        held.push(fd);
    }
    h.ns_inode = gridperf_sys::netns_inode(&h.netns).ok();
    Ok(())
}

/// The loopback lab: one namespace, lo up (with the MTU asked for, if any);
/// nothing to emulate, so the process only holds the lab's lifetime.
fn run_loopback(
    spec: &LabSpec,
    hosts: &mut [Host],
    held: &mut Vec<std::os::fd::OwnedFd>,
    stop: &AtomicBool,
    d: &std::path::Path,
) -> Result<()> {
    make_netns(&mut hosts[0], held)?;
    let (ns, inode) = (hosts[0].netns.clone(), hosts[0].ns_inode);
    for h in hosts.iter_mut().skip(1) {
        (h.netns, h.ns_inode) = (ns.clone(), inode);
    }
    let mtu = spec.mtu;
    gridperf_sys::in_netns(&ns, move || {
        if mtu > 0 {
            gridperf_sys::set_link_mtu("lo", mtu)?;
        }
        gridperf_sys::set_link_up("lo")
    })
    .map_err(|e| Error::internal(format!("setting up {ns}: {e}")))?;
    write_atomic(&d.join("health.json"), &Health::default())?;
    let state = LabState { spec: spec.clone(), pid: std::process::id(), hosts: hosts.to_vec() };
    write_atomic(&d.join("state.json"), &state)?;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Packets each host's TUN device holds before the emulator reads them, at
/// least. Not an Ethernet device's 1000: the kernel lets each TCP socket
/// keep 4 MB in its device's queue (`tcp_limit_output_bytes`), in
/// super-packets of up to 64 KB, so 16 streams fill 1000 entries with
/// 64 MB at most, and sixteen copy streams across cern-icepp overflowed
/// it in each of three tries (786 and 3877 packets in two of them, the
/// emulator not held up once for 10 ms). The bytes are the sockets'
/// (charged to their send buffers), so a longer queue costs no memory
/// of its own.
pub const HOST_TXQUEUELEN: u32 = 10_000;

/// The fastest rate among a lab's links (bottleneck paths and access links).
pub fn fastest_rate(spec: &LabSpec) -> Option<u64> {
    let links =
        spec.bottleneck().into_iter().flat_map(|(ab, ba)| [ab, ba]).chain(spec.access.iter().map(|(_, l)| l.clone()));
    links.filter_map(|l| l.rate_bps).max()
}

/// The TUN queue of a lab's hosts: [`HOST_TXQUEUELEN`], or 5 ms of the
/// fastest link in full-size packets where that is more (above 24 Gbit/s;
/// 4,167 at 10 Gbit/s). A queue that overflows while the emulator is held up a
/// millisecond loses packets no link decided to drop (a 10G x 50 ms lab
/// lost 745 to a queue of 1000 under one TCP flow); a hold-up long enough
/// to matter is counted as such either way.
pub fn host_txqueuelen(spec: &LabSpec) -> u32 {
    let fastest = fastest_rate(spec).unwrap_or(0);
    let packets = fastest as f64 * 0.005 / (8.0 * spec.mtu.max(1500) as f64);
    (packets.ceil() as u32).clamp(HOST_TXQUEUELEN, 100_000)
}

/// The fastest link from which the emulator has a CPU of its own and the
/// hosts receive on the others (RPS).
pub const STEER_FROM_BPS: u64 = 5_000_000_000;

/// Where a fast lab's emulator runs, and the CPUs its hosts receive on:
/// a packet the emulator writes to a host's TUN device is otherwise
/// received by that host's TCP inside the emulator's write, on its CPU.
/// None below [`STEER_FROM_BPS`] (the hop to another CPU adds an
/// interrupt's latency to each packet), on one CPU, or past 32 CPUs.
fn steering(spec: &LabSpec) -> Option<(usize, String)> {
    steer(fastest_rate(spec)?, &crate::host::cpus())
}

/// [`steering`] for a lab whose fastest link is `fastest` bits/s on a
/// machine whose CPUs this process may use are `cpus`: the last is the
/// emulator's, the rest the hosts' (`rps_default_mask`, hex).
fn steer(fastest: u64, cpus: &[usize]) -> Option<(usize, String)> {
    let own = *cpus.last()?;
    if fastest < STEER_FROM_BPS || cpus.len() < 2 || cpus.iter().any(|&c| c >= 32) {
        return None;
    }
    let mask: u32 = cpus.iter().filter(|&&c| c != own).fold(0, |m, &c| m | 1 << c);
    Some((own, format!("{mask:x}")))
}

fn build_and_run(
    spec: &LabSpec,
    hosts: &mut [Host],
    held: &mut Vec<std::os::fd::OwnedFd>,
    stop: &AtomicBool,
    d: &std::path::Path,
) -> Result<()> {
    let mut ports = Vec::new();
    let txqueuelen = host_txqueuelen(spec);
    let steer = steering(spec);
    for h in hosts.iter_mut() {
        make_netns(h, held)?;
        let (addr, mtu) = (h.addr, spec.mtu);
        let rps = steer.as_ref().map(|s| s.1.clone());
        let (fd, dev, marker) = gridperf_sys::in_netns(&h.netns, move || {
            // before the device is made: it takes the namespace's default
            // (Linux 6.2+; without it the hosts receive on the emulator's CPU)
            if let Some(mask) = rps {
                let _ = std::fs::write("/proc/sys/net/core/rps_default_mask", mask);
            }
            let fd = gridperf_sys::tun_create("gp0", true)?;
            gridperf_sys::set_link_mtu("gp0", mtu)?;
            // the host's NIC queue: an Ethernet device's default length
            // rather than TUN's 500, which a sender's burst overflows at
            // 1 Gbit/s within 6 ms of the emulator not reading
            gridperf_sys::set_link_txqueuelen("gp0", txqueuelen)?;
            gridperf_sys::set_link_ipv4("gp0", addr, 16)?;
            gridperf_sys::set_link_up("gp0")?;
            gridperf_sys::set_link_up("lo")?;
            // a /proc/net file shows the namespace it was opened in, for as
            // long as it stays open: the emulator reads the host's counters
            // through it without entering the namespace again
            let dev = std::fs::File::open("/proc/thread-self/net/dev")?;
            // the emulator's marker of this host's TUN queue: a socket of
            // the host's namespace, whose sends the emulator makes itself
            // (gridperf_core::lab::queue_probe)
            let marker = std::net::UdpSocket::bind((addr, 0))?;
            marker.connect((gridperf_core::lab::queue_probe::FROM, gridperf_core::lab::queue_probe::PORT))?;
            marker.set_nonblocking(true)?;
            Ok((fd, dev, marker))
        })
        .map_err(|e| Error::internal(format!("setting up {}: {e}", h.netns)))?;
        ports.push(Port {
            name: h.name.clone(),
            addr: h.addr,
            side: h.side,
            tun: emulator::tun_file(fd),
            net_dev: Some(dev),
            marker: Some(marker),
            access: spec.access_of(&h.name),
        });
    }
    // the emulator's read buffers, written before the lab is up: not
    // faulted in, fresh, while a run's first load fills the delay line
    let bottleneck = spec.bottleneck();
    let buffers = emulator::ReadBuffers::for_links(&emulated_links(spec));
    eprintln!(
        "gridperf lab emulator: {} of read buffers written in {:.0} ms",
        gridperf_core::units::fmt_size(buffers.bytes()),
        buffers.took.as_secs_f64() * 1e3
    );
    // health first, then state: once the lab is up, both can be read
    write_atomic(&d.join("health.json"), &Health::default())?;
    let state = LabState { spec: spec.clone(), pid: std::process::id(), hosts: hosts.to_vec() };
    write_atomic(&d.join("state.json"), &state)?;
    eprintln!("gridperf lab emulator: {} up, pid {}", spec.name, std::process::id());
    let hpath = d.join("health.json");
    let pauses = d.join(emulator::PAUSES_FILE);
    let (slot, writer) = health_writer(hpath.clone())?;
    // the hosts receive on the CPUs but the emulator's: its writes are
    // made there too (emulator::Writer)
    let writer_cpus = steer.as_ref().map(|(own, _)| crate::host::cpus().into_iter().filter(|c| c != own).collect());
    if let Some((own, _)) = &steer {
        let _ = gridperf_sys::set_thread_affinity(&[*own]);
    }
    let health = emulator::run(
        Some(&pauses),
        emulator::Setup { ports, bottleneck: &bottleneck, buffers, seed: spec.seed, writer_cpus },
        stop,
        Duration::from_millis(250),
        &mut |h| slot.put(h),
    );
    slot.close();
    let _ = writer.join();
    // what the hosts' sockets still hold goes with the lab, not minutes
    // after it: a run killed outright (no `down` to reset them) leaves its
    // sockets orphaned, their data unsent (abort_sockets_in)
    for h in hosts.iter() {
        let _ = gridperf_sys::in_netns(&h.netns, gridperf_sys::abort_tcp_sockets);
    }
    let health = health.map_err(|e| Error::internal(format!("emulator: {e}")))?;
    let _ = write_atomic(&hpath, &health);
    eprintln!("gridperf lab emulator: {} down after {:.1} s", spec.name, health.uptime_s);
    Ok(())
}

/// A thread that writes the emulator's health file, so that the emulator's
/// own thread never waits on a file system. Written there, each report
/// replaced the file, and freeing the old one's blocks waited for the
/// disk: on ext4 mounted with `discard` (this project's CI machine, /run
/// and /tmp alike) a synchronous discard held the emulator in the kernel
/// for up to 47 ms at a report (four a second), and a 16-stream copy across
/// cern-icepp was INVALID in twelve tries of twelve for hold-ups "with the
/// emulator not running". Started before the emulator takes real-time
/// priority, it runs at the normal one. The emulator leaves its latest
/// report in a slot ([`HealthSlot::put`], no I/O); the writer takes the
/// newest there is, so a slow write delays the file, never the
/// emulator, and the file always ends with the newest report.
struct HealthSlot {
    latest: std::sync::Mutex<(Option<Health>, bool)>,
    ready: std::sync::Condvar,
}

impl HealthSlot {
    /// Leaves `h` for the writer, in place of one it has not taken yet.
    fn put(&self, h: &Health) {
        if let Ok(mut g) = self.latest.lock() {
            g.0 = Some(h.clone());
            self.ready.notify_one();
        }
    }

    /// The writer has what is left to write, then ends.
    fn close(&self) {
        if let Ok(mut g) = self.latest.lock() {
            g.1 = true;
            self.ready.notify_one();
        }
    }

    /// The newest report, once there is one; None once closed and empty.
    fn take(&self) -> Option<Health> {
        let mut g = self.latest.lock().ok()?;
        loop {
            if let Some(h) = g.0.take() {
                return Some(h);
            }
            if g.1 {
                return None;
            }
            g = self.ready.wait(g).ok()?;
        }
    }
}

fn health_writer(path: PathBuf) -> Result<(std::sync::Arc<HealthSlot>, std::thread::JoinHandle<()>)> {
    let slot = std::sync::Arc::new(HealthSlot { latest: Default::default(), ready: Default::default() });
    let theirs = slot.clone();
    let handle = std::thread::Builder::new()
        .name("lab-health".into())
        .spawn(move || {
            while let Some(h) = theirs.take() {
                let _ = write_atomic(&path, &h);
            }
        })
        .map_err(|e| Error::internal(format!("cannot start the health writer: {e}")))?;
    Ok((slot, handle))
}

fn write_atomic<T: Serialize>(path: &std::path::Path, v: &T) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec_pretty(v).map_err(|e| Error::internal(e.to_string()))?;
    std::fs::write(&tmp, bytes).map_err(|e| Error::internal(e.to_string()))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_lab_gives_its_emulator_a_cpu_and_its_hosts_the_others() {
        assert_eq!(steer(10_000_000_000, &[0, 1]), Some((1, "1".to_string())));
        assert_eq!(steer(5_000_000_000, &[0, 2, 5, 7]), Some((7, "25".to_string())));
        // slower labs: each packet is received on the emulator's CPU, no hop
        assert_eq!(steer(2_500_000_000, &[0, 1]), None);
        // one CPU, or CPUs past what a 32-bit mask says
        assert_eq!(steer(10_000_000_000, &[3]), None);
        assert_eq!(steer(10_000_000_000, &[0, 40]), None);
        assert_eq!(steer(10_000_000_000, &[]), None);
    }

    /// The emulator's report never waits on the file system: with the
    /// writer stuck in a write (opening a FIFO no one reads), reports are
    /// left at once, and once it is free the file holds the newest.
    #[test]
    fn the_health_writer_takes_the_newest_report_and_never_holds_the_emulator(
    ) -> std::result::Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("gridperf-health-writer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("health.json");
        assert!(Command::new("mkfifo").arg(path.with_extension("tmp")).status()?.success());
        let (slot, writer) = health_writer(path.clone())?;
        let t0 = Instant::now();
        slot.put(&Health { mono_ns: 1, ..Health::default() });
        // the writer takes the first and is held opening the FIFO
        while slot.latest.lock().map(|g| g.0.is_some()).unwrap_or(false) {
            assert!(t0.elapsed() < Duration::from_secs(10), "the writer never took a report");
            std::thread::sleep(Duration::from_millis(1));
        }
        let t1 = Instant::now();
        for k in 2..=100u64 {
            slot.put(&Health { mono_ns: k, ..Health::default() });
        }
        assert!(t1.elapsed() < Duration::from_secs(1), "a report waited on the writer: {:?}", t1.elapsed());
        // free the writer: read what it wrote into the FIFO (the first report)
        let first = std::fs::read_to_string(path.with_extension("tmp"))?;
        assert_eq!(serde_json::from_str::<Health>(&first)?.mono_ns, 1);
        slot.close();
        writer.join().map_err(|_| "the writer panicked")?;
        let last: Health = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
        assert_eq!(last.mono_ns, 100, "the newest report, not the next in line");
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    /// A run voids past a quarter left out, but not for one round trip of a
    /// handful, and always when nothing is kept.
    #[test]
    fn a_run_is_void_past_a_quarter_left_out_but_not_for_one_round_trip() {
        assert!(!too_many_left_out(0, 3));
        assert!(!too_many_left_out(1, 3), "one of wan's three");
        assert!(too_many_left_out(2, 3));
        assert!(too_many_left_out(1, 1), "nothing kept");
        assert!(!too_many_left_out(25, 100));
        assert!(too_many_left_out(26, 100));
    }

    /// A run judged round trip by round trip: valid with what was left out
    /// said, void past a quarter of the run left out (the lateness's cause
    /// named as a whole run's would be), and void for a drop the model did
    /// not make whatever was left out.
    #[test]
    fn a_run_judged_by_round_trip_says_what_it_left_out() {
        use gridperf_core::model::LabCause;
        let late = Health {
            links: [gridperf_core::lab::emu::Counters { delivered: 283, ..Default::default() }, Default::default()],
            late_packets: 10,
            held_up_ns: 42_000_000,
            uptime_s: 3.3,
            ..Health::default()
        };
        let rt = RoundTrips { counted: 30, left_out: 4, ..RoundTrips::default() };
        let (invalid, cause, note) = round_trip_verdict(&late, &rt);
        assert_eq!((invalid, cause), (None, None));
        let note = note.expect("what was left out");
        assert!(note.starts_with("4 of 30 round trips crossed the lab's emulator while it was late"), "{note}");
        assert!(note.contains("10 of 283 packets"), "and the run as a whole: {note}");
        let many = RoundTrips { left_out: 9, too_many: Some("9 of the run's 30 round trips".into()), ..rt.clone() };
        let (invalid, cause, _) = round_trip_verdict(&late, &many);
        assert_eq!(invalid.as_deref(), Some("9 of the run's 30 round trips"));
        assert_eq!(cause, Some(LabCause::Emulator));
        let dropped = Health { tun_drops: 5, ..late.clone() };
        let (invalid, cause, _) = round_trip_verdict(&dropped, &rt);
        assert!(invalid.is_some_and(|w| w.contains("5 packets overflowed a TUN queue")));
        assert_eq!(cause, Some(LabCause::Emulator));
        // a drop at a receiving host's CPU is one the model did not make
        let dropped = Health { host_rx_drops: 3, ..late.clone() };
        let (invalid, cause, _) = round_trip_verdict(&dropped, &rt);
        assert!(invalid.is_some_and(|w| w.contains("3 packets the emulator wrote were dropped by the receiving host")));
        assert_eq!(cause, Some(LabCause::Emulator));
        // nothing left out, nothing late: a plain valid run
        let (invalid, _, note) = round_trip_verdict(&Health::default(), &RoundTrips::default());
        assert_eq!((invalid, note), (None, None));
        // counted point by point, judged over the run
        let mut rt = RoundTrips::default();
        rt.count_point("udp 64 B", 4, 2);
        rt.count_point("udp 1 B", 200, 3);
        rt.judge_run();
        assert_eq!((rt.counted, rt.left_out, rt.too_many.as_deref()), (204, 5, None));
        rt.count_point("tcp 64 B", 3, 3);
        assert_eq!(
            rt.too_many.as_deref(),
            Some("all 3 round trips of tcp 64 B crossed the lab's emulator while it was late")
        );
        let mut runs = RoundTrips::transfer_runs();
        runs.count_point("udp 1000 B", 12, 4);
        runs.judge_run();
        assert_eq!(
            runs.too_many.as_deref(),
            Some(
                "4 of the run's 12 transfer runs crossed the lab's emulator while it was late for over 1 in 100 of \
                 their time (more than 1 in 4)"
            )
        );
        // a transfer judged run by run says so
        let runs = RoundTrips { counted: 12, left_out: 2, ..RoundTrips::transfer_runs() };
        let (invalid, _, note) = round_trip_verdict(&late, &runs);
        assert_eq!(invalid, None);
        assert!(note.is_some_and(|n| n.starts_with(
            "2 of 12 transfer runs crossed the lab's emulator while it was late for over 1 in 100 of their time"
        )));
    }
}
