//! The TCP benchmark server: one listening socket serves any number of tcp-stream and tcp-rr
//! tests from any number of clients at once (iperf3 serves one test at a time, neper one per
//! process). Each connection gets a thread; a control connection creates a test, data
//! connections join it by id, and the server's results go back over the control connection.
//!
//! Bounded by construction: at most `max_connections` connections at once (more are closed at
//! accept), `hello_timeout` (5 s by default) to say hello, hellos of at most `proto::MAX_FRAME` bytes, receive
//! buffers of at most 1 MiB per flow, at most 256 flows per test; a test whose client goes
//! silent is torn down `CONTROL_GRACE_S` after its announced duration.
//!
//! A client's numbers do not buy it the server: the buffers its tests need (request and
//! response sizes, read buffers, times flows) come out of one `max_memory` budget, and a test
//! that would pass it is rejected with both figures; a test whose flows have not all connected
//! `hello_timeout` after it was accepted, or whose flows have all been silent (no data
//! received, per TCP_INFO) for `flow_idle`, is ended, so a control connection that announces a
//! day and says nothing holds its slot for seconds, not the day.

use crate::report::{Kind, Role};
use crate::tcp::cost::CostMeter;
use crate::tcp::message::ServerTest;
use crate::tcp::proto::{
    CONTROL_GRACE_S, DeadlineReader, Finish, Hello, Reply, ServerFlow, TestKind, TestSpec,
    read_frame, read_preamble, write_frame, write_preamble,
};
use crate::tcp::{Engine, Io, Side, rr, stream, usable_cpus};
use crate::udp_echo::BenchError;
use netsteer_sock::cpu::{ThreadUsage, current_cpu, pin_current_thread};
use netsteer_sock::epoll::{Epoll, Interest};
use netsteer_sock::tcp::{tcp_info, wait_readable};
use std::collections::hash_map::RandomState;
use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// Data threads are pinned round-robin over these CPUs (none: not pinned).
    pub cpus: Vec<u32>,
    pub max_connections: usize,
    /// Time a new connection has to send its preamble and hello (`proto::HELLO_TIMEOUT`).
    pub hello_timeout: Duration,
    /// Stop after this long (None: until the stop flag is set).
    pub duration: Option<Duration>,
    /// Bytes of buffers all running tests may take together ([`DEFAULT_MAX_MEMORY`]).
    pub max_memory: u64,
    /// A test whose flows have all been silent this long is ended ([`FLOW_IDLE`]).
    pub flow_idle: Duration,
}

/// The default buffer budget of a server: 512 MiB.
pub const DEFAULT_MAX_MEMORY: u64 = 512 << 20;

/// A test whose flows have all received nothing for this long is ended: a real client sends
/// requests or stream data all the time.
pub const FLOW_IDLE: Duration = Duration::from_secs(20);

/// Buffer bytes a test's flows allocate at the server.
fn buffer_need(spec: &TestSpec) -> u64 {
    let per_flow = match spec.kind {
        TestKind::TcpRr => u64::from(spec.request_size) + u64::from(spec.response_size),
        TestKind::TcpStream => stream::read_len(spec) as u64,
    };
    u64::from(spec.flows) * per_flow
}

/// Buffer bytes reserved from the server's budget, given back when dropped.
struct Reservation<'a>(&'a AtomicU64, u64);

impl<'a> Reservation<'a> {
    fn take(used: &'a AtomicU64, need: u64, max: u64) -> Result<Reservation<'a>, String> {
        used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
            u.checked_add(need).filter(|&t| t <= max)
        })
        .map(|_| Reservation(used, need))
        .map_err(|u| {
            format!(
                "the test needs {} MiB of buffers; {} MiB of the server's {} MiB are in use \
                 (--max-memory)",
                need.div_ceil(1 << 20),
                u.div_ceil(1 << 20),
                max >> 20
            )
        })
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::AcqRel);
    }
}

/// What one data thread leaves behind.
struct FlowDone {
    flow: ServerFlow,
    usage: ThreadUsage,
    cpus: BTreeSet<u32>,
}

#[derive(Default)]
struct Slots {
    streams: Vec<Option<Arc<TcpStream>>>,
    done: Vec<Option<FlowDone>>,
}

struct Test {
    spec: TestSpec,
    seed_id: u64,
    stop: AtomicBool,
    slots: Mutex<Slots>,
    changed: Condvar,
    /// Engine `poll`: flow i is served by group i % len; empty with a thread per flow.
    groups: Vec<Group>,
    /// tcp-stream's copying receivers: each flow's SO_RCVLOWAT (`stream::low_water`).
    low_water: Option<u32>,
    /// Engine `poll`: reads per ready flow before the next one's turn
    /// (`stream::reads_per_turn`).
    reads_per_turn: u32,
}

/// One polling thread's flows (engine `poll`). The first data connection of the group to
/// arrive becomes its thread; later ones watch their socket on its epoll, queue it, and end.
struct Group {
    epoll: Epoll,
    queue: Mutex<GroupQueue>,
    /// Flows this group will serve (those with flow % groups == its index).
    expected: usize,
    cpu: Option<u32>,
}

#[derive(Default)]
struct GroupQueue {
    /// Sockets not yet taken by the group's thread. Their connection slots are the group
    /// thread's to give back, each before its flow is reported done, so that a client that
    /// starts its next test on the result finds them free.
    pending: Vec<(u32, Arc<TcpStream>)>,
    claimed: bool,
    /// The group's thread has ended: nothing more is taken.
    closed: bool,
}

impl Test {
    /// Ends every flow: set the flag and shut the sockets down, which wakes blocked reads.
    fn stop_flows(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        for s in slots.streams.iter().flatten() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Waits until every connected flow has finished, for at most `limit`.
    fn wait_flows(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let pending = slots
                .streams
                .iter()
                .zip(&slots.done)
                .any(|(s, d)| s.is_some() && d.is_none());
            if !pending {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            slots = self
                .changed
                .wait_timeout(slots, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

struct Shared {
    tests: Mutex<HashMap<u64, Arc<Test>>>,
    /// Buffer bytes reserved by running tests, and the budget.
    memory: AtomicU64,
    max_memory: u64,
    flow_idle: Duration,
    rejected: AtomicU64,
    open: AtomicUsize,
    next_cpu: AtomicUsize,
    cpus: Vec<u32>,
    max_connections: usize,
    hello_timeout: Duration,
    /// Tests registered whose summary is not yet sent (a test writes its client's result
    /// first, then reports): the server waits for them at its stop, so its totals count a
    /// test whose client already finished.
    reporting: AtomicUsize,
}

/// One test's summary still owed (see `Shared::reporting`), however its handler returns.
struct Owed<'a>(&'a AtomicUsize);

impl Drop for Owed<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long a stopping server waits for the summaries of tests still reporting.
const STOP_GRACE: Duration = Duration::from_secs(5);

pub struct Server {
    listener: TcpListener,
    cfg: ServerConfig,
}

/// Totals over the server's life.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerTotals {
    pub tests: u64,
    pub rejected_connections: u64,
}

impl ServerTotals {
    /// The server's last message: `bench` names the command it was started as.
    pub fn summary(
        &self,
        bench: &str,
        listen: std::net::SocketAddr,
    ) -> super::message::ServerSummary {
        super::message::ServerSummary {
            kind: crate::report::Kind::Summary,
            bench: bench.into(),
            role: crate::report::Role::Server,
            listen: listen.to_string(),
            tests: self.tests,
            rejected_connections: self.rejected_connections,
        }
    }
}

impl Server {
    pub fn bind(cfg: ServerConfig) -> Result<Server, BenchError> {
        if cfg.max_connections == 0 {
            return Err(BenchError::Config(
                "--max-connections must be at least 1".into(),
            ));
        }
        netsteer_sock::cpu::check_cpus("--cpu", &cfg.cpus)
            .map_err(|e| BenchError::Config(e.to_string()))?;
        let listener = TcpListener::bind(cfg.listen).map_err(|source| BenchError::Io {
            what: format!("listening on {}", cfg.listen),
            source,
        })?;
        Ok(Server { listener, cfg })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `stop` is set or the configured duration ends; `on_test` gets one message
    /// per finished test.
    pub fn run(
        &self,
        stop: &AtomicBool,
        mut on_test: impl FnMut(&ServerTest) -> io::Result<()>,
    ) -> Result<ServerTotals, BenchError> {
        let shared = Arc::new(Shared {
            tests: Mutex::new(HashMap::new()),
            memory: AtomicU64::new(0),
            max_memory: self.cfg.max_memory,
            flow_idle: self.cfg.flow_idle,
            rejected: AtomicU64::new(0),
            open: AtomicUsize::new(0),
            next_cpu: AtomicUsize::new(0),
            cpus: self.cfg.cpus.clone(),
            max_connections: self.cfg.max_connections,
            hello_timeout: self.cfg.hello_timeout,
            reporting: AtomicUsize::new(0),
        });
        let (tx, rx) = mpsc::channel::<ServerTest>();
        let started = Instant::now();
        let mut totals = ServerTotals::default();
        let mut write_err = None;
        let mut refused = Refused::default();
        let mut take = |m: ServerTest, totals: &mut ServerTotals| {
            totals.tests += 1;
            if write_err.is_none()
                && let Err(e) = on_test(&m)
            {
                write_err = Some(e);
            }
        };
        loop {
            for m in rx.try_iter() {
                take(m, &mut totals);
            }
            if stop.load(Ordering::Relaxed)
                || self.cfg.duration.is_some_and(|d| started.elapsed() >= d)
            {
                break;
            }
            refused.drain();
            // Accepting is not on any timed path: waking every 100 ms to look at the stop flag
            // is simpler than a wake-up signal.
            if !wait_readable(self.listener.as_fd(), 100).map_err(|source| BenchError::Io {
                what: "waiting for connections".into(),
                source,
            })? {
                continue;
            }
            let (sock, peer) = match self.listener.accept() {
                Ok(c) => c,
                // A connection reset before accept, or out of file descriptors: keep serving.
                Err(_) => continue,
            };
            if shared.open.load(Ordering::Relaxed) >= shared.max_connections {
                shared.rejected.fetch_add(1, Ordering::Relaxed);
                if let Some(s) = refuse_full(sock, shared.max_connections) {
                    refused.push(s);
                }
                continue;
            }
            shared.open.fetch_add(1, Ordering::Relaxed);
            let (conn_shared, tx) = (shared.clone(), tx.clone());
            let spawned = std::thread::Builder::new()
                .name("tcp-bench-conn".into())
                .spawn(move || {
                    if handle(&conn_shared, sock, peer, &tx) {
                        conn_shared.open.fetch_sub(1, Ordering::Relaxed);
                    }
                });
            if spawned.is_err() {
                shared.open.fetch_sub(1, Ordering::Relaxed);
                shared.rejected.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Tests still running are ended: their clients see the connections close.
        for t in shared
            .tests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            t.stop_flows();
        }
        let grace = Instant::now() + STOP_GRACE;
        while shared.reporting.load(Ordering::Acquire) > 0 && Instant::now() < grace {
            if let Ok(m) = rx.recv_timeout(Duration::from_millis(10)) {
                take(m, &mut totals);
            }
        }
        for m in rx.try_iter() {
            take(m, &mut totals);
        }
        totals.rejected_connections = shared.rejected.load(Ordering::Relaxed);
        match write_err {
            Some(e) => Err(BenchError::Io {
                what: "writing the report".into(),
                source: e,
            }),
            None => Ok(totals),
        }
    }
}

/// Tells a client the server is full instead of a bare reset: the preamble and a `Rejected`
/// reply, written without blocking the accept loop (a fresh socket's send buffer takes them),
/// then FIN. The socket is kept (see [`Refused`]) so that what the client still sends is read
/// and dropped: closing at once would answer that data with RST, which can reach the client
/// before it reads the reply.
fn refuse_full(mut sock: TcpStream, max: usize) -> Option<TcpStream> {
    sock.set_nonblocking(true).ok()?;
    let error = format!(
        "the server is full: all {max} connection slots are in use (its --max-connections); try again later"
    );
    let _ = write_preamble(&mut sock);
    let _ = write_frame(&mut sock, &Reply::Rejected { error });
    let _ = sock.shutdown(Shutdown::Write);
    Some(sock)
}

/// Refused connections kept open for reading until their client closes, at most
/// `REFUSED_LINGER` and at most `REFUSED_MAX` of them (the oldest is dropped first), so a
/// flood of connections costs bounded memory and no thread.
#[derive(Default)]
struct Refused(std::collections::VecDeque<(TcpStream, Instant)>);

const REFUSED_LINGER: Duration = Duration::from_secs(2);
const REFUSED_MAX: usize = 256;

impl Refused {
    fn push(&mut self, s: TcpStream) {
        if self.0.len() >= REFUSED_MAX {
            self.0.pop_front();
        }
        self.0.push_back((s, Instant::now()));
    }

    /// Reads off what the refused clients sent; forgets those that closed or lingered enough.
    fn drain(&mut self) {
        let mut sink = [0u8; 4096];
        self.0.retain_mut(|(s, since)| {
            if since.elapsed() >= REFUSED_LINGER {
                return false;
            }
            loop {
                match io::Read::read(s, &mut sink) {
                    Ok(0) => return false,
                    Ok(_) => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                    Err(_) => return false,
                }
            }
        });
    }
}

fn random_id() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// Serves one connection; false when its socket lives on in a polling thread, which then
/// gives its connection slot back.
fn handle(
    shared: &Shared,
    sock: TcpStream,
    peer: SocketAddr,
    tx: &mpsc::Sender<ServerTest>,
) -> bool {
    let hello = (|| {
        sock.set_nodelay(true)?;
        let mut r = DeadlineReader::new(&sock, shared.hello_timeout);
        read_preamble(&mut r)?;
        read_frame::<Hello>(&mut r)
    })();
    match hello {
        Ok(Hello::Control { spec }) => control(shared, sock, peer, spec, tx),
        Ok(Hello::Data { test_id, flow }) => match data(shared, sock, test_id, flow) {
            Served::Here => {}
            Served::HandedOver => return false,
            Served::Refused => {}
        },
        // Garbage, silence past the timeout, a huge length, or a peer that left: close.
        Err(_) => {
            shared.rejected.fetch_add(1, Ordering::Relaxed);
        }
    }
    true
}

fn control(
    shared: &Shared,
    mut sock: TcpStream,
    peer: SocketAddr,
    spec: TestSpec,
    tx: &mpsc::Sender<ServerTest>,
) {
    let _ = write_preamble(&mut sock);
    if let Err(error) = spec.check() {
        let _ = write_frame(&mut sock, &Reply::Rejected { error });
        return;
    }
    let _memory = match Reservation::take(&shared.memory, buffer_need(&spec), shared.max_memory) {
        Ok(r) => r,
        Err(error) => {
            let _ = write_frame(&mut sock, &Reply::Rejected { error });
            return;
        }
    };
    let test_id = random_id();
    let n = spec.flows as usize;
    let usable = usable_cpus(&shared.cpus);
    let segment = path_segment(&sock, spec.mss);
    let engine = match spec.kind {
        TestKind::TcpStream => spec.engine.resolve(
            Side::Receiver { segment },
            spec.flows,
            usable,
            Io::of(spec.write_size, spec.read_size, spec.zerocopy_recv),
        ),
        TestKind::TcpRr => Engine::Threads,
    };
    let groups = match engine {
        Engine::Poll => {
            let count = Engine::groups(spec.flows, usable);
            let made: io::Result<Vec<Group>> = (0..count)
                .map(|g| {
                    Ok(Group {
                        epoll: Epoll::new()?,
                        queue: Mutex::default(),
                        expected: (g..n).step_by(count).count(),
                        cpu: (!shared.cpus.is_empty()).then(|| shared.cpus[g % shared.cpus.len()]),
                    })
                })
                .collect();
            match made {
                Ok(g) => g,
                Err(e) => {
                    let error = format!("creating the epoll instances: {e}");
                    let _ = write_frame(&mut sock, &Reply::Rejected { error });
                    return;
                }
            }
        }
        _ => Vec::new(),
    };
    let test = Arc::new(Test {
        spec: spec.clone(),
        seed_id: test_id,
        stop: AtomicBool::new(false),
        slots: Mutex::new(Slots {
            streams: (0..n).map(|_| None).collect(),
            done: (0..n).map(|_| None).collect(),
        }),
        changed: Condvar::new(),
        groups,
        low_water: stream::low_water(spec.write_size, spec.read_size, segment, spec.flows, usable),
        reads_per_turn: stream::reads_per_turn(segment, spec.write_size),
    });
    shared.reporting.fetch_add(1, Ordering::AcqRel);
    let _owed = Owed(&shared.reporting);
    shared
        .tests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(test_id, test.clone());
    let meter = CostMeter::start();
    let started = Instant::now();
    let mut errors = Vec::new();
    // One deadline for the whole Finish frame (spec.check() bounds duration_s): a client
    // dripping it a byte at a time must not hold its slot past the test. Until the frame
    // starts, the test must show it is alive (`live`).
    let finish = write_frame(&mut sock, &Reply::Accepted { test_id }).and_then(|()| {
        let deadline = started + Duration::from_secs_f64(spec.duration_s + CONTROL_GRACE_S);
        test.live(
            &sock,
            started,
            (shared.hello_timeout, shared.flow_idle),
            deadline,
        )?;
        read_frame::<Finish>(&mut DeadlineReader::new(
            &sock,
            deadline.saturating_duration_since(Instant::now()),
        ))
    });
    let finished = finish.is_ok();
    match finish {
        Ok(_) => {
            // The client has stopped and shut its sockets; flows end at EOF. A flow that does
            // not within 10 s is stuck on a peer that stopped reading: end it.
            if !test.wait_flows(Duration::from_secs(10)) {
                errors.push("flows still running 10 s after the client finished: stopped".into());
                test.stop_flows();
                test.wait_flows(Duration::from_secs(2));
            }
        }
        Err(e) => {
            errors.push(format!("control connection lost: {e}"));
            test.stop_flows();
            test.wait_flows(Duration::from_secs(2));
        }
    }
    // Polling threads still waiting for a flow that never connected end now.
    test.stop.store(true, Ordering::Relaxed);
    shared
        .tests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&test_id);
    let duration_s = started.elapsed().as_secs_f64();
    let (flows, usage, cpus) = {
        let mut slots = test.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut usage = ThreadUsage::default();
        let mut cpus = BTreeSet::new();
        let mut flows = Vec::new();
        for (i, d) in slots.done.iter_mut().enumerate() {
            match d.take() {
                Some(d) => {
                    usage.add(&d.usage);
                    cpus.extend(d.cpus);
                    if let Some(e) = &d.flow.error {
                        errors.push(format!("flow {i}: {e}"));
                    }
                    flows.push(d.flow);
                }
                None => flows.push(ServerFlow {
                    flow: i as u32,
                    error: Some("never connected or never finished".into()),
                    ..ServerFlow::default()
                }),
            }
        }
        (flows, usage, cpus)
    };
    let cost = meter.finish(&usage, &cpus);
    let bytes: u64 = flows.iter().map(|f| f.bytes).sum();
    let transactions = flows.iter().map(|f| f.transactions).sum();
    if finished {
        let _ = write_frame(
            &mut sock,
            &Reply::Result {
                flows,
                cost,
                duration_s,
                engine: (spec.kind == TestKind::TcpStream).then_some(engine),
            },
        );
    }
    let _ = tx.send(ServerTest {
        kind: Kind::Summary,
        bench: spec.kind.bench().into(),
        role: Role::Server,
        peer: peer.to_string(),
        test_id,
        flows: spec.flows,
        duration_s,
        bytes,
        bits_per_second: bytes as f64 * 8.0 / duration_s.max(1e-9),
        transactions,
        rejected_connections: shared.rejected.load(Ordering::Relaxed),
        errors,
    });
}

/// What became of a data connection.
enum Served {
    /// Its flow ran on this thread (and maybe a polling group's other flows with it).
    Here,
    /// Its socket went to a polling thread (maybe this one), which gave its slot back.
    HandedOver,
    /// It named no test or flow that can take it.
    Refused,
}

/// Counts a refused data connection. Called while its socket is still open (the socket drops
/// after the return value is made), so a client that sees the close also sees the count.
fn refuse(shared: &Shared) -> Served {
    shared.rejected.fetch_add(1, Ordering::Relaxed);
    Served::Refused
}

/// Runs one data connection.
fn data(shared: &Shared, sock: TcpStream, test_id: u64, flow: u32) -> Served {
    let Some(test) = shared
        .tests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&test_id)
        .cloned()
    else {
        return refuse(shared);
    };
    let sock = Arc::new(sock);
    {
        let mut slots = test.slots.lock().unwrap_or_else(|e| e.into_inner());
        match slots.streams.get_mut(flow as usize) {
            Some(slot @ None) if !test.stop.load(Ordering::Relaxed) => *slot = Some(sock.clone()),
            _ => return refuse(shared),
        }
    }
    if !test.groups.is_empty() {
        return join_group(shared, &test, sock, flow);
    }
    let mut pin_error = None;
    if !shared.cpus.is_empty() {
        let i = shared.next_cpu.fetch_add(1, Ordering::Relaxed) % shared.cpus.len();
        if let Err(e) = pin_current_thread(&[shared.cpus[i]]) {
            pin_error = Some(format!("pinning to CPU {}: {e}", shared.cpus[i]));
        }
    }
    let before = ThreadUsage::current().unwrap_or_default();
    let mut cpus = BTreeSet::new();
    cpus.extend(current_cpu());
    let mut result = match sock.set_read_timeout(None) {
        Err(e) => ServerFlow {
            error: Some(e.to_string()),
            ..ServerFlow::default()
        },
        Ok(()) => match test.spec.kind {
            TestKind::TcpStream => stream::receive(
                &sock,
                &test.spec,
                test.seed_id,
                flow,
                test.low_water,
                &test.stop,
                &mut cpus,
            ),
            TestKind::TcpRr => rr::respond(&sock, &test.spec, &test.stop, &mut cpus),
        },
    };
    result.flow = flow;
    if result.error.is_none() {
        result.error = pin_error;
    }
    cpus.extend(current_cpu());
    let usage = ThreadUsage::current().unwrap_or_default().since(&before);
    test.done(FlowDone {
        flow: result,
        usage,
        cpus,
    });
    Served::Here
}

/// The largest segment the test's data connections will carry to this server: the control
/// connection's MSS on the same path, or the client's `--mss` if smaller. Unknown counts as
/// Ethernet-size.
fn path_segment(control: &TcpStream, mss: Option<u32>) -> u32 {
    let path = tcp_info(control.as_fd()).map_or(crate::tcp::ETHERNET_SEGMENT, |i| i.snd_mss);
    mss.map_or(path, |m| m.min(path))
}

impl Test {
    /// Waits for the control connection to become readable (the client's Finish), while the
    /// test shows it is alive: every flow connected within `join` of `started`, and some flow
    /// received data within the last `idle`. Err names what a silent client failed.
    fn live(
        &self,
        control: &TcpStream,
        started: Instant,
        (join, idle): (Duration, Duration),
        deadline: Instant,
    ) -> io::Result<()> {
        let dead = |why: String| Err(io::Error::new(io::ErrorKind::TimedOut, why));
        // Since when no flow has been running (all ended): the client's Finish follows its
        // flows' ends at once, but a busy machine may delay it; it gets `idle` to arrive.
        let mut ended_since: Option<Instant> = None;
        loop {
            if wait_readable(control.as_fd(), 200)? {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return dead("no Finish from the client by the end of the test".into());
            }
            let (joined, idle_ms) = {
                let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
                let joined = slots.streams.iter().all(Option::is_some);
                // The most recent arrival on any flow still running (None: none runs).
                let idle_ms = slots
                    .streams
                    .iter()
                    .zip(&slots.done)
                    .filter(|(_, d)| d.is_none())
                    .filter_map(|(s, _)| s.as_ref())
                    .filter_map(|s| tcp_info(s.as_fd()).ok())
                    .map(|i| u64::from(i.last_data_recv_ms))
                    .min();
                (joined, idle_ms)
            };
            if !joined {
                if now.duration_since(started) >= join {
                    return dead(format!(
                        "flows did not connect within {} s of the test's start",
                        join.as_secs_f64()
                    ));
                }
                continue;
            }
            match idle_ms {
                Some(ms) => {
                    ended_since = None;
                    if now.duration_since(started) >= idle && ms >= idle.as_millis() as u64 {
                        return dead(format!("no data on any flow for {} s", idle.as_secs_f64()));
                    }
                }
                None => {
                    let since = *ended_since.get_or_insert(now);
                    if now.duration_since(since) >= idle {
                        return dead(format!(
                            "every flow ended and no Finish came within {} s",
                            idle.as_secs_f64()
                        ));
                    }
                }
            }
        }
    }

    fn done(&self, d: FlowDone) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let i = d.flow.flow as usize;
        slots.done[i] = Some(d);
        self.changed.notify_all();
    }
}

/// Engine `poll`: queues the flow for its group, and serves the group if no thread does yet.
fn join_group(shared: &Shared, test: &Test, sock: Arc<TcpStream>, flow: u32) -> Served {
    let group = &test.groups[flow as usize % test.groups.len()];
    let failed = |e: io::Error| {
        test.done(FlowDone {
            flow: ServerFlow {
                flow,
                error: Some(e.to_string()),
                ..ServerFlow::default()
            },
            usage: ThreadUsage::default(),
            cpus: BTreeSet::new(),
        });
        Served::Here
    };
    // Watched before it is queued: an event for a socket not yet taken is seen again, since
    // the watch is level-triggered.
    if let Err(e) = sock.set_nonblocking(true).and_then(|()| {
        group
            .epoll
            .watch(sock.as_fd(), Interest::Read, u64::from(flow))
    }) {
        return failed(e);
    }
    let serve = {
        let mut q = group.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.closed {
            drop(q);
            let _ = group.epoll.unwatch(sock.as_fd());
            return failed(io::Error::other(
                "the test ended before this flow connected",
            ));
        }
        let serve = !q.claimed;
        q.claimed = true;
        q.pending.push((flow, sock));
        serve
    };
    if serve {
        poll_group(shared, test, group);
    }
    Served::HandedOver
}

/// A group's thread: reads every flow the epoll says is readable until all of the group's
/// flows reached EOF or the test stops.
fn poll_group(shared: &Shared, test: &Test, group: &Group) {
    let pin_error = group.cpu.and_then(|cpu| {
        pin_current_thread(&[cpu])
            .err()
            .map(|e| format!("pinning to CPU {cpu}: {e}"))
    });
    let mut last_usage = ThreadUsage::current().unwrap_or_default();
    let mut cpus = BTreeSet::new();
    cpus.extend(current_cpu());
    let mut flows: HashMap<u32, (Arc<TcpStream>, stream::CopyRx)> = HashMap::new();
    let mut finished = 0usize;
    let mut ready = Vec::new();
    let mut end = |entry: (Arc<TcpStream>, stream::CopyRx),
                   error: Option<io::Error>,
                   cpus: &BTreeSet<u32>| {
        let (sock, rx) = entry;
        let _ = group.epoll.unwatch(sock.as_fd());
        shared.open.fetch_sub(1, Ordering::Relaxed);
        let mut result = rx.finish(error);
        if result.error.is_none() {
            result.error = pin_error.clone();
        }
        // The thread's CPU time so far goes to the flow that ends; the sum is the thread's.
        let now = ThreadUsage::current().unwrap_or_default();
        test.done(FlowDone {
            flow: result,
            usage: now.since(&last_usage),
            cpus: cpus.clone(),
        });
        last_usage = now;
    };
    let mut turns = 0u64;
    let failure = loop {
        {
            let mut q = group.queue.lock().unwrap_or_else(|e| e.into_inner());
            for (flow, sock) in q.pending.drain(..) {
                let rx = stream::CopyRx::new(&test.spec, test.seed_id, flow, test.low_water);
                match rx.prepare(&sock) {
                    Ok(()) => {
                        flows.insert(flow, (sock, rx));
                    }
                    Err(e) => {
                        finished += 1;
                        end((sock, rx), Some(e), &cpus);
                    }
                }
            }
            if finished >= group.expected || test.stop.load(Ordering::Relaxed) {
                q.closed = true;
                break None;
            }
        }
        // Waking every 100 ms to look at the stop flag, as the threads' reads do on shutdown.
        if let Err(e) = group.epoll.ready(100, &mut ready) {
            break Some(e);
        }
        for r in &ready {
            let flow = r.token as u32;
            let Some((sock, rx)) = flows.get_mut(&flow) else {
                continue;
            };
            let outcome = rx.pump(sock, test.reads_per_turn);
            if matches!(outcome, Ok(stream::Pumped::Eof) | Err(_))
                && let Some(entry) = flows.remove(&flow)
            {
                finished += 1;
                end(entry, outcome.err(), &cpus);
            }
        }
        turns += 1;
        if turns.is_multiple_of(256) {
            cpus.extend(current_cpu());
        }
    };
    // Stopped (or epoll failed): the flows still open end with what they read.
    let stopped = test.stop.load(Ordering::Relaxed);
    for (_, entry) in flows.drain() {
        let error = if stopped {
            None
        } else {
            failure
                .as_ref()
                .map(|e| io::Error::new(e.kind(), format!("waiting in epoll: {e}")))
        };
        end(entry, error, &cpus);
    }
}
