//! gridperf: measure, emulate and move data across LAN, MAN and WAN networks.
//!
//! The binary is the CLI (`main.rs`) plus glue; everything it runs lives here,
//! in data-flow order: `runner` (reach the agent) -> `engines` (measure) ->
//! stats (in gridperf-core) -> `report` (print). `agent` is `gridperf serve`.

pub mod agent;
pub mod ctl;
pub mod engines;
pub mod env;
pub mod error;
pub mod lab;
pub mod report;
pub mod report_html;
pub mod runner;
pub mod store;
pub mod survey;
pub mod tune;
