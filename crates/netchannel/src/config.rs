//! Endpoint and socket options.

use crate::sched::{CHANNEL_LIMIT, Policy, WORKER_LIMIT};
use crate::wire::Class;
use std::time::Duration;

/// How an endpoint shapes its sessions. The accepting side uses the connecting side's channel
/// counts (sent in HELLO) and its own values for everything else.
#[derive(Debug, Clone)]
pub struct Config {
    /// Throughput-class channels per session (≥ 1).
    pub throughput_channels: u16,
    /// Latency-class channels per session (0 = latency sockets share nothing and are refused).
    pub latency_channels: u16,
    /// Largest DATA payload this side sends (the peer's limit is honoured too). Each frame
    /// costs a header read and a wake-up at the receiver, so large frames keep a channel's
    /// per-byte cost near plain TCP's (measured in BENCHMARKS.md: 1 MiB frames 0.92× TCP per
    /// core, 256 KiB 0.73×, 64 KiB 0.66× on this VM). NetChannel's in-kernel PDUs are 62 KB;
    /// in user space every frame is a system call.
    pub max_frame: u32,
    /// Receive window of each virtual socket: the most bytes a peer may send beyond what the
    /// app has read. Bounds the memory one socket can hold.
    pub window: u32,
    /// Scheduler policy of throughput sockets unless a socket says otherwise.
    pub policy: Policy,
    /// Bytes queued on a channel before the scheduler skips it.
    pub channel_limit: u64,
    /// Receive copy workers, shared by all channels (0 = each channel's I/O thread copies its
    /// own bytes).
    pub copy_workers: usize,
    /// Send copy workers per throughput channel (0 = the channel's writer copies). Each
    /// write(2)s payloads of 64 KiB or more into its pipe and the writer splices them out, so
    /// one channel's user→kernel copies run on several cores.
    pub send_copy_workers: usize,
    /// Bytes pending at a copy worker before it is skipped.
    pub worker_limit: u64,
    /// Pipe size per copy worker (≤ /proc/sys/fs/pipe-max-size).
    pub worker_pipe: usize,
    /// CPUs for throughput channels' I/O threads, given out round-robin (empty = unpinned).
    pub io_cpus: Vec<u32>,
    /// CPUs for latency channels' I/O threads.
    pub latency_cpus: Vec<u32>,
    /// CPUs for copy workers.
    pub copy_cpus: Vec<u32>,
    /// Throughput-channel senders write frames themselves when the channel is idle, instead
    /// of handing them to the channel's I/O thread (saves a hand-off; the app thread then
    /// does the kernel copy). Latency channels always do this.
    pub inline_send: bool,
    /// Async writers ([`crate::AsyncVSocket`], the `poll_write` family) write inline too,
    /// where the channel's class does (`inline_send`, or the latency class): what the
    /// channel's socket takes at once, never waiting for room (MSG_DONTWAIT); the rest is
    /// queued ahead of everything for the channel's writer. Saves a thread hand-off per frame
    /// and never holds the caller's thread on a peer that stops reading. Off: async writers
    /// always queue.
    pub async_inline_send: bool,
    /// TCP_NOTSENT_LOWAT of throughput channels (None = kernel default).
    pub throughput_notsent_lowat: Option<u32>,
    /// TCP_NOTSENT_LOWAT of latency channels: a short kernel queue keeps their frames fresh.
    pub latency_notsent_lowat: u32,
    /// SO_PRIORITY of latency channels (selects a prio qdisc band on real NICs).
    pub latency_priority: u32,
    /// Latency I/O threads spin this long for data before sleeping, and set SO_BUSY_POLL.
    pub latency_busy_poll: Duration,
    /// Run latency I/O threads under SCHED_FIFO at this priority (the paper's high-priority
    /// workqueue; needs CAP_SYS_NICE, silently skipped without it). None = normal threads.
    pub latency_realtime: Option<i32>,
    /// Most virtual sockets one session may hold (OPENs beyond are reset).
    pub max_sockets: usize,
    /// Most bytes a peer may make this side buffer for one session: open sockets × window.
    /// With the window this caps the sockets a session may open, so a hostile peer that
    /// opens sockets and fills their windows is bounded.
    pub session_memory: u64,
    /// Connections waiting in an accept queue per listening virtual port.
    pub accept_backlog: usize,
    /// How long a new channel may take to send its whole HELLO (a deadline for all of it, not
    /// for each read: one byte every few seconds does not hold a place longer), how long a
    /// connecting side waits for the whole answer, and how long a link may take to assemble.
    pub hello_timeout: Duration,
    /// Channel connections in handshake at once. A new one past it closes the oldest silent
    /// connection (no whole HELLO yet) of the prefix holding the most; only when none is
    /// silent is the new one closed (HELLO floods).
    pub max_handshakes: usize,
    /// Links (sessions) half-assembled at once; a new link past it closes the oldest
    /// half-built link of the prefix holding the most.
    pub max_pending_links: usize,
    /// Links half-assembled at once from one peer address, so one peer cannot hold every
    /// place of `max_pending_links` (and of `max_handshakes`) by keeping single-HELLO links
    /// topped up.
    pub max_pending_links_per_peer: usize,
    /// Channel connections in handshake at once from one peer address.
    pub max_handshakes_per_peer: usize,
    /// Sessions accepted from peers and alive at once; a link completed beyond it is closed.
    pub max_sessions: usize,
    /// Sessions accepted from one peer address and alive at once.
    pub max_sessions_per_peer: usize,
    /// The source prefix peers are also counted by (bits of an IPv4 address): the caps
    /// `*_per_prefix` hold for all addresses of one such prefix together, so a peer with many
    /// addresses (a /24 of loopback, a cloud subnet) does not get many addresses' places.
    pub peer_prefix_v4: u8,
    /// The same for IPv6 (bits; a /64 is what one host or one customer commonly holds).
    pub peer_prefix_v6: u8,
    /// A wider IPv6 prefix the same caps also hold for (bits; a /48 is one customer's site:
    /// a /56 holds 256 /64s, which counted only as /64s had 256 shares). Equal to
    /// `peer_prefix_v6` (or larger): counted at that one width only.
    pub peer_prefix_v6_wide: u8,
    /// Channel connections in handshake at once from one source prefix (a share of
    /// `max_handshakes`: 1/4 by default, one link of `max_accepted_channels` dialled at once).
    /// A prefix at it, or a full table, makes room for a new dial by closing its oldest
    /// silent connection (of the prefix holding the most), so re-dialled silent connections
    /// cannot keep every place.
    pub max_handshakes_per_prefix: usize,
    /// Links half-assembled at once from one source prefix (1/8 of `max_pending_links` by
    /// default); a new link past it closes the prefix's oldest half-built one.
    pub max_pending_links_per_prefix: usize,
    /// Sessions accepted from one source prefix and alive at once (a small share of
    /// `max_sessions`, 1/16 by default).
    pub max_sessions_per_prefix: usize,
    /// Places of `max_sessions` kept for prefixes that had a session accepted within
    /// `served_for` (at most a quarter of `max_sessions` is kept, whatever this says): past
    /// `max_sessions` less those places, only such a prefix
    /// holding fewer than `reserved_sessions_per_prefix` gets in, so peers already served
    /// come back even while new prefixes have taken every other place.
    pub session_reserve: usize,
    /// Sessions a recently served prefix may hold and still take a reserved place.
    pub reserved_sessions_per_prefix: usize,
    /// How long a prefix counts as served after its last accepted session began.
    pub served_for: Duration,
    /// Channels of accepted sessions alive at once, all peers together: each costs this side
    /// two file descriptors and its I/O threads, so this bounds them whatever the peers ask.
    pub max_channels: usize,
    /// The same for one source prefix, so one prefix cannot take every channel.
    pub max_channels_per_prefix: usize,
    /// Receive memory peers may make this side hold, all together: each virtual socket a peer
    /// opens leases one `window` (the most it may buffer here) until it is gone; an OPEN
    /// beyond is reset (TooManySockets) and the refusal names this cap.
    pub max_receive_memory: u64,
    /// The same for one source prefix, so one prefix cannot lease all of it.
    pub max_receive_memory_per_prefix: u64,
    /// Most channels an accepted link may have (the connecting side chooses the count in its
    /// HELLO; each channel costs this side two threads and two file descriptors).
    pub max_accepted_channels: u16,
    /// File descriptors kept free for everything else the process does: a link whose
    /// channels would leave fewer than this below RLIMIT_NOFILE is refused, and the
    /// refusal names the limit.
    pub fd_reserve: usize,
    /// Control frames (replies: RST, OPEN_ACK, CREDIT, FIN) queued on one channel and not yet
    /// written. A peer that makes this side reply and never reads the replies reaches it and
    /// has the channel closed, instead of growing this side's memory without bound (about
    /// 100 bytes a frame). An honest peer stays far below: while a channel is stalled, each
    /// socket queues at most about eight (a CREDIT per quarter window it can be sent before
    /// the peer stops, OPEN_ACK, FIN, RST), so the default covers 2,048 busy sockets on one
    /// channel.
    pub max_queued_control: usize,
    /// A channel whose peer stops answering (a black-holed path, a host gone without a FIN or
    /// RST) is declared dead after this long, so its frames are re-sent and it is re-dialed
    /// instead of TCP retransmitting for ~15 minutes (TCP_USER_TIMEOUT and keepalive on every
    /// channel). None: the kernel's defaults.
    pub dead_channel_timeout: Option<Duration>,
    /// How often the connecting side tries to re-open a session's dead channels (None: never;
    /// the session then goes on with the channels it has left).
    pub reconnect_interval: Option<Duration>,
    /// The application's threads read the channels when they wait ([`crate::drive`]): no
    /// reader thread per channel, no hand-off per arrival. The application must wait through
    /// the [`crate::Driver`] (the preload library does); a standby thread per channel reads
    /// when none has for a while. Off: each channel has its reader thread.
    pub app_driven: bool,
    /// With `app_driven`: how long no application thread may have read a channel or waited
    /// on it before its standby thread reads it ([`crate::drive`]).
    pub standby_after: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            throughput_channels: 2,
            latency_channels: 1,
            max_frame: 1 << 20,
            window: 8 << 20,
            policy: Policy::default(),
            channel_limit: CHANNEL_LIMIT,
            copy_workers: 0,
            send_copy_workers: 0,
            worker_limit: WORKER_LIMIT,
            worker_pipe: 1 << 20,
            io_cpus: Vec::new(),
            latency_cpus: Vec::new(),
            copy_cpus: Vec::new(),
            inline_send: false,
            async_inline_send: false,
            throughput_notsent_lowat: None,
            latency_notsent_lowat: 16 * 1024,
            latency_priority: 6,
            latency_busy_poll: Duration::ZERO,
            latency_realtime: None,
            max_sockets: 4096,
            session_memory: 1 << 30,
            accept_backlog: 128,
            hello_timeout: Duration::from_secs(5),
            max_handshakes: 64,
            max_pending_links: 64,
            max_pending_links_per_peer: 8,
            max_handshakes_per_peer: 16,
            max_sessions: 256,
            max_sessions_per_peer: 16,
            peer_prefix_v4: 24,
            peer_prefix_v6: 64,
            peer_prefix_v6_wide: 48,
            max_handshakes_per_prefix: 16,
            max_pending_links_per_prefix: 8,
            max_sessions_per_prefix: 16,
            session_reserve: 64,
            reserved_sessions_per_prefix: 4,
            served_for: Duration::from_secs(600),
            max_channels: 1024,
            max_channels_per_prefix: 256,
            max_receive_memory: 8 << 30,
            max_receive_memory_per_prefix: 2 << 30,
            max_accepted_channels: 16,
            fd_reserve: 64,
            max_queued_control: 16384,
            dead_channel_timeout: Some(Duration::from_secs(10)),
            reconnect_interval: Some(Duration::from_millis(200)),
            app_driven: false,
            standby_after: crate::drive::STANDBY,
        }
    }
}

impl Config {
    /// What one virtual socket's receive side may hold here, buffers and bookkeeping
    /// charged as they are ([`crate::reorder::share`]): what each socket a peer opens leases
    /// from `session_memory`, `max_receive_memory_per_prefix` and `max_receive_memory`.
    pub fn receive_share(&self) -> u64 {
        crate::reorder::share(u64::from(self.window), u64::from(self.max_frame))
    }
}

/// Per-socket options.
#[derive(Debug, Clone, Copy, Default)]
pub struct SocketOptions {
    pub class: Option<Class>,
    /// Like NetChannel, a nonzero SO_PRIORITY-style value selects the latency class when
    /// `class` is not given.
    pub priority: u32,
    /// Overrides the endpoint's policy for this socket.
    pub policy: Option<Policy>,
}

impl SocketOptions {
    pub fn latency() -> SocketOptions {
        SocketOptions {
            class: Some(Class::Latency),
            ..SocketOptions::default()
        }
    }

    pub fn class(&self) -> Class {
        match self.class {
            Some(c) => c,
            None if self.priority != 0 => Class::Latency,
            None => Class::Throughput,
        }
    }
}
