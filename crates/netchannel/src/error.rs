use crate::wire::{RstReason, WireError};
use std::io;
use std::net::SocketAddr;
use thiserror::Error;

/// Why a virtual socket or a channel failed. Every variant names what failed.
#[derive(Debug, Clone, Error)]
pub enum Error {
    #[error(
        "channel {channel} to {peer} died ({cause}) and no other channel of this socket's class is left"
    )]
    ChannelLost {
        peer: SocketAddr,
        channel: usize,
        cause: String,
    },
    #[error("peer {peer} reset virtual port {port}: {reason:?}")]
    Reset {
        peer: SocketAddr,
        port: u16,
        reason: RstReason,
    },
    #[error("peer {peer} broke the protocol on virtual port {port}: {cause}")]
    Protocol {
        peer: SocketAddr,
        port: u16,
        cause: String,
    },
    #[error("no {class} channel to {peer} is alive")]
    NoChannel {
        peer: SocketAddr,
        class: &'static str,
    },
    #[error("the endpoint was closed")]
    Closed,
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::ChannelLost { .. }
            | Error::NoChannel { .. }
            | Error::Reset {
                reason: RstReason::ChannelLost,
                ..
            } => io::ErrorKind::BrokenPipe,
            Error::Reset {
                reason: RstReason::Refused,
                ..
            } => io::ErrorKind::ConnectionRefused,
            Error::Reset { .. } => io::ErrorKind::ConnectionReset,
            Error::Protocol { .. } => io::ErrorKind::InvalidData,
            Error::Closed => io::ErrorKind::NotConnected,
        };
        io::Error::new(kind, e)
    }
}

/// What can go wrong reading a channel.
#[derive(Debug, Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("stream ended inside a frame ({0} bytes of it read)")]
    Truncated(usize),
}
