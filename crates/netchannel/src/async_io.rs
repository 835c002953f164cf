//! A tokio `AsyncRead`/`AsyncWrite` face for virtual sockets (feature `tokio`). The data path
//! stays on the endpoint's own threads; a task that would block leaves its waker with the
//! socket (data, credit) or the session (channel space), and the I/O threads wake it.

use crate::socket::VSocket;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A [`VSocket`] for async code.
pub struct AsyncVSocket {
    inner: VSocket,
    /// A shutdown was requested and has been sent.
    shut: bool,
}

impl AsyncVSocket {
    pub fn new(inner: VSocket) -> AsyncVSocket {
        AsyncVSocket { inner, shut: false }
    }

    pub fn get_ref(&self) -> &VSocket {
        &self.inner
    }

    pub fn into_inner(self) -> VSocket {
        self.inner
    }
}

impl AsyncRead for AsyncVSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = std::task::ready!(self.inner.poll_read(cx, buf.initialize_unfilled()))?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for AsyncVSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.shut {
            self.shut = true;
            return Poll::Ready(self.inner.shutdown_write());
        }
        Poll::Ready(Ok(()))
    }
}
