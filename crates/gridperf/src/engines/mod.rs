//! The engines: the client side of each measurement. Each reaches its
//! agent through the runner's [`crate::runner::Target`], runs its points,
//! and returns raw samples and counters, summarised, handing each point on
//! as it is measured (the store writes it there). `rtt` and `transfer`
//! share the echo test in [`echo`]; `tune`'s probes are built on `rtt` and
//! `stream`.

pub mod clone;
pub mod copy;
pub mod echo;
pub mod fanout;
pub mod rtt;
pub mod stream;
pub mod transfer;
pub mod tune;

pub use echo::{EchoOptions, Progress};
