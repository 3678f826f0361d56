//! The lab's model, without I/O: a link's rate, delay, jitter, loss and
//! queue (`emu`), a profile's settings and their checks (`cfg`), a
//! super-packet's wire segments (`gso`), and a real path fitted into a
//! profile (`clone`).

pub mod cfg;
pub mod clone;
pub mod emu;
pub mod gso;
