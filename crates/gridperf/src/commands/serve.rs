//! `gridperf serve`: the agent, until SIGINT or SIGTERM.

use super::Output;
use crate::agent::{Agent, AgentConfig};
use crate::error::{Error, Result};

/// What `gridperf serve` does, checked.
pub struct Opts {
    pub agent: AgentConfig,
    /// Where to serve /metrics and /probe (serve --metrics).
    pub metrics: Option<std::net::SocketAddr>,
    /// The probe modules and targets (serve --probe-config).
    pub probes: Option<(super::exporter::ProbeConfig, Vec<super::exporter::Checked>)>,
}

pub fn run(o: Opts, out: &mut Output) -> Result<()> {
    // a test's large buffers (messages, blocks) go back to the kernel as it
    // ends: an idle agent holds what it needs, not its busiest test's memory
    gridperf_sys::map_large_allocations(1 << 20);
    let cfg = o.agent;
    let max_tests = cfg.max_tests;
    let keys = cfg.auth.as_ref().map(|k| k.len());
    let open_wide = cfg.bind.iter().any(|a| !a.ip().is_loopback());
    let agent = Agent::bind(cfg).map_err(|e| Error::network(format!("gridperf serve: {e}")))?;
    let stop = agent.stop_handle();
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // the first signal stops the agent cleanly; a second one exits at once
        signal_hook::flag::register_conditional_shutdown(sig, 130, stop.flag())
            .map_err(|e| Error::internal(e.to_string()))?;
        signal_hook::flag::register(sig, stop.flag()).map_err(|e| Error::internal(e.to_string()))?;
    }
    let addrs: Vec<String> = agent.local_addrs().iter().map(|a| a.to_string()).collect();
    out.note(&format!(
        "gridperf serve: listening on {} (protocol {}, {max_tests} test(s) at a time)",
        addrs.join(", "),
        gridperf_core::wire::PROTOCOL_VERSION,
    ));
    match keys {
        Some(n) => out.note(&format!("gridperf serve: clients must prove one of {n} key(s) (--auth)")),
        None if open_wide => out.note(
            "gridperf serve: warning: listening beyond loopback without --auth: anyone who can reach this port may \
             run tests here; give --auth FILE (gridperf keygen makes the keys)",
        ),
        None => {}
    }
    let exporter = match o.metrics {
        Some(addr) => {
            let listener = super::exporter::bind(addr)?;
            let shown = listener.local_addr().map_or(addr.to_string(), |a| a.to_string());
            let probes = o.probes.as_ref().map_or(0, |(_, m)| m.len());
            let ex = std::sync::Arc::new(super::exporter::Exporter::new(agent.metrics(), max_tests, o.probes));
            let flag = stop.flag();
            out.note(&format!(
                "gridperf serve: metrics on http://{shown}/metrics, {}",
                if probes > 0 { format!("{probes} probe module(s) on /probe") } else { "no probes".into() }
            ));
            Some(
                std::thread::Builder::new()
                    .name("gridperf-exporter".into())
                    .spawn(move || ex.serve(listener, flag))
                    .map_err(|e| Error::internal(e.to_string()))?,
            )
        }
        None => None,
    };
    let ran = agent.run();
    // the agent ended (stopped, or --once): the exporter with it
    stop.stop();
    if let Some(t) = exporter {
        let _ = t.join();
    }
    ran.map_err(|e| Error::network(format!("gridperf serve: {e}")))?;
    out.note("gridperf serve: stopped");
    Ok(())
}
