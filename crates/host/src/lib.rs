//! netsteer's host model: everything read from /proc and /sys, always through a [`HostFs`] root.
//!
//! * [`parse`]: pure parsers (`&str -> Result<T, ParseError>`) for the kernel's text files.
//! * [`cpuset`]: CPU lists and exact-width hex masks.
//! * [`topology`], [`sysctl`], [`nic`], [`view`]: the model built from those files.
//! * [`sample`]: counter samples and rates; [`top`]: the sampler behind `netsteer top`.
//! * [`capture`]: snapshot trees (`netsteer snapshot`) that `--root` reads back.
//! * [`text`]: `show` and `top` as lines for people; [`safe`]: host-supplied names escaped for
//!   a terminal.

#[cfg(not(target_os = "linux"))]
compile_error!("netsteer-host reads Linux /proc and /sys; it builds on Linux only");

pub mod balance;
pub mod capture;
pub mod container;
pub mod cpuset;
pub mod error;
pub mod ethtool;
pub mod field;
pub mod fs;
pub mod irqname;
pub mod netdev;
pub mod nic;
pub mod output;
pub mod parse;
pub mod process;
pub mod safe;
pub mod sample;
pub mod service;
pub mod sockets;
pub mod sysctl;
pub mod text;
pub mod top;
pub mod topology;
pub mod trust;
pub mod view;

pub use cpuset::CpuSet;
pub use error::{HostError, ParseError, Result};
pub use field::Field;
pub use fs::HostFs;
pub use view::{HostView, read_host, read_host_reusing};
