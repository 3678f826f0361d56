//! gridperf's core: everything that does no I/O.
//!
//! - [`plan`]: protocols and message sizes, as the user typed them;
//! - [`wire`]: the control channel's frames and messages, the typed test requests with their
//!   checks, and the data-connection hello;
//! - [`stats`]: exact quantiles and the warnings that go with them;
//! - [`shape`]: whether a median describes a point (two modes, a drift);
//! - [`compare`]: how much slower B is than A, with its 95% interval, and whether it is a finding;
//! - [`stopping`]: when a quick survey's point has been measured enough (sequential stopping);
//! - [`model`]: result types of every measurement, as `--json` prints them, and the [`model::Measure`] that names each kind;
//! - [`units`]: sizes, durations and rates, parsed and formatted;
//! - [`gso`]: offloaded TUN packets: virtio-net headers, segment lengths, splitting;
//! - [`emu`]: the lab's link model (loss, bottleneck, delay line) in virtual time;
//! - [`flow`]: bulk flows: fairness, UDP sequence accounting, the TCP_INFO verdict;
//! - [`tune`]: what caps a TCP stream on a path, from the ends' settings, and what to set;
//! - [`labcfg`]: the lab's settings and named profiles, resolved into [`emu`] link configs;
//! - [`survey`]: the best protocol per size range, and where a curve jumps or changes slope;
//! - [`svg`]: self-contained SVG line charts for reports;
//! - [`seal`]: a copy's encrypted data channel: X25519 key agreement, AES-256-GCM frames;
//! - [`capture`]: pcap and pcapng read as a stream, frames decoded to TCP segments, pcap written;
//! - [`trace`]: a capture's TCP connections over time, and `stream`'s verdict from them.

pub mod analysis;
pub mod auth;
pub mod capture;
pub mod copy;
pub mod fuzzing;
pub mod lab;
pub mod model;
pub mod proto;
pub mod rng;
pub mod svg;
pub mod units;
pub mod wire;
