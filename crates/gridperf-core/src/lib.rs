//! gridperf's core: everything that does no I/O, a folder per domain.
//!
//! - [`wire`]: the control channel's frames and messages, the typed test requests with their
//!   checks, the data-connection hello, a copy's lists, needs and block frames;
//! - [`proto`]: a conversation's ends as state machines (a copy's push and pull, client and
//!   agent), tested end against end in virtual time;
//! - [`model`]: result types of every measurement, as `--json` prints them, and the
//!   [`model::Measure`] that names each kind; [`model::plan`]: protocols and message sizes;
//! - [`analysis`]: exact quantiles and their warnings (`stats`), whether a median describes a
//!   point (`shape`), how much slower B is than A (`compare`), when a point is measured enough
//!   (`stopping`), bulk flows and the TCP_INFO verdict (`flow`), the best protocol per size
//!   range (`survey`), what caps a TCP stream (`tune`);
//! - [`lab`]: the lab's link model in virtual time (`emu`), its settings and profiles (`cfg`),
//!   offloaded packets' segments (`gso`), a real path fitted (`clone`);
//! - [`copy`]: blocks and their hashes, the pool's decisions (`pool`), the data channel's
//!   encryption (`seal`);
//! - [`capture`]: pcap and pcapng read as a stream, frames to TCP segments, and a capture's
//!   connections over time (`trace`);
//! - [`units`], [`svg`], [`rng`], [`auth`], [`fuzzing`].

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

/// For serde's `skip_serializing_if`: a counter or figure left out of the
/// JSON while it is zero (absent reads back as zero: `#[serde(default)]`).
pub fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}
