//! Hardening round four, "Fair to programs" (issue 77): what a preloaded program sees from
//! connect(2) and read(2) must be what TCP would give it.
//!
//! * A session the peer refuses (its per-address session cap: a preloaded server takes 4
//!   sessions from one address, and every client process has a session of its own) falls
//!   back to plain TCP for that connection, or with `NETSTEER_NC_FALLBACK=0` fails with
//!   ECONNREFUSED; either way with a line on stderr. Never EIO, which TCP never gives there.
//! * A blocking read interrupted by a signal restarts when *that* signal's handler has
//!   SA_RESTART (and no SO_RCVTIMEO is set), whatever other handlers ask for.
//!
//! Both run real processes in a network namespace of their own, over its loopback: a
//! preloaded python3 server and preloaded client processes (python3, and a C program
//! compiled here with `cc`, so that the signal handlers are installed and the read made
//! exactly as a C program does, with no interpreter retrying EINTR in between).

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");
const CHANNEL: &str = "127.0.0.1:7700";
const PORT: u16 = 9400;
/// Generous: a busy 2-core machine with other builds running may be slow, never this slow.
const PATIENCE: Duration = Duration::from_secs(120);

fn tools_present() -> Result<(), String> {
    root_and_tools(&[("python3", "python3"), ("cc", "gcc"), ("ss", "iproute2")])
}

/// `netsteer netchannel run` with `role`'s flags, then `program`. `NETSTEER_TEST_PRELOAD`
/// names another build of the library to run instead (`--preload`), to show these tests
/// failing against an older one.
fn preloaded<'a>(role: &[&'a str], program: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![BIN, "netchannel", "run"];
    if let Ok(lib) = std::env::var("NETSTEER_TEST_PRELOAD") {
        v.extend(["--preload", String::leak(lib)]);
    }
    v.extend_from_slice(role);
    v.push("--");
    v.extend_from_slice(program);
    v
}

/// The server: python3 preloaded with `--listen` on the namespace's loopback, answering every
/// read of every connection with "pong:" and what it read, a thread per connection. Its
/// kernel listener stays open to plain TCP clients too (as every preloaded listener's does),
/// which is what a client that falls back reaches.
fn start_server(ns: &Netns) -> Running {
    let script = format!(
        r#"
import socket, threading
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", {PORT}))
l.listen(64)
def serve(c):
    # A client the test stops may be gone before its answer.
    try:
        while True:
            b = c.recv(64)
            if not b:
                break
            c.sendall(b"pong:" + b)
    except OSError:
        pass
    c.close()
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#
    );
    let port = PORT.to_string();
    let role = ["--listen", CHANNEL, "--ports", port.as_str(), "--verbose"];
    let server = Running::spawn(
        ns,
        &preloaded(&role, &["python3", "-u", "-c", &script]),
        // Four places per address, as the test counts them (the default is 8).
        &[("NETSTEER_NC_SESSIONS_PER_PEER", "4")],
        Stdio::null(),
    );
    wait_port(ns, "127.0.0.1", PORT);
    // The endpoint (and with it the channel listener) is made at the first accept.
    wait_port(ns, "127.0.0.1", 7700);
    server
}

/// Lines a child writes on stdout (or stderr), read on a thread so that a wait for one has a
/// deadline.
fn lines_of(out: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn next_line(rx: &mpsc::Receiver<String>, who: &str) -> String {
    rx.recv_timeout(PATIENCE)
        .unwrap_or_else(|e| panic!("{who} printed nothing within {PATIENCE:?}: {e}"))
}

/// One preloaded client process: connects to the server, sends "ping", prints the reply (or
/// connect's errno), then holds the connection, and with it its process's session, until
/// its stdin closes.
const CLIENT: &str = r#"
import errno, socket, sys
try:
    s = socket.create_connection(("127.0.0.1", PORT))
except OSError as e:
    print("connect", errno.errorcode.get(e.errno, e.errno), flush=True)
    sys.stdin.read()
    sys.exit(0)
s.sendall(b"ping")
print("reply", s.recv(64).decode(), flush=True)
sys.stdin.read()
"#;

/// As [`CLIENT`] with a non-blocking connect, waited for with select (`WAIT=select`) or epoll
/// (`WAIT=epoll`), its outcome read from SO_ERROR, as event loops connect.
const NONBLOCKING_CLIENT: &str = r#"
import errno, select, socket, sys
s = socket.socket()
s.setblocking(False)
r = s.connect_ex(("127.0.0.1", PORT))
if r == errno.EINPROGRESS:
    if "WAIT" == "epoll":
        ep = select.epoll()
        ep.register(s.fileno(), select.EPOLLOUT)
        assert ep.poll(120), "never writable"
        ep.unregister(s.fileno())
    else:
        _, w, _ = select.select([], [s], [], 120)
        assert w == [s], "never writable"
    r = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
if r != 0:
    print("connect", errno.errorcode.get(r, r), flush=True)
    sys.stdin.read()
    sys.exit(0)
s.setblocking(True)
s.sendall(b"ping")
print("reply", s.recv(64).decode(), flush=True)
sys.stdin.read()
"#;

struct Client {
    run: Running,
    first: String,
}

fn client(ns: &Netns, n: usize, env: &[(&str, &str)]) -> Client {
    client_running(ns, n, CLIENT, env)
}

fn client_running(ns: &Netns, n: usize, script: &str, env: &[(&str, &str)]) -> Client {
    let script = script.replace("PORT", &PORT.to_string());
    let port = PORT.to_string();
    let role = ["--peer", CHANNEL, "--ports", port.as_str(), "--verbose"];
    let mut run = Running::spawn(
        ns,
        &preloaded(&role, &["python3", "-u", "-c", &script]),
        env,
        Stdio::piped(),
    );
    let rx = lines_of(run.0.as_mut().unwrap().stdout.take().unwrap());
    let first = next_line(&rx, &format!("client {n}"));
    Client { run, first }
}

impl Client {
    /// Closes its stdin (it exits) and returns its stderr.
    fn finish(mut self) -> String {
        drop(self.run.0.as_mut().unwrap().stdin.take());
        let (_, stderr) = self.run.stop();
        stderr
    }
}

/// The fifth preloaded client process of one host finds the server's per-address session cap
/// (set to 4 here with NETSTEER_NC_SESSIONS_PER_PEER; `SESSIONS_PER_PEER` by default): its connect falls back to plain TCP and
/// works, saying so on stderr; with fallback turned off it fails with ECONNREFUSED, as a
/// refused TCP connect does, also with a line on stderr; non-blocking connects waited for
/// with select and with epoll fall back too (the refusal comes after EINPROGRESS); the server
/// names the cap. (Before: EIO from connect(2), an errno TCP never gives there, or from
/// SO_ERROR, and no fallback.)
#[test]
fn a_refused_session_falls_back_to_tcp_or_is_refused_never_eio() {
    if let Err(why) = tools_present() {
        return cannot_run(&why);
    }
    let ns = Netns::create();
    let mut server = start_server(&ns);
    let server_lines = lines_of(server.0.as_mut().unwrap().stderr.take().unwrap());
    // Four processes take the four places; each holds its session while it runs.
    let mut held = Vec::new();
    for n in 1..=4 {
        let c = client(&ns, n, &[]);
        assert_eq!(c.first, "reply pong:ping", "client {n}");
        held.push(c);
    }
    let fifth = client(&ns, 5, &[]);
    let sixth = client(&ns, 6, &[("NETSTEER_NC_FALLBACK", "0")]);
    // Non-blocking: the connect said EINPROGRESS before the refusal came, so the connection
    // is handed back to the kernel socket under the program's number (and epoll set).
    let nonblocking: Vec<Client> = ["select", "epoll"]
        .iter()
        .enumerate()
        .map(|(i, wait)| {
            let script = NONBLOCKING_CLIENT.replace("WAIT", wait);
            client_running(&ns, 7 + i, &script, &[])
        })
        .collect();
    let (fifth_said, sixth_said) = (fifth.first.clone(), sixth.first.clone());
    let nonblocking_said: Vec<String> = nonblocking.iter().map(|c| c.first.clone()).collect();
    let fifth_err = fifth.finish();
    let sixth_err = sixth.finish();
    let nonblocking_err: Vec<String> = nonblocking.into_iter().map(Client::finish).collect();
    // The refused side cannot know the cap (the handshake has no refusal message): the
    // refusing server names it, in a line at most a second after the refusal.
    let mut server_err = String::new();
    while !server_err.contains("netchannel refused peers") {
        let line = server_lines
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("the server never named the cap: {server_err}"));
        server_err += &line;
        server_err += "\n";
    }
    let held_err: Vec<String> = held.into_iter().map(Client::finish).collect();
    drop(server);
    let all = format!(
        "fifth: {fifth_said:?}\n{fifth_err}\nsixth: {sixth_said:?}\n{sixth_err}\n\
         non-blocking (select, epoll): {nonblocking_said:?}\n{nonblocking_err:#?}\n\
         server:\n{server_err}"
    );
    // Shown with --nocapture (libtest hides a passing test's output).
    eprintln!("{all}");
    for (n, e) in held_err.iter().enumerate() {
        assert!(
            e.contains("over netchannel peer"),
            "client {} did not ride netchannel: {e}",
            n + 1
        );
    }
    assert_eq!(fifth_said, "reply pong:ping", "{all}");
    assert!(
        fifth_err.contains("refused the netchannel session") && fifth_err.contains("plain TCP"),
        "{all}"
    );
    assert!(
        server_err.contains("netchannel refused peers")
            && server_err.contains("(max_sessions_per_peer)"),
        "{all}"
    );
    assert_eq!(sixth_said, "connect ECONNREFUSED", "{all}");
    for (said, err) in nonblocking_said.iter().zip(&nonblocking_err) {
        assert_eq!(said, "reply pong:ping", "{all}");
        assert!(
            err.contains("(non-blocking)") && err.contains("goes over plain TCP"),
            "{all}"
        );
    }
    assert!(
        sixth_err.contains("refused the netchannel session") && sixth_err.contains("ECONNREFUSED"),
        "{all}"
    );
}

/// The C program of the signal test. Handlers: SIGUSR1 by sigaction with SA_RESTART, SIGHUP by
/// signal() (BSD semantics: SA_RESTART), SIGUSR2 by sigaction without SA_RESTART. A helper
/// thread sends each signal to the main thread only once that thread is asleep in its read
/// (its /proc syscall is the preload's poll), so no signal can arrive outside the wait:
///
/// 1. read: SIGUSR1, then SIGHUP; neither may make it return; then the helper sends "one"
///    and the read returns "pong:one".
/// 2. read: SIGUSR2 must make it return -1 with EINTR.
/// 3. read with SO_RCVTIMEO set: SIGUSR1 must make it return EINTR (a timed socket wait is
///    never restarted: sock_intr_errno).
/// 4. recv(MSG_WAITALL) of 16 bytes when 8 are already there: SIGUSR2 must make it return
///    those 8 (tcp_recvmsg returns what it copied), not EINTR with the 8 lost.
///
/// Were a signal to land in the instant the preload's wait is between two polls (a channel
/// arrival wakes it), it would interrupt nothing: in steps 2 and 3 the helper then sends it
/// again, once the thread is back asleep.
const SIGNALS_C: &str = r#"
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static atomic_int handled[65];
/* Reads the main thread began and ended: read k is under way while started == k > finished. */
static atomic_int started, finished;
static pid_t main_tid;
static int fd, recv_flags;

static void on_signal(int sig) { atomic_fetch_add(&handled[sig], 1); }

static void fail(const char *what) {
    printf("FAIL %s\n", what);
    fflush(stdout);
    _exit(1);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Whether the main thread sleeps in poll or ppoll (the preload's wait inside read). */
static int asleep_in_poll(void) {
    char path[64], buf[128];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", main_tid);
    FILE *f = fopen(path, "r");
    if (!f) fail("open /proc/self/task/TID/syscall");
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    if (strncmp(buf, "running", 7) == 0) return 0;
    long nr = strtol(buf, NULL, 10);
#ifdef SYS_poll
    if (nr == SYS_poll) return 1;
#endif
    return nr == SYS_ppoll;
}

static int over(int k) { return atomic_load(&finished) >= k; }

static int asleep_in_read(int k) {
    return atomic_load(&started) == k && !over(k) && asleep_in_poll();
}

/* Until read k sleeps (or is over). */
static void wait_asleep(int k, const char *step) {
    double until = now() + 120;
    while (!asleep_in_read(k) && !over(k)) {
        if (now() > until) { printf("FAIL %s: never asleep in read\n", step); fflush(stdout); _exit(1); }
        usleep(1000);
    }
}

/* Sends `sig` to the main thread asleep in read k and waits for its handler to run. */
static void interrupt(int sig, int k, const char *step) {
    wait_asleep(k, step);
    if (over(k)) return;
    int before = atomic_load(&handled[sig]);
    if (syscall(SYS_tgkill, getpid(), main_tid, sig) != 0) fail("tgkill");
    double until = now() + 120;
    while (atomic_load(&handled[sig]) == before) {
        if (now() > until) fail("the handler never ran");
        usleep(1000);
    }
}

/* Steps 2 and 3: `sig` until read k returns (again if one landed between two polls). */
static void interrupt_until_over(int sig, int k, const char *step) {
    for (int i = 0; i < 50 && !over(k); i++) {
        interrupt(sig, k, step);
        double until = now() + 120;
        while (!over(k) && !asleep_in_read(k)) {
            if (now() > until) fail("neither returned nor asleep again");
            usleep(1000);
        }
    }
}

static void *helper(void *unused) {
    (void)unused;
    interrupt(SIGUSR1, 1, "step 1 (SIGUSR1)");
    interrupt(SIGHUP, 1, "step 1 (SIGHUP)");
    if (write(fd, "one", 3) != 3) fail("write");
    interrupt_until_over(SIGUSR2, 2, "step 2");
    interrupt_until_over(SIGUSR1, 3, "step 3");
    while (!over(3)) usleep(1000);
    if (write(fd, "two", 3) != 3) fail("write");
    interrupt_until_over(SIGUSR2, 4, "step 4");
    return NULL;
}

static ssize_t read_once(char *buf, size_t len, int *err) {
    atomic_fetch_add(&started, 1);
    ssize_t n = recv_flags ? recv(fd, buf, len, recv_flags) : read(fd, buf, len);
    *err = errno;
    atomic_fetch_add(&finished, 1);
    return n;
}

int main(int argc, char **argv) {
    if (argc != 2) fail("usage: signals PORT");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGUSR1, &sa, NULL) != 0) fail("sigaction SIGUSR1");
    sa.sa_flags = 0;
    if (sigaction(SIGUSR2, &sa, NULL) != 0) fail("sigaction SIGUSR2");
    if (signal(SIGHUP, on_signal) == SIG_ERR) fail("signal SIGHUP");
    /* What the program reads back is what it installed. */
    struct sigaction back;
    if (sigaction(SIGUSR1, NULL, &back) != 0 || back.sa_handler != on_signal
        || !(back.sa_flags & SA_RESTART) || (back.sa_flags & SA_SIGINFO))
        fail("sigaction reads back another SIGUSR1 handler");
    if (sigaction(SIGUSR2, NULL, &back) != 0 || back.sa_handler != on_signal
        || (back.sa_flags & SA_RESTART))
        fail("sigaction reads back another SIGUSR2 handler");

    fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])) };
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (connect(fd, (struct sockaddr *)&to, sizeof to) != 0) { perror("connect"); fail("connect"); }
    main_tid = gettid();
    pthread_t t;
    pthread_create(&t, NULL, helper, NULL);

    char buf[64];
    int err;
    ssize_t n = read_once(buf, sizeof buf, &err);
    if (n < 0) { printf("FAIL step 1: read -1 %s after SIGUSR1 (SA_RESTART) and SIGHUP (signal())\n", strerrorname_np(err)); fflush(stdout); _exit(1); }
    if (n != 8 || memcmp(buf, "pong:one", 8) != 0) fail("step 1: wrong reply");
    printf("step 1: restarted under SA_RESTART, read %zd bytes\n", n);

    n = read_once(buf, sizeof buf, &err);
    if (!(n == -1 && err == EINTR)) { printf("FAIL step 2: read %zd %s under SIGUSR2 (no SA_RESTART)\n", n, n < 0 ? strerrorname_np(err) : ""); fflush(stdout); _exit(1); }
    printf("step 2: EINTR without SA_RESTART\n");

    struct timeval tv = { .tv_sec = 600 };
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) fail("SO_RCVTIMEO");
    n = read_once(buf, sizeof buf, &err);
    if (!(n == -1 && err == EINTR)) { printf("FAIL step 3: read %zd %s under SIGUSR1 with SO_RCVTIMEO\n", n, n < 0 ? strerrorname_np(err) : ""); fflush(stdout); _exit(1); }
    printf("step 3: EINTR with SO_RCVTIMEO\n");

    /* The reply is here before the read begins, so the read has taken its 8 bytes when it
       sleeps for the other 8: interrupted, it returns those, as TCP does. */
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (poll(&p, 1, 120000) != 1) fail("step 4: the reply never came");
    recv_flags = MSG_WAITALL;
    n = read_once(buf, 16, &err);
    if (n != 8 || memcmp(buf, "pong:two", 8) != 0) { printf("FAIL step 4: recv(MSG_WAITALL) %zd %s under SIGUSR2 with 8 bytes read (TCP returns the 8)\n", n, n < 0 ? strerrorname_np(err) : ""); fflush(stdout); _exit(1); }
    printf("step 4: the bytes read before the signal are returned\n");
    pthread_join(t, NULL);
    printf("ok %d %d %d\n", atomic_load(&handled[SIGUSR1]), atomic_load(&handled[SIGHUP]), atomic_load(&handled[SIGUSR2]));
    return 0;
}
"#;

/// A program with handlers that differ in SA_RESTART, blocked in read(2) on a preloaded
/// socket: SIGUSR1 (SA_RESTART) and SIGHUP (signal(), which has SA_RESTART) do not make the
/// read return; SIGUSR2 (no SA_RESTART) does, with EINTR; with SO_RCVTIMEO set even SIGUSR1
/// does, as on TCP. (Before: the preload restarted only when every installed handler had
/// SA_RESTART, so SIGUSR1 gave EINTR because SIGUSR2's handler lacked it.)
#[test]
fn a_blocking_read_restarts_by_the_flags_of_the_signal_that_came() {
    if let Err(why) = tools_present() {
        return cannot_run(&why);
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("signals.c");
    let prog = dir.path().join("signals");
    std::fs::File::create(&src)
        .unwrap()
        .write_all(SIGNALS_C.as_bytes())
        .unwrap();
    let cc = std::process::Command::new("cc")
        .args(["-O1", "-Wall", "-pthread", "-o"])
        .arg(&prog)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let ns = Netns::create();
    let server = start_server(&ns);
    let port = PORT.to_string();
    let role = ["--peer", CHANNEL, "--ports", port.as_str(), "--verbose"];
    let mut run = Running::spawn(
        &ns,
        &preloaded(&role, &[prog.to_str().unwrap(), port.as_str()]),
        &[],
        Stdio::null(),
    );
    let rx = lines_of(run.0.as_mut().unwrap().stdout.take().unwrap());
    let mut said = Vec::new();
    loop {
        let line = next_line(&rx, "the signal program");
        said.push(line.clone());
        if line.starts_with("ok") || line.starts_with("FAIL") {
            break;
        }
    }
    let (_, stderr) = run.stop();
    drop(server);
    assert!(
        stderr.contains("over netchannel peer"),
        "the program's socket did not ride netchannel: {stderr}"
    );
    assert!(
        said.last().is_some_and(|l| l.starts_with("ok ")),
        "{said:#?}\n{stderr}"
    );
}
