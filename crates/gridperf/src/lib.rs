//! gridperf: measure, emulate and move data across LAN, MAN and WAN networks.
//!
//! The binary's layers, in data-flow order (ARCHITECTURE.md draws them):
//! `cli` (arguments into checked options) -> `commands` (one workflow per
//! command) -> `runner` (the network made ready, the agent reached) ->
//! `engines` (the client side of each measurement) over `datapath` (what
//! both ends run) -> `store` (every point as it is measured) -> `render`
//! (text, CSV, JSON, HTML). `agent` is `gridperf serve`; `lab` the network
//! lab; `host` reads and sets this host's settings. The measurements'
//! result types, the control protocol and the statistics are in
//! gridperf-core, the system calls in gridperf-sys.

pub mod agent;
pub mod cli;
pub mod commands;
pub mod ctl;
pub mod datapath;
pub mod engines;
pub mod error;
pub mod host;
pub mod lab;
pub mod render;
pub mod runner;
pub mod store;
