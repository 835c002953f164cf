//! One channel: a TCP connection, the queue of frames waiting for it, and its writer loop.
//! Frames on one channel may go out in any order relative to frames on other channels; the
//! receiver orders a socket's bytes by `seq`, so a channel only has to write each frame whole.

use crate::frame_io::{OutFrame, write_all_vectored};
use crate::sched::Load;
use crate::wire::{Class, Header};
use bytes::Bytes;
use std::collections::VecDeque;
use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

/// A writer loop sends at most this much per writev(2), so queued control frames of other
/// sockets wait for at most one batch.
const BATCH_BYTES: usize = 1 << 20;
const BATCH_FRAMES: usize = 64;

#[derive(Default)]
struct TxQueue {
    frames: VecDeque<OutFrame>,
    writing: bool,
    writer_waiting: bool,
    closed: bool,
}

/// Counters of one channel.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub bytes_out: AtomicU64,
    pub frames_out: AtomicU64,
    pub bytes_in: AtomicU64,
    pub frames_in: AtomicU64,
}

pub(crate) struct Channel {
    pub index: usize,
    pub class: Class,
    pub stream: TcpStream,
    tx: Mutex<TxQueue>,
    tx_cv: Condvar,
    queued: AtomicU64,
    alive: AtomicBool,
    inline: bool,
    pub counters: Counters,
}

/// A DATA payload: borrowed from the app when the frame is written inline, owned otherwise.
pub(crate) enum Payload<'a> {
    Borrowed(&'a [u8]),
    Owned(Bytes),
}

impl Payload<'_> {
    fn as_slice(&self) -> &[u8] {
        match self {
            Payload::Borrowed(s) => s,
            Payload::Owned(b) => b,
        }
    }

    fn into_owned(self) -> Bytes {
        match self {
            Payload::Borrowed(s) => Bytes::copy_from_slice(s),
            Payload::Owned(b) => b,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of our locks leaves plain data behind; keep going.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn broken() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "channel closed")
}

impl Channel {
    pub fn new(index: usize, class: Class, stream: TcpStream, inline: bool) -> Channel {
        Channel {
            index,
            class,
            stream,
            tx: Mutex::new(TxQueue::default()),
            tx_cv: Condvar::new(),
            queued: AtomicU64::new(0),
            alive: AtomicBool::new(true),
            inline,
            counters: Counters::default(),
        }
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    pub fn load(&self) -> Load {
        Load {
            alive: self.is_alive(),
            queued: self.queued.load(Ordering::Relaxed),
        }
    }

    /// Queues a frame, or writes it at once from the calling thread when the channel is
    /// idle and inline sending is on (nvme-tcp's "try send inline": no hand-off, no wake-up).
    pub fn send(&self, header: &Header, payload: Payload<'_>) -> io::Result<()> {
        self.send_with(header, payload, true)
    }

    /// `may_block = false` never writes inline (async callers must not block in write(2)).
    pub fn send_with(
        &self,
        header: &Header,
        payload: Payload<'_>,
        may_block: bool,
    ) -> io::Result<()> {
        let mut q = lock(&self.tx);
        if q.closed {
            return Err(broken());
        }
        if may_block && self.inline && !q.writing && q.frames.is_empty() {
            q.writing = true;
            drop(q);
            let h = header.encode();
            let body = payload.as_slice();
            let res = write_all_vectored(&mut &self.stream, &[&h, body]);
            let mut q = lock(&self.tx);
            q.writing = false;
            if q.writer_waiting && (!q.frames.is_empty() || q.closed) {
                self.tx_cv.notify_all();
            }
            drop(q);
            if res.is_ok() {
                self.count_out(h.len() + body.len(), 1);
            }
            return res;
        }
        let frame = OutFrame {
            header: header.encode(),
            payload: payload.into_owned(),
        };
        self.queued
            .fetch_add(frame.wire_len() as u64, Ordering::Relaxed);
        q.frames.push_back(frame);
        if q.writer_waiting {
            self.tx_cv.notify_all();
        }
        Ok(())
    }

    fn count_out(&self, bytes: usize, frames: u64) {
        self.counters
            .bytes_out
            .fetch_add(bytes as u64, Ordering::Relaxed);
        self.counters
            .frames_out
            .fetch_add(frames, Ordering::Relaxed);
    }

    /// Marks the channel dead, drops what was queued and shuts the connection down so both
    /// its threads and the peer notice. Returns false if it was already dead.
    pub fn close(&self) -> bool {
        let was = self.alive.swap(false, Ordering::AcqRel);
        let mut q = lock(&self.tx);
        q.closed = true;
        q.frames.clear();
        self.queued.store(0, Ordering::Relaxed);
        self.tx_cv.notify_all();
        drop(q);
        let _ = self.stream.shutdown(Shutdown::Both);
        was
    }

    /// Waits until everything queued has been written (or `deadline` passes).
    pub fn drain(&self, deadline: std::time::Instant) {
        let mut q = lock(&self.tx);
        while (!q.frames.is_empty() || q.writing) && !q.closed {
            let now = std::time::Instant::now();
            if now >= deadline {
                return;
            }
            q = self
                .tx_cv
                .wait_timeout(
                    q,
                    (deadline - now).min(std::time::Duration::from_millis(10)),
                )
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The writer loop of the channel's I/O thread. Returns the write error that ended it,
    /// or None when the channel was closed.
    pub fn write_loop(&self, mut drained: impl FnMut()) -> Option<io::Error> {
        let mut batch: Vec<OutFrame> = Vec::with_capacity(BATCH_FRAMES);
        loop {
            {
                let mut q = lock(&self.tx);
                loop {
                    if q.closed {
                        return None;
                    }
                    if !q.frames.is_empty() && !q.writing {
                        break;
                    }
                    q.writer_waiting = true;
                    q = self.tx_cv.wait(q).unwrap_or_else(|p| p.into_inner());
                    q.writer_waiting = false;
                }
                let mut bytes = 0;
                while let Some(f) = q.frames.front() {
                    if batch.len() == BATCH_FRAMES
                        || (bytes > 0 && bytes + f.wire_len() > BATCH_BYTES)
                    {
                        break;
                    }
                    bytes += f.wire_len();
                    batch.push(q.frames.pop_front().expect("front"));
                }
                q.writing = true;
            }
            let parts: Vec<&[u8]> = batch
                .iter()
                .flat_map(|f| [&f.header[..], &f.payload[..]])
                .collect();
            let res = write_all_vectored(&mut &self.stream, &parts);
            let bytes: usize = batch.iter().map(OutFrame::wire_len).sum();
            // close() may have zeroed the count meanwhile.
            let _ = self
                .queued
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                    Some(v.saturating_sub(bytes as u64))
                });
            if res.is_ok() {
                self.count_out(bytes, batch.len() as u64);
            }
            batch.clear();
            {
                let mut q = lock(&self.tx);
                q.writing = false;
                // drain() waiters and inline senders watch the same condvar.
                self.tx_cv.notify_all();
                if let Err(e) = res {
                    q.closed = true;
                    return Some(e);
                }
            }
            drained();
        }
    }
}
