//! The standby of an endpoint whose sessions the application drives: one thread for every
//! channel, not one each (see [`crate::drive`] for what it stands in for).
//!
//! Why one: a standby thread per channel cost a preloaded server a thread for each channel a
//! peer opened, and its timed looks cost CPU with no traffic at all (1,024 idle channels
//! from hostile peers: 2,050 threads and 15-18 % of a CPU; issue 53). Here every channel's
//! socket is in one epoll set, watched *once* (EPOLLONESHOT): an idle channel is an armed
//! registration and nothing else, no thread, no timer, no wake-up. What the per-channel loop
//! did with sleeps, this does with one deadline per channel:
//!
//! - an arrival on an armed channel starts its patience (`Config::standby_after`, grown while
//!   the application keeps coming back just after the standby stepped in);
//! - when the patience ends and an application thread looked at the channel meanwhile, or
//!   waits on it now, the application has it: the standby rests (doubling, to
//!   [`STANDBY_MAX`] while frames move and [`IDLE_WAIT_MAX`] when none do) and arms again;
//! - otherwise the standby steps in: it pumps the channel and pumps again at each arrival
//!   until an application thread looks or waits again;
//! - a channel closed from this side is read to its end (at most a second) so it fails
//!   exactly as a reader thread would have failed it.

use crate::drive::{DrivenChannel, IDLE_WAIT_MAX, Pumped, STANDBY_MAX};
use crate::socket::lock;
use netsteer_sock::epoll::{Epoll, Interest, Ready};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The wake-up descriptor's token (channel keys count up from 0).
const WAKE: u64 = u64::MAX;
/// How long a channel closed from this side may take to read to its end.
const DRAIN_FOR: Duration = Duration::from_secs(1);
const DRAIN_STEP: Duration = Duration::from_millis(10);

/// The handle the endpoint's driver keeps; dropping it lets the thread end once its channels
/// have.
pub(crate) struct Standby {
    wake: UnixStream,
    added: Arc<Mutex<Vec<DrivenChannel>>>,
    stop: Arc<AtomicBool>,
}

impl Standby {
    pub(crate) fn start(after: Duration) -> io::Result<Standby> {
        let (tx, rx) = UnixStream::pair()?;
        tx.set_nonblocking(true)?;
        rx.set_nonblocking(true)?;
        let ep = Epoll::new()?;
        ep.watch(rx.as_fd(), Interest::Read, WAKE)?;
        let added = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let after = after.max(Duration::from_micros(100));
        let mut reactor = Reactor {
            ep,
            wake: rx,
            added: added.clone(),
            stop: stop.clone(),
            after,
            most: STANDBY_MAX.max(after),
            entries: HashMap::new(),
            timers: BinaryHeap::new(),
        };
        std::thread::Builder::new()
            .name("nc-standby".into())
            .spawn(move || reactor.run())?;
        Ok(Standby {
            wake: tx,
            added,
            stop,
        })
    }

    pub(crate) fn add(&self, ch: DrivenChannel) {
        lock(&self.added).push(ch);
        self.nudge();
    }

    fn nudge(&self) {
        // A full socket buffer means a wake-up is already pending.
        let _ = (&self.wake).write(&[1]);
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.nudge();
    }
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Watched once: the next arrival is reported.
    Armed,
    /// Something arrived; the application has until the deadline to look.
    Pending { looks: u64 },
    /// The application had it: not watched until the deadline.
    Resting,
    /// The standby reads it at each arrival until the application looks again.
    SteppedIn { since: Instant, looks: u64 },
    /// Closed from this side: read to its end by `until`.
    Draining { until: Instant },
}

struct Entry {
    ch: DrivenChannel,
    state: State,
    patience: Duration,
    rest: Duration,
    frames_seen: u64,
    deadline: Option<Instant>,
}

struct Reactor {
    ep: Epoll,
    wake: UnixStream,
    added: Arc<Mutex<Vec<DrivenChannel>>>,
    stop: Arc<AtomicBool>,
    after: Duration,
    most: Duration,
    entries: HashMap<u64, Entry>,
    /// Deadlines, earliest first; an entry whose deadline moved since is skipped.
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
}

impl Reactor {
    fn run(&mut self) {
        let mut ready: Vec<Ready> = Vec::new();
        loop {
            self.take_added();
            if self.stop.load(Ordering::Acquire) && self.entries.is_empty() {
                return;
            }
            let timeout = self.timers.peek().map_or(-1, |Reverse((at, _))| {
                let left = at.saturating_duration_since(Instant::now());
                // Round up: a wait that ends a hair early only loops once more.
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            });
            if self.ep.ready(timeout, &mut ready).is_err() {
                std::thread::sleep(self.after);
            }
            for r in &ready {
                if r.token == WAKE {
                    let mut buf = [0u8; 64];
                    while matches!((&self.wake).read(&mut buf), Ok(n) if n > 0) {}
                } else {
                    self.arrival(r.token);
                }
            }
            self.expire(Instant::now());
        }
    }

    fn take_added(&mut self) {
        let added: Vec<DrivenChannel> = std::mem::take(&mut *lock(&self.added));
        for ch in added {
            let key = ch.key();
            if self.ep.watch_once(ch.fd(), key).is_err() {
                // Not watchable (closed already): nothing to stand by for.
                continue;
            }
            self.entries.insert(
                key,
                Entry {
                    ch,
                    state: State::Armed,
                    patience: self.after,
                    rest: self.after,
                    frames_seen: 0,
                    deadline: None,
                },
            );
        }
    }

    fn schedule(&mut self, key: u64, at: Instant) {
        if let Some(e) = self.entries.get_mut(&key) {
            e.deadline = Some(at);
            self.timers.push(Reverse((at, key)));
        }
    }

    fn remove(&mut self, key: u64) {
        if let Some(e) = self.entries.remove(&key) {
            let _ = self.ep.unwatch(e.ch.fd());
        }
    }

    fn rearm(&mut self, key: u64) {
        let Some(e) = self.entries.get(&key) else {
            return;
        };
        if self.ep.rearm(e.ch.fd(), key).is_err() {
            self.remove(key);
        }
    }

    fn arrival(&mut self, key: u64) {
        let now = Instant::now();
        let Some(e) = self.entries.get_mut(&key) else {
            return;
        };
        if !e.ch.is_alive() {
            self.remove(key);
            return;
        }
        if !e.ch.channel_open() {
            e.state = State::Draining {
                until: now + DRAIN_FOR,
            };
            self.drain_step(key, now);
            return;
        }
        match e.state {
            State::SteppedIn { since, looks } => {
                if e.ch.watched() > 0 || e.ch.looks() != looks {
                    // Back within two periods of the standby stepping in: the program was
                    // busy, not gone (redis-server answering 50 clients' pipelined GETs takes
                    // over 1 ms a turn), so it gets longer next time; each frame read here is
                    // a thread hand-off.
                    e.patience = if since.elapsed() <= e.patience * 2 {
                        (e.patience * 2).min(self.most)
                    } else {
                        self.after
                    };
                    e.state = State::Pending {
                        looks: e.ch.looks(),
                    };
                    let at = now + e.patience;
                    self.schedule(key, at);
                } else {
                    self.pump_here(key);
                }
            }
            _ => {
                e.state = State::Pending {
                    looks: e.ch.looks(),
                };
                let at = now + e.patience;
                self.schedule(key, at);
            }
        }
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&Reverse((at, key))) = self.timers.peek() {
            if at > now {
                return;
            }
            self.timers.pop();
            let due = self
                .entries
                .get(&key)
                .is_some_and(|e| e.deadline == Some(at));
            if due {
                if let Some(e) = self.entries.get_mut(&key) {
                    e.deadline = None;
                }
                self.timer(key, now);
            }
        }
    }

    fn timer(&mut self, key: u64, now: Instant) {
        let Some(e) = self.entries.get_mut(&key) else {
            return;
        };
        if !e.ch.is_alive() {
            self.remove(key);
            return;
        }
        match e.state {
            State::Pending { looks } => {
                if e.ch.watched() > 0 || e.ch.looks() != looks {
                    // The application has it. Rest, longer while nothing moves, so that a
                    // channel every wait includes (a proxy's reactor task, a server's event
                    // loop) costs a few wake-ups a second.
                    let frames = e.ch.frames_in();
                    let cap = if frames == e.frames_seen {
                        IDLE_WAIT_MAX
                    } else {
                        self.most
                    };
                    e.frames_seen = frames;
                    e.rest = (e.rest * 2).clamp(e.patience, cap.max(e.patience));
                    e.state = State::Resting;
                    let at = now + e.rest;
                    self.schedule(key, at);
                } else {
                    // Nobody read for a whole patience and nobody waits: read here until
                    // somebody does. (A new channel starts here: no wait includes it until
                    // the program's next look at its set, which what this reads wakes.)
                    e.rest = e.patience;
                    e.state = State::SteppedIn {
                        since: now,
                        looks: e.ch.looks(),
                    };
                    self.pump_here(key);
                }
            }
            State::Resting => {
                e.state = State::Armed;
                self.rearm(key);
            }
            State::Draining { .. } => self.drain_step(key, now),
            State::Armed | State::SteppedIn { .. } => {}
        }
    }

    fn pump_here(&mut self, key: u64) {
        let Some(e) = self.entries.get_mut(&key) else {
            return;
        };
        match e.ch.pump_standby() {
            Pumped::Closed => self.remove(key),
            Pumped::Busy => {
                // An application thread is reading it right now: it is back.
                e.state = State::Pending {
                    looks: e.ch.looks(),
                };
                let at = Instant::now() + e.patience;
                self.schedule(key, at);
            }
            Pumped::Frames(_) => self.rearm(key),
        }
    }

    fn drain_step(&mut self, key: u64, now: Instant) {
        let Some(e) = self.entries.get_mut(&key) else {
            return;
        };
        let State::Draining { until } = e.state else {
            return;
        };
        match e.ch.pump_standby() {
            Pumped::Closed => self.remove(key),
            _ if now >= until => {
                e.ch.give_up("channel closed");
                self.remove(key);
            }
            _ => self.schedule(key, now + DRAIN_STEP),
        }
    }
}
