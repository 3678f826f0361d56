//! `gridperf trace`'s arguments.

use super::duration;
use crate::commands::trace::Opts;
use crate::error::{Error, Result};
use clap::Args;

#[derive(Args)]
#[command(mut_arg("json", |a| a.help("Print gridperf.trace/1 JSON (docs/json.md) instead of the table")))]
#[command(mut_arg("csv", |a| a.help("Print the time series as CSV: a row per connection, direction and interval")))]
pub struct TraceArgs {
    /// A packet capture: pcap or pcapng (tcpdump -w, dumpcap, tshark -w, `gridperf stream --capture`), of
    /// Ethernet (VLAN tags too), Linux cooked (SLL, SLL2), raw IP or loopback frames, IPv4 or IPv6; read as a
    /// stream, in bounded memory, whatever its size.
    pub file: std::path::PathBuf,
    /// The length of each point of the time series (throughput, in flight, window).
    #[arg(short, long, default_value = "100ms", value_name = "DURATION")]
    pub interval: String,
    /// Only the connections with this endpoint (ADDR, ADDR:PORT or :PORT).
    #[arg(long, value_name = "ENDPOINT")]
    pub filter: Option<String>,
    #[command(flatten)]
    pub print: super::FormatArgs,
    #[command(flatten)]
    pub store: super::StoreArgs,
}

impl TryFrom<TraceArgs> for Opts {
    type Error = Error;
    fn try_from(a: TraceArgs) -> Result<Opts> {
        let interval = duration(&a.interval, "--interval")?;
        if interval < std::time::Duration::from_millis(1) {
            return Err(Error::usage(format!("--interval {}: give 1ms or more", a.interval)));
        }
        if let Some(f) = &a.filter {
            let ok = f.strip_prefix(':').map_or_else(
                || f.parse::<std::net::SocketAddr>().is_ok() || f.parse::<std::net::IpAddr>().is_ok(),
                |p| p.parse::<u16>().is_ok(),
            );
            if !ok {
                return Err(Error::usage(format!("--filter {f}: give ADDR, ADDR:PORT or :PORT")));
            }
        }
        Ok(Opts { file: a.file, interval, filter: a.filter, store: a.store.choice() })
    }
}
