//! A tokio `AsyncRead`/`AsyncWrite` face for virtual sockets (feature `tokio`). The data path
//! stays on the endpoint's own threads; a task that would block leaves its waker with the
//! socket (data, credit) or the session (channel space), and the I/O threads wake it.

use crate::sched::Choice;
use crate::socket::{VSocket, lock};
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
        let s = &self.inner;
        let mut rx = lock(&s.shared.rx);
        let n = rx.re.read(buf.initialize_unfilled());
        if n > 0 {
            buf.advance(n);
            let credit = s.credit_due(&mut rx);
            drop(rx);
            if let Some(c) = credit {
                s.send_credit(c);
            }
            return Poll::Ready(Ok(()));
        }
        if rx.re.at_eof() || buf.remaining() == 0 {
            // The final CREDIT at EOF lets the sender drop its copies (see `credit_due`).
            let credit = s.credit_due(&mut rx);
            drop(rx);
            if let Some(c) = credit {
                s.send_credit(c);
            }
            return Poll::Ready(Ok(()));
        }
        if let Some(e) = &rx.error {
            return Poll::Ready(Err(e.clone().into()));
        }
        rx.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl AsyncWrite for AsyncVSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let s = &self.inner;
        let session = &s.session;
        let (ch, seq, n) = {
            let mut tx = lock(&s.shared.tx);
            if let Err(e) = tx.check_writable() {
                return Poll::Ready(Err(e));
            }
            let avail = tx.credit();
            if avail == 0 {
                tx.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let n = buf
                .len()
                .min(avail as usize)
                .min(session.send_frame as usize);
            let mut choice = s.choose(&mut tx, n as u64);
            if choice == Choice::Full {
                session.wake_on_space(cx.waker());
                // A channel may have drained between the choice and the registration.
                choice = s.choose(&mut tx, n as u64);
                if choice == Choice::Full {
                    return Poll::Pending;
                }
            }
            let ch = match choice {
                Choice::Channel(i) => session.class_base(s.shared.class) + i,
                Choice::NoChannel | Choice::Full => {
                    drop(tx);
                    return Poll::Ready(Err(s.no_channel()));
                }
            };
            (ch, tx.take_seq(n), n)
        };
        if let Err(e) = s.send_data(
            ch,
            seq,
            bytes::Bytes::copy_from_slice(&buf[..n]),
            false,
            session.cfg.async_inline_send,
        ) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
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
