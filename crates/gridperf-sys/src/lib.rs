//! The only crate in gridperf that contains `unsafe`.
//!
//! Every libc call goes through [`cvt`] once and comes out as an
//! `io::Result`; callers in the other crates never see a raw return code.
//! Linux only: gridperf measures Linux hosts.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Turns a libc return value (-1 on error) into an `io::Result`.
fn cvt<T: Copy + PartialOrd + Default>(ret: T, minus_one: T) -> io::Result<T> {
    if ret == minus_one {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_i(ret: libc::c_int) -> io::Result<libc::c_int> {
    cvt(ret, -1)
}

mod files;
pub use files::*;
mod sockopt;
pub use sockopt::*;
mod cpu;
pub use cpu::*;
mod host;
pub use host::*;
mod links;
pub use links::*;
mod tun;
pub use tun::*;
mod netns;
pub use netns::*;
mod userns;
pub use userns::*;
mod bulk;
pub use bulk::*;
mod capture;
pub use capture::*;
mod sockdiag;
pub use sockdiag::*;

#[cfg(test)]
mod root_tests;
#[cfg(test)]
mod tests;
