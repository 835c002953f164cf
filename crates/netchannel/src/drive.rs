//! Run to completion: the application's own threads read the channels when they wait.
//!
//! Why: with a reader thread per channel every arrival is a thread hand-off — the reader
//! wakes, reads the frame, and wakes the application, which wakes again to read the socket.
//! `perf record` of a preloaded redis-server was led by those context switches, and it
//! served 0.50-0.70× the requests of plain TCP on two vCPUs (BENCHMARKS.md, issue 38). The
//! kernel runs TCP's receive in the softirq of the CPU the packet landed on and the
//! application finds the bytes queued; OpenOnload gets the same in user space by polling
//! its stack from the application's own calls, with a helper that steps in only when no
//! application thread has looked for a while. This module is that for netchannel: a thread
//! that waits (epoll, poll, a blocking read) waits on the channels' sockets as well and,
//! when one is readable, reads what is queued there itself ([`DrivenChannel::pump`]), so
//! one wake-up carries a frame from the socket to the application.
//!
//! The standby. Somebody must still read when no application thread waits: a program busy
//! elsewhere while a peer sends more than the channel's socket buffer holds would otherwise
//! stall the peer's writer, and a dead channel would go unnoticed. One thread per endpoint
//! stands by for every channel ([`crate::standby`]): after an arrival it waits
//! `Config::standby_after` ([`STANDBY`] unless set) and reads only if in that whole time no
//! application thread pumped this channel or entered a wait that includes its socket
//! ([`watch`]); then it reads as a reader thread would until an application thread waits on
//! it or pumps it. When the application came back soon after the standby stepped in, it was
//! busy rather than gone, so the channel's patience doubles (up to [`STANDBY_MAX`]); it
//! returns to `standby_after` when the application stays away. An idle channel costs it
//! nothing: no thread, no timer, one armed epoll registration. The check is per channel, not
//! per process: a channel that joins while a thread sleeps in a wait built before it is in no
//! wait, so the standby reads it, and what it delivers wakes that thread, whose next wait
//! includes it.
//!
//! Where it costs: a program blocked outside the calls that drive (in a disk read, a lock)
//! gets its frames read by the standby after up to `standby_after`, with the hand-off the
//! reader thread design paid on every frame. The library's own blocking calls (an OPEN
//! waiting for its answer) drive too.

use crate::channel::Channel;
use crate::error::ReadError;
use crate::session::{ChannelReader, Session};
use crate::socket::lock;
use crate::wire::Header;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How long no application thread may have read or waited before the standby reads (the
/// default of [`crate::Config::standby_after`]).
pub const STANDBY: Duration = Duration::from_millis(1);
/// The longest a channel's patience grows to, and the longest the standby rests from a
/// channel the application reads while frames move on it ([`crate::standby`]).
pub const STANDBY_MAX: Duration = Duration::from_millis(50);
/// The longest the standby rests from a channel the application waits on while nothing
/// arrives on it: a few looks a second at most for a channel every wait includes.
pub const IDLE_WAIT_MAX: Duration = Duration::from_secs(1);
/// Frames one pump reads at most before it returns (other descriptors of the program wait
/// meanwhile; a level-triggered wait reports the channel again at once).
pub(crate) const PUMP_FRAMES: usize = 256;

/// The channels of an endpoint whose sessions the application drives
/// ([`crate::Config::app_driven`]).
#[derive(Default)]
pub struct Driver {
    /// Changes to the channel list: a program's wait set re-reads the list when it moved.
    generation: AtomicU64,
    next_key: AtomicU64,
    channels: Mutex<Vec<DrivenChannel>>,
    /// The endpoint's standby thread, started with its first channel.
    standby: Mutex<Option<crate::standby::Standby>>,
}

/// A channel the application's threads read. Holding one keeps its socket descriptor open,
/// so a wait set that registered [`DrivenChannel::fd`] can still remove it after the channel
/// died.
#[derive(Clone)]
pub struct DrivenChannel(Arc<Pump>);

struct Pump {
    key: u64,
    session: Weak<Session>,
    ch: Arc<Channel>,
    reader: Mutex<Reading>,
    done: AtomicBool,
    driver: Weak<Driver>,
    /// Application threads inside a wait that includes this channel's socket: an arrival
    /// wakes one of them, so the standby sleeps.
    watched: AtomicUsize,
    /// Pumps by application threads and their waits that include this channel: the
    /// standby watches it move. A wait counts, not only a pump: a busy program (redis-server
    /// answering 800 pipelined GETs in one turn of its loop takes over 1 ms) must get the
    /// channel back at its next wait even if the standby drained the socket meanwhile, or
    /// the standby, reading first, keeps every frame a thread hand-off (perf: 10 % of the
    /// preloaded server's CPU in the standby at pipelining 16).
    looks: AtomicU64,
}

/// A channel's reader and the frame whose header it took and whose payload is not all there
/// yet (the reader keeps the bytes so far).
struct Reading {
    r: ChannelReader,
    pending: Option<Header>,
}

/// What one pump did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pumped {
    /// Read and handled this many frames (0: nothing was queued).
    Frames(usize),
    /// Another thread is reading this channel now.
    Busy,
    /// The channel is dead (it may have died in this pump); leave it.
    Closed,
}

/// An application thread inside a wait on some channels' sockets (see [`watch`]).
pub struct Watching<'a>(&'a [DrivenChannel]);

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        for c in self.0 {
            c.0.watched.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Marks the calling thread as waiting on the sockets of `chans` until the guard drops: an
/// arrival on one wakes it, so their standbys sleep meanwhile.
pub fn watch(chans: &[DrivenChannel]) -> Watching<'_> {
    for c in chans {
        c.0.watched.fetch_add(1, Ordering::AcqRel);
        c.0.looks.fetch_add(1, Ordering::Release);
    }
    Watching(chans)
}

impl Driver {
    /// Moves whenever a channel is added or dies.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The live channels.
    pub fn channels(&self) -> Vec<DrivenChannel> {
        lock(&self.channels).clone()
    }

    /// Pumps every live channel once (a thread that is about to wait, or that wants what
    /// may have arrived). True if any frame was handled.
    pub fn pump_all(&self) -> bool {
        let mut any = false;
        for c in self.channels() {
            any |= matches!(c.pump(), Pumped::Frames(n) if n > 0);
        }
        any
    }

    /// Waits, driving, until `done` gives a value or `deadline` passes (None): the blocking
    /// calls of the library (an OPEN waiting for its OPEN_ACK) use it instead of a condition
    /// variable, since no reader thread would signal one.
    pub(crate) fn drive_until<T>(
        &self,
        deadline: Instant,
        mut done: impl FnMut() -> Option<T>,
    ) -> Option<T> {
        loop {
            if let Some(v) = done() {
                return Some(v);
            }
            self.pump_all();
            if let Some(v) = done() {
                return Some(v);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            let chans = self.channels();
            let fds: Vec<BorrowedFd<'_>> = chans.iter().map(|c| c.fd()).collect();
            // Short waits: a frame another thread read for us ends the wait by `done`, which
            // this thread only sees when it looks again.
            let ms = (deadline - now).min(STANDBY).as_millis().max(1) as i32;
            let _w = watch(&chans);
            let _ = netsteer_sock::tcp::wait_any_readable(&fds, ms);
        }
    }

    /// Adds a channel the application's threads will read, and hands it to the endpoint's
    /// standby (started here with the first channel, with patience `after`).
    pub(crate) fn add(
        self: &Arc<Self>,
        session: &Arc<Session>,
        ch: Arc<Channel>,
        mut reader: ChannelReader,
        after: Duration,
    ) -> io::Result<DrivenChannel> {
        // Only pumps read it, and a pump never waits: not for a header, not for the rest of a
        // payload a peer may never send (it keeps what came and goes on at the next pump).
        reader.get_mut().dontwait = true;
        let pump = DrivenChannel(Arc::new(Pump {
            key: self.next_key.fetch_add(1, Ordering::Relaxed),
            session: Arc::downgrade(session),
            ch,
            reader: Mutex::new(Reading {
                r: reader,
                pending: None,
            }),
            done: AtomicBool::new(false),
            driver: Arc::downgrade(self),
            watched: AtomicUsize::new(0),
            looks: AtomicU64::new(0),
        }));
        let mut standby = lock(&self.standby);
        if standby.is_none() {
            *standby = Some(crate::standby::Standby::start(after)?);
        }
        lock(&self.channels).push(pump.clone());
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Some(s) = standby.as_ref() {
            s.add(pump.clone());
        }
        Ok(pump)
    }

    fn retire(&self, key: u64) {
        lock(&self.channels).retain(|c| c.0.key != key);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

impl DrivenChannel {
    /// Unique among the endpoint's channels, for as long as the endpoint lives.
    pub fn key(&self) -> u64 {
        self.0.key
    }

    /// The channel's socket: readable when a frame (or its end) is there to pump.
    pub fn fd(&self) -> BorrowedFd<'_> {
        // The channel's own descriptor (the reader's is a dup of the same socket); the handle
        // holds the channel, so it stays open as long as the handle.
        self.0.ch.stream.as_fd()
    }

    pub fn is_alive(&self) -> bool {
        !self.0.done.load(Ordering::Acquire)
    }

    /// Reads and handles the frames queued on the channel now, without waiting for more
    /// (a frame whose first bytes are there is read whole: its sender wrote it in one go).
    pub fn pump(&self) -> Pumped {
        self.pump_as(true)
    }

    fn pump_as(&self, app: bool) -> Pumped {
        let p = &self.0;
        let mut r = match p.reader.try_lock() {
            Ok(r) => r,
            Err(std::sync::TryLockError::WouldBlock) => return Pumped::Busy,
            Err(std::sync::TryLockError::Poisoned(_)) => {
                // A pump panicked mid-frame (on a runtime's thread the task just ends): the
                // reader's state is unknown, so the channel fails as a dead path would,
                // instead of every later pump answering Busy for ever.
                let session = p.session.upgrade();
                self.finish(
                    session.as_ref(),
                    "internal error: a pump of this channel panicked",
                );
                return Pumped::Closed;
            }
        };
        if p.done.load(Ordering::Acquire) {
            return Pumped::Closed;
        }
        let Some(session) = p.session.upgrade() else {
            drop(r);
            self.finish(None, "session gone");
            return Pumped::Closed;
        };
        let mut n = 0;
        let st = &mut *r;
        // A short read of an earlier pump said nothing of now.
        st.r.get_mut().drained = false;
        let res = loop {
            let h = match st.pending.take() {
                Some(h) => h,
                None => match st.r.next_header() {
                    Ok(Some(h)) => h,
                    Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                        break Ok(());
                    }
                    Ok(None) => break Err("the peer closed the channel".to_string()),
                    Err(e) => break Err(format!("read failed: {e}")),
                },
            };
            let payload = match st.r.payload(&h) {
                Ok(p) => p,
                Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                    st.pending = Some(h);
                    break Ok(());
                }
                Err(e) => break Err(format!("read failed: {e}")),
            };
            n += 1;
            if let Err(e) = session.frame_in(&p.ch, h, payload, &mut st.r.get_mut().wakes) {
                break Err(e);
            }
            if n >= PUMP_FRAMES {
                break Ok(());
            }
        };
        st.r.get_mut().wakes.flush();
        drop(r);
        if app {
            p.looks.fetch_add(1, Ordering::Release);
        }
        match res {
            Ok(()) => Pumped::Frames(n),
            Err(cause) => {
                self.finish(Some(&session), &cause);
                Pumped::Closed
            }
        }
    }

    /// The channel ended: fail it as a dead path (once) and leave the list.
    fn finish(&self, session: Option<&Arc<Session>>, cause: &str) {
        let p = &self.0;
        if p.done.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(s) = session {
            let cause =
                p.ch.cut_off
                    .get()
                    .cloned()
                    .unwrap_or_else(|| cause.to_string());
            s.channel_failed(&p.ch, &cause);
        } else {
            p.ch.close();
        }
        if let Some(d) = p.driver.upgrade() {
            d.retire(p.key);
        }
    }

    /// False once the channel was closed from this side (or by a writer's error): the
    /// standby then reads it to its end, so it fails as a reader thread would fail it.
    pub(crate) fn channel_open(&self) -> bool {
        self.0.ch.is_alive()
    }

    /// Application threads in a wait that includes this channel now.
    pub(crate) fn watched(&self) -> usize {
        self.0.watched.load(Ordering::Acquire)
    }

    /// Moves with every application pump and wait that includes this channel.
    pub(crate) fn looks(&self) -> u64 {
        self.0.looks.load(Ordering::Acquire)
    }

    /// Frames received on the channel so far.
    pub(crate) fn frames_in(&self) -> u64 {
        self.0.ch.counters.frames_in.load(Ordering::Relaxed)
    }

    /// A pump by the standby (it does not count as the application looking).
    pub(crate) fn pump_standby(&self) -> Pumped {
        self.pump_as(false)
    }

    /// Ends a channel that did not read to its end in time.
    pub(crate) fn give_up(&self, cause: &str) {
        let session = self.0.session.upgrade();
        self.finish(session.as_ref(), cause);
    }
}
