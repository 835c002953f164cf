//! Non-blocking operations and readiness for event loops that are not tokio: the preload
//! library maps an unmodified program's `read`/`write`/`accept` and its poll/epoll waits onto
//! these. A call that cannot go on returns `Poll::Pending` and leaves the context's waker
//! with the socket (data, credit), the session (channel space) or the listener (a queued
//! connection); the endpoint's I/O threads wake it once.

use crate::channel::Inline;
use crate::sched::Choice;
use crate::socket::{Rx, VListener, VSocket, lock};
use bytes::Bytes;
use std::io;
use std::task::{Context, Poll};

/// What poll(2) would say of a virtual socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readiness {
    /// A read would not wait: bytes, end of stream or an error.
    pub readable: bool,
    /// A write would take at least one byte, or fail at once.
    pub writable: bool,
    /// The peer ended its sending side and every byte before that was read or is readable
    /// (EPOLLRDHUP).
    pub read_closed: bool,
    /// This side can send no more: shut down, or failed.
    pub write_closed: bool,
    /// The socket failed (reset, protocol error, no channel left).
    pub error: bool,
}

impl VSocket {
    /// Reads what is in order now into `buf`. Ready(Ok(0)) is end of stream (or an empty
    /// `buf`); Pending leaves the waker for the next arrival.
    pub fn poll_read(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let empty = buf.is_empty();
        self.poll_take(
            cx,
            |rx| {
                let n = rx.re.read(buf);
                (n > 0 || empty).then_some(n)
            },
            0,
        )
    }

    /// The next in-order piece as it arrived (no copy; at most one frame's payload), None at
    /// end of stream; Pending leaves the waker for the next arrival. A relay that writes the
    /// piece on (the proxy) saves the copy [`VSocket::poll_read`] makes into its buffer.
    pub fn poll_read_chunk(&self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        self.poll_take(cx, |rx| rx.re.read_chunk().map(|(b, _)| Some(b)), None)
    }

    /// Runs `take` on what is readable now: its value, or `eof` at end of stream (either way
    /// with the credit the read made due), the socket's error, or Pending with the waker
    /// left for the next arrival. The non-blocking twin of `VSocket::read_with`.
    fn poll_take<T>(
        &self,
        cx: &mut Context<'_>,
        take: impl FnOnce(&mut Rx) -> Option<T>,
        eof: T,
    ) -> Poll<io::Result<T>> {
        let mut rx = lock(&self.shared.rx);
        let v = match take(&mut rx) {
            Some(v) => v,
            None if rx.re.at_eof() => eof,
            None => {
                if let Some(e) = &rx.error {
                    return Poll::Ready(Err(e.clone().into()));
                }
                rx.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
        };
        self.credit_after_read(rx);
        Poll::Ready(Ok(v))
    }

    /// Copies what is readable into `buf` without consuming it (recv's MSG_PEEK): Some(0)
    /// at end of stream, None when nothing is readable yet.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let rx = lock(&self.shared.rx);
        let n = rx.re.peek(buf);
        if n > 0 || rx.re.at_eof() || buf.is_empty() {
            return Ok(Some(n));
        }
        match &rx.error {
            Some(e) => Err(e.clone().into()),
            None => Ok(None),
        }
    }

    /// In-order bytes readable now (FIONREAD).
    pub fn readable_bytes(&self) -> u64 {
        lock(&self.shared.rx).re.readable()
    }

    fn credit_after_read(&self, mut rx: std::sync::MutexGuard<'_, Rx>) {
        let credit = self.credit_due(&mut rx);
        drop(rx);
        if let Some(c) = credit {
            self.send_credit(c);
        }
    }

    /// Writes a prefix of `buf` (at most one frame, within the peer's window) and says how
    /// much. Pending leaves the waker for credit or channel space.
    pub fn poll_write(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_send(cx, buf.len(), |n| Bytes::copy_from_slice(&buf[..n]))
    }

    /// Like [`VSocket::poll_write`] for an owned buffer: the prefix taken is sent without a
    /// copy in user space.
    pub fn poll_write_owned(&self, cx: &mut Context<'_>, data: &Bytes) -> Poll<io::Result<usize>> {
        self.poll_send(cx, data.len(), |n| data.slice(..n))
    }

    fn poll_send(
        &self,
        cx: &mut Context<'_>,
        len: usize,
        take: impl FnOnce(usize) -> Bytes,
    ) -> Poll<io::Result<usize>> {
        if len == 0 {
            return Poll::Ready(Ok(0));
        }
        let session = &self.session;
        let (ch, seq, n) = {
            let mut tx = lock(&self.shared.tx);
            if let Err(e) = tx.check_writable() {
                return Poll::Ready(Err(e));
            }
            let avail = tx.credit();
            if avail == 0 {
                tx.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let n = len.min(avail as usize).min(session.send_frame as usize);
            let mut choice = self.choose(&mut tx, n as u64);
            if choice == Choice::Full {
                session.wake_on_space(cx.waker());
                // A channel may have drained between the choice and the registration.
                choice = self.choose(&mut tx, n as u64);
                if choice == Choice::Full {
                    return Poll::Pending;
                }
            }
            let ch = match choice {
                Choice::Channel(i) => session.class_base(self.shared.class) + i,
                Choice::NoChannel | Choice::Full => {
                    drop(tx);
                    return Poll::Ready(Err(self.no_channel()));
                }
            };
            (ch, tx.take_seq(n), n)
        };
        let inline = if session.cfg.async_inline_send {
            Inline::NoWait
        } else {
            Inline::Never
        };
        if let Err(e) = self.send_data(ch, seq, take(n), false, inline) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    /// The socket's readiness now. With a context, the waker stays for the next arrival,
    /// and for credit or channel space when the socket is not writable, so the caller hears
    /// of the change (a persistent waker, as an event loop has, can be left on every call).
    pub fn readiness(&self, mut cx: Option<&mut Context<'_>>) -> Readiness {
        let mut r = Readiness::default();
        {
            let mut rx = lock(&self.shared.rx);
            r.read_closed = rx.re.at_eof();
            r.error = rx.error.is_some();
            r.readable = rx.re.readable() > 0 || r.read_closed || r.error;
            // Kept even when readable: an edge-triggered waiter expects to hear of every
            // arrival (the kernel wakes epoll on each one), read to EAGAIN or not.
            if let Some(cx) = cx.as_deref_mut() {
                rx.waker = Some(cx.waker().clone());
            }
        }
        let mut tx = lock(&self.shared.tx);
        r.error |= tx.error.is_some();
        r.write_closed = tx.error.is_some() || tx.fin_sent;
        let credit = tx.credit() > 0;
        let space = credit && self.session.has_space(self.shared.class);
        r.writable = r.write_closed || space;
        if !r.writable
            && let Some(cx) = cx
        {
            if credit {
                drop(tx);
                self.session.wake_on_space(cx.waker());
                // A channel may have drained before the registration.
                r.writable = self.session.has_space(self.shared.class);
            } else {
                tx.waker = Some(cx.waker().clone());
            }
        }
        r
    }

    /// The socket's error, if it failed (SO_ERROR).
    pub fn error(&self) -> Option<io::Error> {
        let rx = lock(&self.shared.rx);
        if let Some(e) = &rx.error {
            return Some(e.clone().into());
        }
        drop(rx);
        lock(&self.shared.tx).error.clone().map(Into::into)
    }
}

impl VListener {
    /// The next queued connection; Pending leaves the waker for the next one.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<VSocket>> {
        // The waker goes in before the queue is looked at, so a connection queued in between
        // still wakes it.
        *lock(&self.queue.waker) = Some(cx.waker().clone());
        let mut q = lock(&self.queue.queue);
        if let Some(s) = q.0.pop_front() {
            return Poll::Ready(Ok(s));
        }
        if q.1 {
            return Poll::Ready(Err(crate::Error::Closed.into()));
        }
        Poll::Pending
    }

    /// Puts a connection taken by [`VListener::poll_accept`] back at the head of the queue,
    /// for a caller that could not take it after all (no descriptor for it: `accept` at
    /// EMFILE leaves the connection queued on TCP too). On a closed listener it is dropped,
    /// which resets it as the rest of the queue was.
    pub fn requeue(&self, s: VSocket) {
        let mut q = lock(&self.queue.queue);
        if !q.1 {
            q.0.push_front(s);
        }
    }

    /// Whether a connection is queued now; with a context, the waker stays for the next one
    /// when none is.
    pub fn has_pending(&self, cx: Option<&mut Context<'_>>) -> bool {
        if let Some(cx) = cx {
            *lock(&self.queue.waker) = Some(cx.waker().clone());
        }
        !lock(&self.queue.queue).0.is_empty()
    }
}
