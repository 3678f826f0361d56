//! Errors at the edge of the program, each of one kind with its own exit code.

use gridperf_core::wire::WireError;
use std::fmt;

/// What kind of failure ended a command; each has its own exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The command line was wrong (exit 2, as clap's own usage errors).
    Usage,
    /// The network or the peer failed: unreachable, silent, died, protocol error (exit 3).
    Network,
    /// The run went through but produced no valid measurement (exit 4).
    Measurement,
    /// The agent refused the test: busy, version mismatch, limits (exit 5).
    Refused,
    /// Anything else, e.g. a local system call failed (exit 1).
    Internal,
}

impl Kind {
    pub fn exit_code(self) -> i32 {
        match self {
            Kind::Internal => 1,
            Kind::Usage => 2,
            Kind::Network => 3,
            Kind::Measurement => 4,
            Kind::Refused => 5,
        }
    }
}

/// An error with its kind and a message that says what to do.
#[derive(Debug)]
pub struct Error {
    pub kind: Kind,
    pub message: String,
}

impl Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into() }
    }
    pub fn usage(message: impl Into<String>) -> Error {
        Error::new(Kind::Usage, message)
    }
    pub fn network(message: impl Into<String>) -> Error {
        Error::new(Kind::Network, message)
    }
    pub fn measurement(message: impl Into<String>) -> Error {
        Error::new(Kind::Measurement, message)
    }
    pub fn refused(message: impl Into<String>) -> Error {
        Error::new(Kind::Refused, message)
    }
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(Kind::Internal, message)
    }
    /// Prefixes the message with what was being done.
    pub fn context(self, what: impl fmt::Display) -> Error {
        Error { kind: self.kind, message: format!("{what}: {}", self.message) }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<WireError> for Error {
    fn from(e: WireError) -> Error {
        Error::network(e.to_string())
    }
}

impl From<gridperf_core::model::plan::PlanError> for Error {
    fn from(e: gridperf_core::model::plan::PlanError) -> Error {
        Error::usage(e.to_string())
    }
}

impl From<gridperf_core::units::UnitError> for Error {
    fn from(e: gridperf_core::units::UnitError) -> Error {
        Error::usage(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;
