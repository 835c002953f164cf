//! Socket extras the standard library does not have. Every `unsafe` block of netsteer that
//! touches sockets lives here, each with a `// SAFETY:` comment; the API is safe and takes
//! borrowed file descriptors.
//!
//! * [`opt`]: busy polling (SO_BUSY_POLL, SO_PREFER_BUSY_POLL, SO_BUSY_POLL_BUDGET), where the
//!   kernel processed a socket's packets (SO_INCOMING_CPU, SO_INCOMING_NAPI_ID), SO_TIMESTAMPING.
//! * [`msg`]: one datagram with its kernel timestamps, and TX timestamps from the error queue.
//! * [`mmsg`]: batches of datagrams in and out with recvmmsg(2)/sendmmsg(2).
//! * [`buf`]: reading a socket or pipe into a vector's spare capacity.
//! * [`cpu`]: the CPU a thread runs on, pinning it, and its CPU time.
//! * [`epoll`]: an epoll instance with per-context busy polling (EPIOCSPARAMS).
//! * [`tcp`]: TCP_INFO, TCP_MAXSEG, TCP_CONGESTION, low-water marks, waiting for readability.
//! * [`pipe`]: splice(2) from a socket into a pipe, so another thread can copy the bytes out.
//! * [`netns`]: moving a thread into a network namespace.
//! * [`zerocopy`]: MSG_ZEROCOPY sends and completions, TCP_ZEROCOPY_RECEIVE.
//! * [`xdp`]: AF_XDP sockets and the XDP program that feeds them (kernel bypass).
//! * `reactor` (feature `tokio`): a descriptor registered in tokio's reactor for readiness.

#[cfg(not(target_os = "linux"))]
compile_error!("netsteer-sock uses Linux socket options; it builds on Linux only");

pub mod buf;
pub mod cpu;
pub mod epoll;
pub mod mmsg;
pub mod mptcp;
pub mod msg;
pub mod netns;
pub mod opt;
pub mod pipe;
#[cfg(feature = "tokio")]
pub mod reactor;
pub mod signal;
pub mod sockaddr;
pub mod tcp;
pub mod wake;
pub mod xdp;
pub mod zerocopy;

/// True when this process's effective uid is 0 (changing the live host, making namespaces).
pub fn is_root() -> bool {
    // SAFETY: geteuid(2) takes no arguments, touches no memory and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
