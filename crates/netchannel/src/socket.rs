//! Virtual sockets: what the application holds. A socket's bytes may travel on any channel
//! of its class; the receiver puts them back in order ([`crate::reorder`]) and tells the
//! sender how much it has consumed (CREDIT), so a socket never has more than its window in
//! flight and a slow reader never stalls a channel that other sockets share.

use crate::channel::Inline;
use crate::error::Error;
use crate::reorder::Reassembly;
use crate::sched::{self, Choice, Cursor, Policy};
use crate::session::Session;
use crate::wire::{Class, FrameType, Header, RstReason, flags};
use bytes::Bytes;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of our locks leaves plain data behind; keep going.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(g).unwrap_or_else(|p| p.into_inner())
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OpenState {
    Opening,
    Open,
}

pub(crate) struct Rx {
    pub re: Reassembly,
    /// `consumed` as last reported to the peer.
    pub advertised: u64,
    pub error: Option<Error>,
    pub reader_waiting: bool,
    pub waker: Option<std::task::Waker>,
}

/// A DATA frame sent and not yet known to be consumed by the peer's application, kept so it
/// can be re-sent if the channel it went on dies.
pub(crate) struct Sent {
    pub seq: u64,
    pub data: Bytes,
    pub eom: bool,
    /// Id of the channel carrying it.
    pub via: u64,
}

pub(crate) struct Tx {
    pub state: OpenState,
    /// Frames the peer has not reported consumed, in stream order. The window bounds them:
    /// a sender never has more than `peer_window` bytes past `peer_consumed`.
    pub unacked: VecDeque<Sent>,
    pub next_seq: u64,
    pub peer_consumed: u64,
    pub peer_window: u64,
    pub fin_sent: bool,
    pub error: Option<Error>,
    pub cursor: Cursor,
    pub writer_waiting: bool,
    pub waker: Option<std::task::Waker>,
}

impl Tx {
    /// Err if nothing more may be written: the socket failed or its sending side was shut.
    pub fn check_writable(&self) -> io::Result<()> {
        if let Some(e) = &self.error {
            return Err(e.clone().into());
        }
        if self.fin_sent {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "write after shutdown of the sending side",
            ));
        }
        Ok(())
    }

    /// Bytes the peer's window still allows.
    pub fn credit(&self) -> u64 {
        (self.peer_consumed + self.peer_window).saturating_sub(self.next_seq)
    }

    /// Takes `n` bytes of the stream: their offset.
    pub fn take_seq(&mut self, n: usize) -> u64 {
        let seq = self.next_seq;
        self.next_seq += n as u64;
        seq
    }

    /// Keeps a frame until the peer reports it consumed. Two writers may race between taking
    /// offsets and sending, so the frame goes in at its place in stream order.
    pub fn retain(&mut self, sent: Sent) {
        let at = self
            .unacked
            .iter()
            .rposition(|s| s.seq < sent.seq)
            .map_or(0, |i| i + 1);
        self.unacked.insert(at, sent);
    }

    /// The peer has consumed the stream up to `consumed`: drop what it can no longer need.
    pub fn acknowledge(&mut self, consumed: u64) {
        self.peer_consumed = self.peer_consumed.max(consumed);
        while let Some(f) = self.unacked.front() {
            if f.seq + f.data.len() as u64 > self.peer_consumed {
                break;
            }
            self.unacked.pop_front();
        }
    }

    /// Everything sent, FIN included, has been consumed by the peer.
    pub fn all_acknowledged(&self) -> bool {
        self.unacked.is_empty() && self.peer_consumed == self.next_seq
    }
}

pub(crate) struct VsShared {
    pub local: u16,
    pub remote: u16,
    pub class: Class,
    pub policy: Policy,
    pub hash: u64,
    pub rx: Mutex<Rx>,
    pub rx_cv: Condvar,
    pub tx: Mutex<Tx>,
    pub tx_cv: Condvar,
    /// The application dropped the socket while sent data was unacknowledged: it stays in
    /// the session's table (as TCP keeps sending after close(2)) until the peer has consumed
    /// everything, so a channel dying now still cannot lose those bytes.
    pub lingering: std::sync::atomic::AtomicBool,
    /// The receive window leased from the endpoint's budget for a socket a peer opened;
    /// given back when the last reference to the socket goes.
    lease: Option<crate::limits::Lease>,
}

impl VsShared {
    /// Bounds what the socket's receive side may hold (buffers and bookkeeping charged as
    /// they are): the session's `Config::receive_share`. Set before anything arrives.
    pub fn holding_at_most(mut self, share: u64) -> VsShared {
        let rx = self.rx.get_mut().unwrap_or_else(|p| p.into_inner());
        rx.re = Reassembly::with_share(rx.re.window(), share);
        self
    }

    /// Gives the socket its lease; what its receive side holds is then counted in the
    /// endpoint's charge too.
    pub fn leased(mut self, lease: Option<crate::limits::Lease>) -> VsShared {
        if let Some(l) = &lease {
            let rx = self.rx.get_mut().unwrap_or_else(|p| p.into_inner());
            let re = std::mem::replace(&mut rx.re, Reassembly::new(0));
            rx.re = re.metered(l.meter());
        }
        self.lease = lease;
        self
    }

    pub fn new(
        local: u16,
        remote: u16,
        class: Class,
        policy: Policy,
        window: u64,
        state: OpenState,
        peer_window: u64,
    ) -> VsShared {
        VsShared {
            local,
            remote,
            class,
            policy,
            hash: sched::port_hash(local, remote),
            rx: Mutex::new(Rx {
                re: Reassembly::new(window),
                advertised: 0,
                error: None,
                reader_waiting: false,
                waker: None,
            }),
            rx_cv: Condvar::new(),
            lingering: std::sync::atomic::AtomicBool::new(false),
            lease: None,
            tx: Mutex::new(Tx {
                state,
                unacked: VecDeque::new(),
                next_seq: 0,
                peer_consumed: 0,
                peer_window,
                fin_sent: false,
                error: None,
                cursor: Cursor::default(),
                writer_waiting: false,
                waker: None,
            }),
            tx_cv: Condvar::new(),
        }
    }

    /// Waits on the send side until `done` gives a value (Some), an error arrives (Err), or
    /// `deadline` passes (None).
    pub fn wait_tx<T>(
        &self,
        deadline: std::time::Instant,
        mut done: impl FnMut(&Tx) -> Option<T>,
    ) -> io::Result<Option<T>> {
        let mut tx = lock(&self.tx);
        loop {
            if let Some(v) = done(&tx) {
                return Ok(Some(v));
            }
            if let Some(e) = &tx.error {
                return Err(e.clone().into());
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            tx.writer_waiting = true;
            tx = self
                .tx_cv
                .wait_timeout(tx, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            tx.writer_waiting = false;
        }
    }

    pub fn wake_rx(&self, rx: &mut Rx) {
        if rx.reader_waiting {
            self.rx_cv.notify_all();
        }
        if let Some(w) = rx.waker.take() {
            w.wake();
        }
    }

    pub fn wake_tx(&self, tx: &mut Tx) {
        if tx.writer_waiting {
            self.tx_cv.notify_all();
        }
        if let Some(w) = tx.waker.take() {
            w.wake();
        }
    }

    /// Fails the socket. A receive side that already holds every byte up to FIN is left
    /// alone: nothing it will read was lost.
    pub fn fail(&self, e: Error) {
        // Both halves change under both locks (always taken rx first), so no thread sees the
        // read side failed while its write still succeeds.
        let mut rx = lock(&self.rx);
        let mut tx = lock(&self.tx);
        if rx.error.is_none() && !rx.re.complete() {
            rx.error = Some(e.clone());
        }
        if tx.error.is_none() {
            tx.error = Some(e);
        }
        self.wake_rx(&mut rx);
        self.wake_tx(&mut tx);
    }
}

/// A virtual socket. `Read`/`Write` are implemented for `VSocket` and `&VSocket`, so one
/// thread can read while another writes.
pub struct VSocket {
    pub(crate) shared: Arc<VsShared>,
    pub(crate) session: Arc<Session>,
}

impl std::fmt::Debug for VSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VSocket")
            .field("local_port", &self.shared.local)
            .field("peer", &self.session.peer)
            .field("peer_port", &self.shared.remote)
            .field("class", &self.shared.class)
            .finish()
    }
}

enum Src<'a> {
    Slice(&'a [u8]),
    Owned(Bytes),
}

impl Src<'_> {
    fn len(&self) -> usize {
        match self {
            Src::Slice(s) => s.len(),
            Src::Owned(b) => b.len(),
        }
    }

    /// A frame's payload, owned: the sender keeps it until the peer has consumed it (the
    /// one copy a borrowed write costs; a queued frame needed it anyway).
    fn part(&self, from: usize, to: usize) -> Bytes {
        match self {
            Src::Slice(s) => Bytes::copy_from_slice(&s[from..to]),
            Src::Owned(b) => b.slice(from..to),
        }
    }
}

impl VSocket {
    pub fn local_port(&self) -> u16 {
        self.shared.local
    }

    pub fn peer_port(&self) -> u16 {
        self.shared.remote
    }

    pub fn peer_addr(&self) -> SocketAddr {
        self.session.peer
    }

    pub fn class(&self) -> Class {
        self.shared.class
    }

    /// Sends all of `data` as one message (the last frame carries EOM), blocking for credit.
    pub fn send_message(&self, data: &[u8]) -> io::Result<()> {
        self.send(Src::Slice(data), true).map(|_| ())
    }

    /// Sends an owned buffer without copying it in user space.
    pub fn write_owned(&self, data: Bytes) -> io::Result<()> {
        self.send(Src::Owned(data), false).map(|_| ())
    }

    /// Waits for `n` bytes of send credit, assigns them a stream offset.
    fn reserve(&self, want: usize) -> io::Result<(u64, usize)> {
        let mut tx = lock(&self.shared.tx);
        loop {
            tx.check_writable()?;
            let avail = tx.credit();
            if avail > 0 {
                let n = want.min(avail as usize);
                return Ok((tx.take_seq(n), n));
            }
            tx.writer_waiting = true;
            tx = wait(&self.shared.tx_cv, tx);
            tx.writer_waiting = false;
        }
    }

    /// Picks the channel for `len` bytes, waiting while every channel is at its limit.
    fn pick(&self, len: u64) -> io::Result<usize> {
        loop {
            let choice = self.choose(&mut lock(&self.shared.tx), len);
            match choice {
                Choice::Channel(i) => return Ok(self.session.class_base(self.shared.class) + i),
                Choice::NoChannel => return Err(self.no_channel()),
                Choice::Full => self.session.wait_for_space(self.shared.class),
            }
        }
    }

    /// The scheduler's choice among this socket's class for `len` bytes.
    pub(crate) fn choose(&self, tx: &mut Tx, len: u64) -> Choice {
        let loads = self.session.loads(self.shared.class);
        sched::choose(
            self.shared.policy,
            self.session.cfg.channel_limit,
            &mut tx.cursor,
            &loads,
            self.shared.hash,
            len,
        )
    }

    /// Fails the socket because its class has no live channel; the error to return.
    pub(crate) fn no_channel(&self) -> io::Error {
        let e = self.session.no_channel(self.shared.class);
        self.shared.fail(e.clone());
        e.into()
    }

    /// Sends one DATA frame on channel `ch` and keeps it until the peer has consumed it. A
    /// channel that fails is closed, and its frames go out again on a live channel of the
    /// class; only when none is left does the socket fail.
    pub(crate) fn send_data(
        &self,
        ch: usize,
        seq: u64,
        payload: Bytes,
        eom: bool,
        inline: Inline,
    ) -> io::Result<()> {
        let lat = if self.shared.class == Class::Latency {
            flags::LAT
        } else {
            0
        };
        let h = Header {
            kind: FrameType::Data,
            flags: lat | if eom { flags::EOM } else { 0 },
            src_port: self.shared.local,
            dst_port: self.shared.remote,
            len: payload.len() as u32,
            credit: 0,
            seq,
        };
        let channel = self.session.channel(ch);
        lock(&self.shared.tx).retain(Sent {
            seq,
            data: payload.clone(),
            eom,
            via: channel.id,
        });
        let Err(e) = channel.send_with(&h, payload, inline) else {
            return Ok(());
        };
        // The channel died under us: close it (which re-sends what it carried), then move
        // this frame if the close ran before the frame was kept.
        self.session
            .channel_failed(&channel, &format!("write failed: {e}"));
        self.session.resend(&self.shared, channel.id);
        match &lock(&self.shared.tx).error {
            Some(err) => Err(err.clone().into()),
            None => Ok(()),
        }
    }

    fn send(&self, src: Src<'_>, eom: bool) -> io::Result<usize> {
        let total = src.len();
        let max = self.session.send_frame as usize;
        let mut off = 0;
        while off < total {
            let (seq, n) = self.reserve(max.min(total - off))?;
            let ch = self.pick(n as u64)?;
            let last = off + n == total;
            self.send_data(ch, seq, src.part(off, off + n), eom && last, Inline::Wait)?;
            off += n;
        }
        Ok(total)
    }

    /// Sends CREDIT when the reader has consumed a quarter window since the last one, and
    /// once at EOF: that final one tells the sender everything arrived, so it can drop the
    /// copies it keeps for re-sending.
    pub(crate) fn credit_due(&self, rx: &mut Rx) -> Option<u64> {
        let consumed = rx.re.consumed();
        let step = consumed - rx.advertised >= rx.re.window() / 4;
        let last = rx.re.at_eof() && consumed > rx.advertised;
        (step || last).then(|| {
            rx.advertised = consumed;
            consumed
        })
    }

    pub(crate) fn send_credit(&self, consumed: u64) {
        let window = self.session.cfg.window;
        let f = Header::control(
            FrameType::Credit,
            self.shared.local,
            self.shared.remote,
            window,
            consumed,
        );
        self.session.send_control(&self.shared, f);
    }

    /// Blocks until something is readable (or EOF or an error) and runs `take` on it.
    fn read_with<T>(&self, mut take: impl FnMut(&mut Rx) -> Option<T>, eof: T) -> io::Result<T> {
        let mut rx = lock(&self.shared.rx);
        loop {
            if let Some(v) = take(&mut rx) {
                let credit = self.credit_due(&mut rx);
                drop(rx);
                if let Some(c) = credit {
                    self.send_credit(c);
                }
                return Ok(v);
            }
            if rx.re.at_eof() {
                let credit = self.credit_due(&mut rx);
                drop(rx);
                if let Some(c) = credit {
                    self.send_credit(c);
                }
                return Ok(eof);
            }
            if let Some(e) = &rx.error {
                return Err(e.clone().into());
            }
            rx.reader_waiting = true;
            rx = wait(&self.shared.rx_cv, rx);
            rx.reader_waiting = false;
        }
    }

    /// The next in-order piece of the stream as it arrived (no copy); None at EOF.
    pub fn read_chunk(&self) -> io::Result<Option<Bytes>> {
        self.read_with(|rx| rx.re.read_chunk().map(|(b, _)| Some(b)), None)
    }

    /// Reads one whole message (sent with [`VSocket::send_message`]) into `into`, replacing
    /// its contents; Ok(false) at EOF.
    pub fn recv_message(&self, into: &mut Vec<u8>) -> io::Result<bool> {
        into.clear();
        self.read_with(
            |rx| {
                if !rx.re.has_message() {
                    return None;
                }
                while let Some((b, eom)) = rx.re.read_chunk() {
                    into.extend_from_slice(&b);
                    if eom {
                        break;
                    }
                }
                Some(true)
            },
            false,
        )
    }

    /// Ends the sending side: FIN carries the final length, so the peer reports EOF only once
    /// every byte has arrived, whichever channel carried it.
    pub fn shutdown_write(&self) -> io::Result<()> {
        let mut tx = lock(&self.shared.tx);
        if tx.fin_sent {
            return Ok(());
        }
        if let Some(e) = &tx.error {
            return Err(e.clone().into());
        }
        tx.fin_sent = true;
        let seq = tx.next_seq;
        drop(tx);
        let f = Header::control(
            FrameType::Fin,
            self.shared.local,
            self.shared.remote,
            0,
            seq,
        );
        if self.session.send_control(&self.shared, f) {
            Ok(())
        } else {
            Err(self.session.no_channel(self.shared.class).into())
        }
    }

    /// Aborts the socket, as a TCP reset does: the peer's socket fails with
    /// [`Error::Reset`] carrying `reason`, and this one fails with the same.
    pub fn abort(&self, reason: RstReason) {
        let f = Header::control(
            FrameType::Rst,
            self.shared.local,
            self.shared.remote,
            reason as u32,
            0,
        );
        if lock(&self.shared.tx).error.is_none() {
            self.session.send_control(&self.shared, f);
        }
        self.shared.fail(Error::Reset {
            peer: self.session.peer,
            port: self.shared.remote,
            reason,
        });
    }

    /// Bytes sent that the peer's application has not read yet.
    pub fn unacknowledged(&self) -> u64 {
        let tx = lock(&self.shared.tx);
        tx.next_seq - tx.peer_consumed
    }

    /// Waits until the peer's application has read everything sent (or `timeout`).
    pub fn wait_acknowledged(&self, timeout: Duration) -> io::Result<bool> {
        // CREDIT comes only every quarter window; a small remainder is never reported, so
        // "acknowledged" means within one credit step.
        let slack = (u64::from(self.session.cfg.window) / 4).max(1);
        let deadline = std::time::Instant::now() + timeout;
        let done = self.shared.wait_tx(deadline, |tx| {
            (tx.next_seq - tx.peer_consumed < slack).then_some(())
        })?;
        Ok(done.is_some())
    }
}

impl Read for &VSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.read_with(
            |rx| match rx.re.read(buf) {
                0 => None,
                n => Some(n),
            },
            0,
        )
    }
}

impl Read for VSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Write for &VSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(Src::Slice(buf), false)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for VSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for VSocket {
    /// Like close(2) on TCP: FIN if not sent yet; RST instead if received data was left
    /// unread (the peer must not believe it was consumed).
    fn drop(&mut self) {
        let unread = {
            let rx = lock(&self.shared.rx);
            rx.re.held() > 0 && rx.error.is_none()
        };
        let healthy = lock(&self.shared.tx).error.is_none();
        if healthy {
            if unread {
                let f = Header::control(
                    FrameType::Rst,
                    self.shared.local,
                    self.shared.remote,
                    RstReason::Aborted as u32,
                    0,
                );
                self.session.send_control(&self.shared, f);
            } else {
                // Everything that arrived was read and nothing more will be: the peer hears
                // so now (as TCP acknowledges what it received before close). Without this a
                // reader that closes before reading EOF leaves its last bytes unreported, and
                // the peer's socket lingers for ever (HTTP with `Connection: close` did).
                let last = {
                    let mut rx = lock(&self.shared.rx);
                    let consumed = rx.re.consumed();
                    (consumed > rx.advertised).then(|| {
                        rx.advertised = consumed;
                        consumed
                    })
                };
                if let Some(c) = last {
                    self.send_credit(c);
                }
                let _ = self.shutdown_write();
                let tx = lock(&self.shared.tx);
                if !tx.all_acknowledged() && tx.error.is_none() {
                    self.shared.lingering.store(true, Ordering::Release);
                    // The session forgets it when the last CREDIT (or a failure) comes.
                    return;
                }
            }
        }
        self.session.forget(&self.shared);
    }
}

/// Connections waiting to be accepted on one virtual port.
pub(crate) struct ListenQueue {
    pub port: u16,
    pub backlog: usize,
    pub queue: Mutex<(VecDeque<VSocket>, bool)>,
    pub cv: Condvar,
    /// Woken (once) when a connection is queued: [`VListener::poll_accept`].
    pub waker: Mutex<Option<std::task::Waker>>,
}

/// A bound virtual port.
pub struct VListener {
    pub(crate) queue: Arc<ListenQueue>,
    pub(crate) listeners: Arc<crate::session::Listeners>,
}

impl VListener {
    pub fn port(&self) -> u16 {
        self.queue.port
    }

    /// Waits for the next virtual connection.
    pub fn accept(&self) -> io::Result<VSocket> {
        self.accept_until(None)
    }

    /// Like accept, but gives up after `timeout` with `TimedOut`.
    pub fn accept_timeout(&self, timeout: Duration) -> io::Result<VSocket> {
        self.accept_until(Some(std::time::Instant::now() + timeout))
    }

    fn accept_until(&self, deadline: Option<std::time::Instant>) -> io::Result<VSocket> {
        let mut q = lock(&self.queue.queue);
        loop {
            if let Some(s) = q.0.pop_front() {
                return Ok(s);
            }
            if q.1 {
                return Err(Error::Closed.into());
            }
            q = match deadline {
                None => wait(&self.queue.cv, q),
                Some(d) => {
                    let now = std::time::Instant::now();
                    if now >= d {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("no connection on virtual port {} in time", self.queue.port),
                        ));
                    }
                    self.queue
                        .cv
                        .wait_timeout(q, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
    }
}

impl Drop for VListener {
    fn drop(&mut self) {
        self.listeners.unbind(self.queue.port);
        let mut q = lock(&self.queue.queue);
        q.1 = true;
        // Pending connections are dropped, which resets them like an unaccepted TCP backlog.
        q.0.clear();
        self.queue.cv.notify_all();
        drop(q);
        if let Some(w) = lock(&self.queue.waker).take() {
            w.wake();
        }
    }
}
