//! One channel: a TCP connection, the queue of frames waiting for it, and its writer loop.
//! Frames on one channel may go out in any order relative to frames on other channels; the
//! receiver orders a socket's bytes by `seq`, so a channel only has to write each frame whole.

use crate::frame_io::{OutFrame, write_all_vectored, write_now};
use crate::sched::{Load, choose_worker};
use crate::socket::lock;
use crate::wire::{Class, FrameType, Header, flags};
use crate::work::WorkQueue;
use bytes::Bytes;
use netsteer_sock::pipe::{Pipe, splice_into};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// A writer loop sends at most this much per writev(2), so queued control frames of other
/// sockets wait for at most one batch.
const BATCH_BYTES: usize = 1 << 20;
const BATCH_FRAMES: usize = 64;

#[derive(Default)]
struct TxQueue {
    frames: VecDeque<OutFrame>,
    writing: bool,
    writer_waiting: bool,
    /// A writer thread exists (it ends after [`WRITER_LINGER`] with nothing queued).
    writer_running: bool,
    closed: bool,
    /// Control frames (not DATA) among `frames`.
    control: usize,
    /// The send copy worker chosen last (round-robin).
    last_worker: usize,
}

/// How long a writer thread waits with nothing queued before it ends. A channel's writer
/// exists only while frames wait for it: an idle channel costs no thread (issue 53: two
/// threads a channel let 1,024 idle channels from hostile peers cost a server 2,050
/// threads), and a frame sent on an idle channel goes out inline from the sender's thread
/// anyway. A second keeps the thread through a burst's pauses (a spawn costs tens of µs).
pub const WRITER_LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// Starts a channel's writer thread (the session's `run_channel` sets it).
pub type WriterSpawn = Box<dyn Fn() -> io::Result<()> + Send + Sync>;

/// Queue entries a channel keeps allocated once its queue has drained.
const KEEP_QUEUED: usize = 256;

/// Payloads at least this large go through a send copy worker when the channel has some.
const SEND_OFFLOAD_MIN: usize = 64 * 1024;

/// A send copy worker of one channel. It write(2)s queued payloads into its pipe — the
/// user→kernel copy, on its own core — and the channel's writer splice(2)s them from the pipe
/// into the socket, which moves page references. A TCP socket takes one writer at a time
/// (tcp_sendmsg holds the socket lock while it copies), so without this the copies of one
/// channel all run on its writer thread. Each channel has its own workers so every pipe holds
/// payloads in exactly the order that channel's writer takes them.
struct SendWorker {
    /// The pipe's read end, taken (closed) when the channel closes so a worker blocked on a
    /// full pipe gets EPIPE.
    read_end: Mutex<Option<File>>,
    jobs: WorkQueue<Bytes>,
    /// Bytes handed to the worker and not yet spliced out.
    pending: AtomicU64,
}

impl SendWorker {
    fn run(&self, mut write_end: File) {
        // Returning drops the write end, which ends any splice waiting for data.
        while let Some(job) = self.jobs.next() {
            if write_end.write_all(&job).is_err() {
                return;
            }
        }
    }
}

/// Counters of one channel.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub bytes_out: AtomicU64,
    pub frames_out: AtomicU64,
    pub bytes_in: AtomicU64,
    pub frames_in: AtomicU64,
    /// Payload bytes a send copy worker copied.
    pub send_copied: AtomicU64,
}

pub(crate) struct Channel {
    pub index: usize,
    /// Unique in its session: a re-dialed channel takes the index of a dead one, not its id.
    pub id: u64,
    pub class: Class,
    pub stream: TcpStream,
    tx: Mutex<TxQueue>,
    tx_cv: Condvar,
    queued: AtomicU64,
    alive: AtomicBool,
    inline: bool,
    pub counters: Counters,
    send_workers: Vec<Arc<SendWorker>>,
    worker_limit: u64,
    /// Control frames that may wait in the queue (`Config::max_queued_control`).
    max_control: usize,
    /// Why this side cut the connection off, when it did (the reader reports this cause
    /// instead of the bare end of the stream it then sees).
    pub cut_off: std::sync::OnceLock<String>,
    /// Starts the writer thread when frames are queued and none runs.
    writer: std::sync::OnceLock<WriterSpawn>,
}

/// Whether a sender writes its frame itself when the channel is idle (`Config::inline_send`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inline {
    /// Never: the frame is queued for the writer thread (replies from a thread that must not
    /// block on a peer that does not read).
    Never,
    /// Yes, waiting in write(2) for room (a blocking call of the application).
    Wait,
    /// Yes, what the socket takes now; the rest is queued, ahead of everything, for the
    /// writer thread. An event loop's thread must never wait on a peer that stopped reading
    /// its channel (it would stall every other connection of the program until the channel
    /// is declared dead).
    NoWait,
}

/// How a channel copies outgoing payloads.
pub(crate) struct SendCopy<'a> {
    pub workers: usize,
    pub pipe: usize,
    pub limit: u64,
    pub cpus: &'a [u32],
    /// `Config::max_queued_control`.
    pub max_control: usize,
}

pub(crate) fn broken() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "channel closed")
}

fn unread_replies(max: usize) -> String {
    format!("cut off: the peer left {max} control frames unread (max_queued_control)")
}

impl Channel {
    pub fn new(
        index: usize,
        id: u64,
        class: Class,
        stream: TcpStream,
        inline: bool,
        copy: SendCopy<'_>,
    ) -> io::Result<Channel> {
        let mut send_workers = Vec::with_capacity(copy.workers);
        for w in 0..copy.workers {
            let pipe = Pipe::new(copy.pipe).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("send copy worker pipe of {} bytes: {e}", copy.pipe),
                )
            })?;
            let worker = Arc::new(SendWorker {
                read_end: Mutex::new(Some(pipe.read)),
                jobs: WorkQueue::new(),
                pending: AtomicU64::new(0),
            });
            let (wk, write_end) = (worker.clone(), pipe.write);
            let cpu = (!copy.cpus.is_empty()).then(|| copy.cpus[(index + w) % copy.cpus.len()]);
            std::thread::Builder::new()
                .name(format!("nc-scopy-{index}-{w}"))
                .spawn(move || {
                    if let Some(c) = cpu {
                        let _ = netsteer_sock::cpu::pin_current_thread(&[c]);
                    }
                    wk.run(write_end);
                })?;
            send_workers.push(worker);
        }
        Ok(Channel {
            index,
            id,
            class,
            stream,
            tx: Mutex::new(TxQueue::default()),
            tx_cv: Condvar::new(),
            queued: AtomicU64::new(0),
            alive: AtomicBool::new(true),
            inline,
            counters: Counters::default(),
            send_workers,
            worker_limit: copy.limit,
            max_control: copy.max_control,
            cut_off: std::sync::OnceLock::new(),
            writer: std::sync::OnceLock::new(),
        })
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
    pub fn send(&self, header: &Header, payload: Bytes) -> io::Result<()> {
        self.send_with(header, payload, Inline::Wait)
    }

    pub fn send_with(&self, header: &Header, payload: Bytes, inline: Inline) -> io::Result<()> {
        let mut q = lock(&self.tx);
        if q.closed {
            return Err(broken());
        }
        // Every frame this side writes is padded to whole 64-byte lines (wire.rs, "Padding"),
        // so the kernel copies each payload to an aligned destination.
        let header = Header {
            flags: header.flags | flags::PAD,
            ..*header
        };
        let control = header.kind != FrameType::Data;
        if control && q.control >= self.max_control {
            // Every control frame answers something the peer sent (an OPEN, DATA for no
            // socket, data to acknowledge). A peer that keeps asking and never reads would
            // otherwise grow this queue for as long as it likes. The shutdown ends the
            // channel's reader, which fails the channel as a dead path (re-sends, or fails
            // the sockets of a class with no channel left); no lock is taken here, since
            // callers may hold a socket's.
            let why = unread_replies(self.max_control);
            let _ = self.cut_off.set(why.clone());
            drop(q);
            let _ = self.stream.shutdown(Shutdown::Both);
            return Err(io::Error::new(io::ErrorKind::QuotaExceeded, why));
        }
        let mut frame = OutFrame::new(&header, payload);
        if inline != Inline::Never && self.inline && !q.writing && q.frames.is_empty() {
            q.writing = true;
            drop(q);
            let total = frame.wire_len();
            let res = match inline {
                Inline::NoWait => write_now(self.stream.as_fd(), &frame.parts()),
                _ => write_all_vectored(&mut &self.stream, &frame.parts()).map(|()| total),
            };
            let mut q = lock(&self.tx);
            q.writing = false;
            let written = res.as_ref().ok().copied();
            let whole = written == Some(total);
            if let Some(n) = written.filter(|&n| n < total) {
                // The rest goes first: every frame queued meanwhile came after this one.
                frame.skip = n;
                self.queued
                    .fetch_add(frame.left() as u64, Ordering::Relaxed);
                q.frames.push_front(frame);
                q.control += usize::from(control);
            }
            if q.writer_waiting && (!q.frames.is_empty() || q.closed) {
                self.tx_cv.notify_all();
            }
            let started = self.ensure_writer(q);
            if whole {
                self.count_out(total, 1);
            }
            return res.and(started).map(|_| ());
        }
        if header.kind == FrameType::Data && frame.payload.len() >= SEND_OFFLOAD_MIN {
            frame.via = self.offload(&mut q, &frame.payload);
        }
        self.queued
            .fetch_add(frame.wire_len() as u64, Ordering::Relaxed);
        q.frames.push_back(frame);
        q.control += usize::from(control);
        if q.writer_waiting {
            self.tx_cv.notify_all();
        }
        self.ensure_writer(q)
    }

    /// Sets how the writer thread is started, and starts it if frames already wait.
    pub fn set_writer(&self, spawn: WriterSpawn) -> io::Result<()> {
        let _ = self.writer.set(spawn);
        self.ensure_writer(lock(&self.tx))
    }

    /// Starts a writer if frames wait and none runs (the caller's queue guard is released
    /// first: the new thread takes the queue).
    fn ensure_writer(&self, mut q: std::sync::MutexGuard<'_, TxQueue>) -> io::Result<()> {
        if q.writer_running || q.closed || q.frames.is_empty() {
            return Ok(());
        }
        let Some(spawn) = self.writer.get() else {
            return Ok(());
        };
        q.writer_running = true;
        drop(q);
        spawn().inspect_err(|_| lock(&self.tx).writer_running = false)
    }

    /// Hands a payload to a send copy worker, in queue order (the caller holds the queue).
    fn offload(&self, q: &mut TxQueue, payload: &Bytes) -> Option<usize> {
        if self.send_workers.is_empty() {
            return None;
        }
        let pending: Vec<u64> = self
            .send_workers
            .iter()
            .map(|w| w.pending.load(Ordering::Relaxed))
            .collect();
        let w = choose_worker(&pending, self.worker_limit, &mut q.last_worker)?;
        let worker = &self.send_workers[w];
        worker
            .pending
            .fetch_add(payload.len() as u64, Ordering::Relaxed);
        worker.jobs.push(payload.clone());
        Some(w)
    }

    /// Writes a batch: runs of directly written frames with writev, and payloads held by
    /// send copy workers spliced from their pipes after their headers.
    fn write_batch(&self, batch: &[OutFrame]) -> io::Result<()> {
        let mut parts: Vec<&[u8]> = Vec::with_capacity(4 * batch.len());
        for f in batch {
            if f.via.is_none() {
                parts.extend(f.parts());
                continue;
            }
            parts.push(&f.header);
            parts.push(f.head_pad());
            match f.via {
                None => unreachable!("handled above"),
                Some(w) => {
                    write_all_vectored(&mut &self.stream, &parts)?;
                    parts.clear();
                    self.splice_from(w, f.payload.len())?;
                }
            }
            parts.push(f.tail_pad());
        }
        write_all_vectored(&mut &self.stream, &parts)
    }

    fn splice_from(&self, w: usize, len: usize) -> io::Result<()> {
        let worker = &self.send_workers[w];
        let end = lock(&worker.read_end);
        let Some(pipe) = end.as_ref() else {
            return Err(broken());
        };
        let mut left = len;
        while left > 0 {
            match splice_into(pipe.as_fd(), self.stream.as_fd(), left)? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "send copy worker stopped",
                    ));
                }
                n => left -= n,
            }
        }
        worker.pending.fetch_sub(len as u64, Ordering::Relaxed);
        self.counters
            .send_copied
            .fetch_add(len as u64, Ordering::Relaxed);
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
        q.control = 0;
        self.queued.store(0, Ordering::Relaxed);
        self.tx_cv.notify_all();
        drop(q);
        let _ = self.stream.shutdown(Shutdown::Both);
        for w in &self.send_workers {
            w.jobs.close(true);
            // Waits for a splice in progress (the shutdown or the worker's exit ends it).
            lock(&w.read_end).take();
        }
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
                let mut lingered = false;
                loop {
                    if q.closed {
                        return None;
                    }
                    if !q.frames.is_empty() && !q.writing {
                        break;
                    }
                    if q.frames.is_empty() && !q.writing && lingered {
                        // Nothing for a whole linger: end; the next queued frame starts a
                        // writer again (ensure_writer, under this same lock).
                        q.writer_running = false;
                        return None;
                    }
                    q.writer_waiting = true;
                    let (g, timeout) = self
                        .tx_cv
                        .wait_timeout(q, WRITER_LINGER)
                        .unwrap_or_else(|p| p.into_inner());
                    q = g;
                    lingered = timeout.timed_out();
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
                    let f = q.frames.pop_front().expect("front");
                    q.control -= usize::from(f.control);
                    batch.push(f);
                }
                q.writing = true;
            }
            let res = self.write_batch(&batch);
            let bytes: usize = batch.iter().map(OutFrame::left).sum();
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
                if q.frames.is_empty() && q.frames.capacity() > KEEP_QUEUED {
                    // A burst of replies (a peer flooding DATA for no socket) grew the queue
                    // to thousands of entries; kept, that was ~1 MiB on every such channel.
                    q.frames.shrink_to(KEEP_QUEUED);
                }
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
