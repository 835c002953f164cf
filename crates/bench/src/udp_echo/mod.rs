//! The UDP echo round-trip benchmark: a server that echoes every datagram to its sender, and a
//! client that sends one datagram at a time per flow and times its echo (seed 000's apparatus,
//! with percentiles, loss accounting, wait modes, pinning and kernel timestamps).

pub mod client;
pub mod irq_suspend;
pub mod limit;
pub mod message;
pub mod payload;
pub mod server;
pub mod xdp;

use std::fmt;
use std::io;
use std::str::FromStr;

/// How a thread waits for the next datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Wait {
    /// Sleep in the receive call until the interrupt path wakes it.
    #[default]
    Block,
    /// Never sleep: non-blocking receive in a loop (seed 000's `--polling`).
    Spin,
    /// Blocking receive with SO_BUSY_POLL: the kernel polls the device queue first.
    BusyPoll,
    /// Non-blocking socket, sleep in epoll_wait (how event-driven servers wait).
    Epoll,
    /// As epoll, with the epoll context busy polling (EPIOCSPARAMS, 6.9+): the mode IRQ
    /// suspension needs (with --prefer-busy-poll).
    EpollBusy,
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Wait::Block => "block",
            Wait::Spin => "spin",
            Wait::BusyPoll => "busy-poll",
            Wait::Epoll => "epoll",
            Wait::EpollBusy => "epoll-busy",
        })
    }
}

impl FromStr for Wait {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "block" => Ok(Wait::Block),
            "spin" => Ok(Wait::Spin),
            "busy-poll" => Ok(Wait::BusyPoll),
            "epoll" => Ok(Wait::Epoll),
            "epoll-busy" => Ok(Wait::EpollBusy),
            other => Err(format!(
                "{other:?} is not a wait mode (block, spin, busy-poll, epoll, epoll-busy)"
            )),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("{0}")]
    Config(String),
    #[error("no echo from {target} for {secs:.1} s{hint}")]
    NoEcho {
        target: String,
        secs: f64,
        hint: String,
    },
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}
