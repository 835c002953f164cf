//! # netchannel
//!
//! A user-space counterpart of NetChannel (SIGCOMM'22): the host stack split into **virtual
//! sockets** (what the application reads and writes), **channels** (independent TCP
//! connections, each with its own I/O threads) and a **scheduler** that maps one onto the
//! other. One application thread can then use several cores for one stream, short messages
//! spread over several network pipelines, and a latency-sensitive socket keeps its own
//! channels beside bulk traffic.
//!
//! ```no_run
//! use netchannel::{Config, Endpoint, SocketOptions};
//! use std::io::{Read, Write};
//! let server = Endpoint::listen("127.0.0.1:0".parse().unwrap(), Config::default())?;
//! let listener = server.bind(80)?;
//! let client = Endpoint::new(Config::default())?;
//! let mut s = client.connect(server.local_addr().unwrap(), 80, SocketOptions::default())?;
//! s.write_all(b"hello")?;
//! s.shutdown_write()?;
//! let mut got = Vec::new();
//! listener.accept()?.read_to_end(&mut got)?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! * Wire format, message by message: [`wire`]. Handshake: [`Endpoint`]'s module docs.
//! * Ordering and flow control: a socket's DATA frames carry 64-bit stream offsets and may
//!   take any channel of its class; the receiver reorders ([`reorder`]) inside a window the
//!   sender never exceeds (credits), so a channel reader never has to stop for one slow
//!   socket and other sockets on the channel keep flowing. FIN carries the final length.
//! * Scheduling: [`sched`] (round-robin with NetChannel's limits, hash by port, least loaded).
//! * Copy workers: receive payloads are spliced to worker pipes and copied there (`copy`);
//!   send payloads are copied into per-channel worker pipes and spliced into the socket.
//! * Latency class: own channels and I/O threads, TCP_NOTSENT_LOWAT, SO_PRIORITY, inline
//!   send, optional spinning; chosen per socket ([`SocketOptions`]).
//! * Failure: a sender keeps each socket's unconsumed frames (bounded by its window) and
//!   re-sends those of a dead channel on the surviving channels of the class; the receiver
//!   drops duplicates. Sockets fail with [`Error::ChannelLost`] only when their class has no
//!   channel left (see the `session` module).

#[cfg(feature = "tokio")]
mod async_io;
mod channel;
mod config;
mod copy;
pub mod drive;
mod endpoint;
mod error;
pub mod frame_io;
pub mod limits;
mod poll;
pub mod preload_env;
#[cfg(feature = "proxy")]
pub mod proxy;
pub mod reorder;
pub mod sched;
mod session;
mod socket;
mod standby;
pub mod wire;
mod work;

#[cfg(feature = "tokio")]
pub use async_io::AsyncVSocket;
pub use channel::WRITER_LINGER;
pub use config::{Config, SocketOptions};
pub use drive::{DrivenChannel, Driver, Pumped, watch};
pub use endpoint::{ChannelStats, Endpoint, SessionStats, Stats};
pub use error::{Error, ReadError};
pub use poll::Readiness;
pub use sched::Policy;
pub use socket::{VListener, VSocket};
pub use wire::{Class, RstReason};
