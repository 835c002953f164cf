//! Receive copy workers. A TCP socket is read by one thread at a time, so over one channel
//! the kernel→user copy would run on that channel's I/O thread alone. Instead the I/O thread
//! reads only frame headers and splice(2)s each payload into a worker's pipe — moving page
//! references, not bytes — and the worker read(2)s it out: the copy runs on the worker's core.
//! Workers are chosen round-robin, skipping any with 640 KiB or more pending, and the I/O
//! thread copies a payload itself when every worker is busy (NetChannel's local copy,
//! module/nd_data_copy.c).

use crate::channel::Channel;
use crate::frame_io::FrameReader;
use crate::sched::choose_worker;
use crate::session::{Session, Wakes};
use crate::socket::lock;
use crate::wire::Header;
use crate::work::WorkQueue;
use bytes::Bytes;
use netsteer_sock::buf::read_append_exact;
use netsteer_sock::pipe::{Pipe, splice_into};
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Payloads smaller than this are cheaper to copy than to hand off.
const MIN_OFFLOAD: u32 = 4096;

struct Job {
    session: Arc<Session>,
    channel: Arc<Channel>,
    header: Header,
    /// Payload bytes the I/O thread had already read with the header.
    head: Bytes,
    aborted: Arc<AtomicBool>,
}

struct Worker {
    pipe: Pipe,
    /// Held while a payload is spliced in, so payloads of different channels never interleave.
    feed: Mutex<()>,
    queue: WorkQueue<Job>,
    pending: AtomicU64,
    copied: AtomicU64,
}

pub(crate) struct CopyPool {
    workers: Vec<Arc<Worker>>,
    last: Mutex<usize>,
    limit: u64,
}

impl CopyPool {
    pub fn new(n: usize, pipe: usize, limit: u64, cpus: &[u32]) -> io::Result<Arc<CopyPool>> {
        let mut workers = Vec::with_capacity(n);
        for i in 0..n {
            let w = Arc::new(Worker {
                pipe: Pipe::new(pipe).map_err(|e| {
                    io::Error::new(e.kind(), format!("copy worker pipe of {pipe} bytes: {e}"))
                })?,
                feed: Mutex::new(()),
                queue: WorkQueue::new(),
                pending: AtomicU64::new(0),
                copied: AtomicU64::new(0),
            });
            let w2 = w.clone();
            let cpu = (!cpus.is_empty()).then(|| cpus[i % cpus.len()]);
            std::thread::Builder::new()
                .name(format!("nc-copy-{i}"))
                .spawn(move || {
                    if let Some(c) = cpu {
                        let _ = netsteer_sock::cpu::pin_current_thread(&[c]);
                    }
                    w2.run();
                })?;
            workers.push(w);
        }
        Ok(Arc::new(CopyPool {
            workers,
            last: Mutex::new(n.saturating_sub(1)),
            limit,
        }))
    }

    /// Bytes each worker has copied.
    pub fn copied(&self) -> Vec<u64> {
        self.workers
            .iter()
            .map(|w| w.copied.load(Ordering::Relaxed))
            .collect()
    }

    /// Hands the payload of `h` to a worker. Ok(false): no worker is free (or the payload is
    /// small) and the caller reads it itself.
    pub fn offer<R: crate::frame_io::Source + AsFd>(
        &self,
        session: &Arc<Session>,
        ch: &Arc<Channel>,
        h: &Header,
        r: &mut FrameReader<R>,
    ) -> io::Result<bool> {
        if h.len < MIN_OFFLOAD {
            return Ok(false);
        }
        let pending: Vec<u64> = self
            .workers
            .iter()
            .map(|w| w.pending.load(Ordering::Relaxed))
            .collect();
        let Some(i) = choose_worker(&pending, self.limit, &mut lock(&self.last)) else {
            return Ok(false);
        };
        let w = &self.workers[i];
        let len = h.len as usize;
        r.skip_head_pad().map_err(|e| match e {
            crate::error::ReadError::Io(e) => e,
            other => io::Error::new(io::ErrorKind::UnexpectedEof, other.to_string()),
        })?;
        let head = Bytes::copy_from_slice(r.take_buffered(len));
        let aborted = Arc::new(AtomicBool::new(false));
        let _feed = lock(&w.feed);
        w.pending.fetch_add(len as u64, Ordering::Relaxed);
        {
            // The job goes in first: the worker then drains the pipe while we fill it, so a
            // payload larger than the pipe cannot deadlock.
            w.queue.push(Job {
                session: session.clone(),
                channel: ch.clone(),
                header: *h,
                head: head.clone(),
                aborted: aborted.clone(),
            });
        }
        let mut left = len - head.len();
        while left > 0 {
            let res = splice_into(r.get_ref().as_fd(), w.pipe.write.as_fd(), left);
            match res {
                Ok(n) if n > 0 => left -= n,
                other => {
                    // The worker is waiting for `left` more bytes: give it filler and tell
                    // it to drop the job, so the pipe stays in step for the next payload.
                    aborted.store(true, Ordering::Release);
                    let zeros = vec![0u8; left];
                    (&w.pipe.write).write_all(&zeros)?;
                    return Err(match other {
                        Ok(_) => io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "channel ended inside a frame",
                        ),
                        Err(e) => e,
                    });
                }
            }
        }
        Ok(true)
    }

    pub fn shutdown(&self) {
        for w in &self.workers {
            // Jobs already queued are copied first: their bytes are in the pipe.
            w.queue.close(false);
        }
    }
}

impl Worker {
    fn run(&self) {
        while let Some(job) = self.queue.next() {
            let len = job.header.len as usize;
            let mut v = Vec::with_capacity(len);
            v.extend_from_slice(&job.head);
            let res = read_append_exact(self.pipe.read.as_fd(), &mut v, len - job.head.len());
            self.pending.fetch_sub(len as u64, Ordering::Relaxed);
            if res.is_err() {
                // Our own pipe failed: nothing sensible is left to copy.
                return;
            }
            self.copied.fetch_add(len as u64, Ordering::Relaxed);
            if job.aborted.load(Ordering::Acquire) {
                continue;
            }
            let mut wakes = Wakes::default();
            // A bug in delivery must cost this frame's channel, not the worker: a dead worker
            // would leave every later payload offered to it stuck in its pipe.
            let delivered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                job.session
                    .deliver(job.channel.index, job.header, Bytes::from(v), &mut wakes)
            }));
            let failure = match delivered {
                Ok(Ok(())) => None,
                Ok(Err(cause)) => Some(cause),
                Err(_) => Some("internal error: delivery panicked in a copy worker".to_string()),
            };
            if let Some(cause) = failure {
                job.session.channel_failed(&job.channel, &cause);
            }
            // Workers finish payloads out of order across workers; wake at once.
            wakes.flush();
        }
    }
}
