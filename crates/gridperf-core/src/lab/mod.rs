//! The lab's model, without I/O: a link's rate, delay, jitter, loss and
//! queue (`emu`), a profile's settings and their checks (`cfg`), a
//! super-packet's wire segments (`gso`), a real path fitted into a
//! profile (`clone`), and the probe of the hosts' TUN queues (`queue_probe`).

pub mod cfg;
pub mod clone;
pub mod emu;
pub mod gso;
pub mod queue_probe;
