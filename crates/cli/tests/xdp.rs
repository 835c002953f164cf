//! The AF_XDP path of `bench udp-echo`, live, between the two namespaces of a lab pair (root
//! only; the namespaces and everything attached in them go when the test ends, also when it
//! fails):
//!
//! 1. an XDP server answers kernel-socket clients byte for byte at several sizes, while ARP,
//!    ICMP echo and another UDP port on the same interface keep working through the kernel;
//!    nothing stays attached after it exits;
//! 2. an XDP client talks to a socket server and to an XDP server;
//! 3. a second server on a device already serving is refused; a server killed with SIGKILL
//!    leaves no program attached;
//! 4. loopback, the default route's interface (without the flag), a queue the device lacks, a
//!    missing device and a non-root user are refused with a message naming the cause.

mod common;

use common::{Pair, in_netns, is_root};
use netsteer_bench::udp_echo::message::{ClientSummary, ServerSummary};
use netsteer_lab::pair::{CLIENT_ADDR, SERVER_ADDR};

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");

fn usable() -> bool {
    let ip = Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !is_root() || !ip {
        common::cannot_run("needs root and iproute2");
        return false;
    }
    true
}

/// A server in the pair's server namespace, stopped (SIGTERM) and waited for on drop.
struct Server {
    child: Option<Child>,
}

impl Server {
    /// Starts `bench udp-echo server ARGS --json` and waits for its start line.
    fn start(pair: &Pair, args: &[&str]) -> Server {
        let mut all = vec!["bench", "udp-echo", "server", "--json"];
        all.extend_from_slice(args);
        let (child, line) =
            common::spawn_with_start_line(pair.server.command(BIN, &all).stdout(Stdio::piped()));
        assert!(
            line.contains("udp-echo server on"),
            "server did not start: {line:?}"
        );
        Server { child: Some(child) }
    }

    /// SIGTERM, then the summary it prints.
    fn stop(mut self) -> ServerSummary {
        let child = self.child.take().unwrap();
        nix_kill(child.id(), 15);
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text.lines().last().unwrap_or("");
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {text}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn nix_kill(pid: u32, sig: i32) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

/// Runs the echo client in the client namespace; its summary, or the failed output.
fn client(pair: &Pair, args: &[&str]) -> Result<ClientSummary, String> {
    client_at(pair, 4321, args)
}

/// As [`client`], to another port of the server.
fn client_at(pair: &Pair, port: u16, args: &[&str]) -> Result<ClientSummary, String> {
    let target = format!("{SERVER_ADDR}:{port}");
    let mut all = vec!["bench", "udp-echo", "client", target.as_str(), "--json"];
    all.extend_from_slice(args);
    let out = pair.client.command(BIN, &all).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "exit {:?}: {text}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_str(text.lines().last().unwrap_or("")).map_err(|e| format!("{e}: {text}"))
}

/// Runs `[WRAPPER...] netsteer bench udp-echo server --duration 1 ARGS` in the server namespace
/// and checks it is refused: exit 2, a message with every one of `needles`, nothing attached.
fn refused(pair: &Pair, wrapper: &[&str], args: &[&str], needles: &[&str]) {
    let mut all: Vec<&str> = wrapper.to_vec();
    all.extend_from_slice(&[BIN, "bench", "udp-echo", "server", "--duration", "1"]);
    all.extend_from_slice(args);
    let out = pair.server.command(all[0], &all[1..]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: {err}");
    }
    assert!(!attached(pair, "v0b"), "{args:?} left a program attached");
}

/// Whether `dev` in the server namespace has an XDP program attached (`ip link` shows it).
fn attached(pair: &Pair, dev: &str) -> bool {
    let out = pair.server.exec(&["ip", "link", "show", "dev", dev]);
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One ICMP echo from the client namespace to the server, over a raw socket (read and written
/// through std's datagram calls, which work on any datagram-like socket).
fn icmp_echo(pair: &Pair) -> bool {
    in_netns(&pair.client.path(), || {
        use socket2::{Domain, Protocol, Socket, Type};
        let raw = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4)).unwrap();
        let s: std::net::UdpSocket = raw.into();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut req = [8u8, 0, 0, 0, 0x12, 0x34, 0, 1, b'n', b's'];
        let sum = req
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum::<u32>();
        let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
        req[2..4].copy_from_slice(&sum.to_be_bytes());
        s.send_to(&req, format!("{SERVER_ADDR}:0")).unwrap();
        let start = Instant::now();
        let mut b = [0u8; 1500];
        while start.elapsed() < Duration::from_secs(3) {
            let Ok((n, _)) = s.recv_from(&mut b) else {
                return false;
            };
            // The IPv4 header (IHL words), then ICMP type 0 (echo reply) with our id.
            let ihl = usize::from(b[0] & 0x0f) * 4;
            if n >= ihl + 8 && b[ihl] == 0 && b[ihl + 4..ihl + 6] == [0x12, 0x34] {
                return true;
            }
        }
        false
    })
}

#[test]
fn an_xdp_server_echoes_socket_clients_and_leaves_the_rest_to_the_kernel() {
    if !usable() {
        return;
    }
    let pair = Pair::create(1);
    let listen = format!("{SERVER_ADDR}:4321");
    let server = Server::start(&pair, &["--listen", &listen, "--xdp", "v0b"]);
    assert!(attached(&pair, "v0b"));
    let mut sent = 0;
    for size in ["28", "100", "1000", "1472"] {
        let s = client(&pair, &["--count", "300", "--size", size, "--wait", "spin"])
            .unwrap_or_else(|e| panic!("size {size}: {e}"));
        assert_eq!(
            (s.received, s.lost, s.corrupted, s.duplicated),
            (300, 0, 0, 0),
            "size {size}: {s:?}"
        );
        sent += 300;
    }
    // The kernel still owns everything else on v0b: ARP (the neighbour entry flushed first),
    // ICMP echo, and a kernel socket on another port.
    pair.client.sh("ip neigh flush dev v0a");
    assert!(
        icmp_echo(&pair),
        "no ICMP echo reply through the XDP interface"
    );
    let kernel_server = Server::start(
        &pair,
        &[
            "--listen",
            &format!("{SERVER_ADDR}:5000"),
            "--max-pps-per-source",
            "0",
            "--duration",
            "20",
        ],
    );
    client_at(&pair, 5000, &["--count", "50"])
        .unwrap_or_else(|e| panic!("a kernel socket on another port of v0b: {e}"));
    drop(kernel_server);
    let summary = server.stop();
    let xdp = summary
        .xdp
        .clone()
        .expect("the summary reports the XDP path");
    assert_eq!(xdp.dev, "v0b");
    assert_eq!(xdp.bind, "copy", "veth has no AF_XDP zero-copy");
    assert!(summary.echoed >= sent, "{summary:?}");
    assert_eq!(summary.wait, "xdp-spin");
    wait_until(
        "the program is still attached after the server exited",
        || !attached(&pair, "v0b"),
    );
}

#[test]
fn an_xdp_client_talks_to_socket_and_xdp_servers() {
    if !usable() {
        return;
    }
    let pair = Pair::create(1);
    let listen = format!("{SERVER_ADDR}:4321");
    for server_args in [
        vec![
            "--listen",
            &listen,
            "--wait",
            "spin",
            "--max-pps-per-source",
            "0",
        ],
        vec!["--listen", &listen, "--xdp", "v0b"],
    ] {
        let server = Server::start(&pair, &server_args);
        let s = client(
            &pair,
            &[
                "--count", "2000", "--size", "64", "--wait", "spin", "--xdp", "v0a",
            ],
        )
        .unwrap_or_else(|e| panic!("{server_args:?}: {e}"));
        assert_eq!(
            (s.received, s.corrupted),
            (2000, 0),
            "{server_args:?}: {s:?}"
        );
        let x = s.xdp.expect("the client summary reports the XDP path");
        assert_eq!(x.dev, "v0a");
        let summary = server.stop();
        assert!(summary.echoed >= 2000);
    }
    // The client's program went with it.
    let out = pair.client.exec(&["ip", "link", "show", "dev", "v0a"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("prog/xdp"));
    let _ = CLIENT_ADDR;
}

#[test]
fn a_server_killed_with_sigkill_leaves_nothing_attached() {
    if !usable() {
        return;
    }
    let pair = Pair::create(2);
    let listen = format!("{SERVER_ADDR}:4321");
    let mut server = Server::start(&pair, &["--listen", &listen, "--xdp", "v0b"]);
    assert!(attached(&pair, "v0b"));
    // A second server on the same device is refused, naming the cause.
    let out = pair
        .server
        .command(
            BIN,
            &[
                "bench",
                "udp-echo",
                "server",
                "--listen",
                "10.77.0.2:4322",
                "--xdp",
                "v0b",
                "--duration",
                "1",
            ],
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("v0b") && err.contains("already"), "{err}");
    let child = server.child.take().unwrap();
    nix_kill(child.id(), 9);
    let _ = child.wait_with_output();
    wait_until("a program stayed attached after SIGKILL", || {
        !attached(&pair, "v0b")
    });
}

#[test]
fn bad_interfaces_and_users_are_refused_by_name() {
    if !usable() {
        return;
    }
    let pair = Pair::create(1);
    let listen = format!("{SERVER_ADDR}:4321");
    let as_root = |args: &[&str], needle: &str| refused(&pair, &[], args, &[needle]);
    as_root(&["--listen", &listen, "--xdp", "lo"], "loopback");
    as_root(&["--listen", &listen, "--xdp", "v0b:7"], "rx queues");
    as_root(&["--listen", &listen, "--xdp", "nosuch0"], "nosuch0");
    as_root(
        &["--listen", "10.77.0.2:0", "--xdp", "v0b"],
        "--listen with a port",
    );
    // The host's route out: refused unless asked.
    pair.server.sh("ip route add default via 10.77.0.1 dev v0b");
    as_root(&["--listen", &listen, "--xdp", "v0b"], "default route");
    let allowed = Server::start(
        &pair,
        &[
            "--listen",
            &listen,
            "--xdp",
            "v0b",
            "--xdp-allow-default-route",
        ],
    );
    assert!(attached(&pair, "v0b"));
    drop(allowed.stop());
    wait_until("detached", || !attached(&pair, "v0b"));
    // Not root: the kernel refuses, and the message says what is missing.
    let setpriv = Command::new("setpriv")
        .arg("--help")
        .output()
        .is_ok_and(|o| o.status.success());
    if !setpriv {
        common::cannot_run("needs setpriv (util-linux) to run as another user");
        return;
    }
    refused(
        &pair,
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ],
        &[
            "--listen",
            &listen,
            "--xdp",
            "v0b",
            "--xdp-allow-default-route",
        ],
        &["v0b", "needs root"],
    );
}
