//! `netsteer bench udp-echo` through the binary: JSON Lines read back into the library's
//! message types, IPv6, the error message of a dead server, and interop with a third-party
//! echo server and a raw-bytes client (socat).

mod common;

use common::Proc;

use netsteer_bench::udp_echo::message::{
    ClientInterval, ClientSummary, ErrorMessage, Kind, Role, ServerInterval, ServerSummary,
};
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");

/// Starts a server on an ephemeral port and returns it with the address it printed.
fn server(listen: &str, extra: &[&str]) -> (Proc, String) {
    let (child, line) = common::spawn_with_start_line(
        Command::new(BIN)
            .args(["bench", "udp-echo", "server", "--listen", listen])
            .args(extra)
            .stdout(Stdio::piped()),
    );
    // "netsteer: udp-echo server on 127.0.0.1:40123 (1 thread(s), wait block)"
    let addr = line
        .split(" on ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    (Proc(child), addr)
}

fn parse_client(stdout: &[u8]) -> (Vec<ClientInterval>, Vec<ClientSummary>) {
    let (mut iv, mut sm) = (Vec::new(), Vec::new());
    for line in String::from_utf8_lossy(stdout).lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).expect("every line is one JSON object");
        assert_eq!(v["bench"], "udp-echo");
        assert_eq!(v["role"], "client");
        match v["type"].as_str().unwrap() {
            "interval" => {
                let m: ClientInterval = serde_json::from_str(line).unwrap();
                assert_eq!(
                    serde_json::to_string(&m).unwrap(),
                    line,
                    "lossless round trip"
                );
                iv.push(m);
            }
            "summary" => {
                let m: ClientSummary = serde_json::from_str(line).unwrap();
                assert_eq!(serde_json::to_string(&m).unwrap(), line);
                sm.push(m);
            }
            other => panic!("unexpected type {other}"),
        }
    }
    (iv, sm)
}

#[test]
fn json_lines_read_back_into_types_ipv4_and_ipv6() {
    for listen in ["127.0.0.1:0", "[::1]:0"] {
        let (_srv, addr) = server(listen, &[]);
        let out = Command::new(BIN)
            .args([
                "bench",
                "udp-echo",
                "client",
                &addr,
                "--count",
                "1500",
                "--interval",
                "0.05",
                "--json",
                "--flows",
                "2",
            ])
            .output()
            .unwrap();
        common::succeeded(&out);
        let (intervals, summaries) = parse_client(&out.stdout);
        assert!(!intervals.is_empty());
        assert_eq!(summaries.len(), 1);
        let s = &summaries[0];
        assert_eq!((s.sent, s.received, s.lost), (3000, 3000, 0));
        assert_eq!(s.kind, Kind::Summary);
        let l = s.latency_ns.unwrap();
        assert!(
            l.min <= l.p50
                && l.p50 <= l.p90
                && l.p90 <= l.p99
                && l.p99 <= l.p999
                && l.p999 <= l.max
        );
        assert_eq!(s.target, addr);
    }
}

#[test]
fn server_json_lines() {
    let (srv, addr) = server(
        "127.0.0.1:0",
        &["--json", "--interval", "0.1", "--duration", "1"],
    );
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut buf = [0u8; 64];
    for i in 0..20u8 {
        c.send_to(&[i; 10], &addr).unwrap();
        assert_eq!(c.recv(&mut buf).unwrap(), 10);
    }
    let mut srv = srv;
    let child = &mut srv.0;
    let status = child.wait().unwrap();
    assert!(status.success());
    let mut text = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut text).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let last: ServerSummary = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(
        (last.kind, last.role, last.echoed, last.bytes),
        (Kind::Summary, Role::Server, 20, 200)
    );
    for l in &lines[..lines.len() - 1] {
        let m: ServerInterval = serde_json::from_str(l).unwrap();
        assert_eq!(m.kind, Kind::Interval);
    }
}

#[test]
fn dead_server_gives_an_error_message_and_exit_2() {
    let free = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let out = Command::new(BIN)
        .args([
            "bench",
            "udp-echo",
            "client",
            &free,
            "--timeout",
            "0.1",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    let e: ErrorMessage = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!((e.kind, e.role), (Kind::Error, Role::Client));
    assert!(e.message.contains("no echo from"), "{}", e.message);
    // Bad flags are named.
    for (args, needle) in [
        (vec!["--size", "4"], "--size <BYTES>"),
        (vec!["--cpu", "x"], "--cpu x"),
        (vec!["--wait", "nap"], "nap"),
        (vec!["--interval", "-1"], "--interval"),
    ] {
        let out = Command::new(BIN)
            .args(["bench", "udp-echo", "client", "127.0.0.1:9"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(needle),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn have(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

#[test]
fn interop_with_socat_both_ways() {
    if !have("socat") {
        common::cannot_run("socat is not installed (apt-get install socat)");
        return;
    }
    // Our client against socat's echo (one child per peer, PIPE echoes what it reads).
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _socat = Proc(
        Command::new("socat")
            // -T 2: the per-peer child exits when idle, so nothing outlives the test.
            .args([
                "-T",
                "2",
                &format!("UDP4-LISTEN:{port},fork,reuseaddr"),
                "PIPE",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new(BIN)
        .args([
            "bench",
            "udp-echo",
            "client",
            &format!("127.0.0.1:{port}"),
            "--count",
            "500",
            "--json",
            "--src-port",
            &(port + 1).to_string(),
        ])
        .output()
        .unwrap();
    common::succeeded(&out);
    let (_, s) = parse_client(&out.stdout);
    assert_eq!((s[0].received, s[0].lost, s[0].corrupted), (500, 0, 0));

    // Our server against socat sending raw bytes from stdin and printing the echo.
    let (_srv, addr) = server("127.0.0.1:0", &[]);
    let mut child = Command::new("socat")
        .args(["-t", "1", "-", &format!("UDP4:{addr}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"raw bytes, not ours\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "raw bytes, not ours\n"
    );
}

/// A client's memory is bounded per flow: two latency histograms at most (the interval's and
/// the run's, 256 KiB each) and its buffers, so 64 flows stay under 64 MiB of anonymous memory
/// however long they run. Made up front for every recorder and zeroed each interval, the
/// histograms held 210 MiB for 64 flows (a CI run's guest killed a client for it).
#[test]
fn a_many_flow_client_holds_a_bounded_memory_per_flow() {
    const FLOWS: u64 = 64;
    const BOUND_KIB: u64 = FLOWS * 1024;
    let (_server, addr) = server(
        "127.0.0.1:0",
        &["--max-pps-per-source", "0", "--max-pps", "0"],
    );
    let client = Command::new(BIN)
        .args(["bench", "udp-echo", "client", &addr, "--flows"])
        .arg(FLOWS.to_string())
        .args(["--duration", "3", "--interval", "0.5", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", client.id());
    let anon_kib = || -> Option<u64> {
        let text = std::fs::read_to_string(&status).ok()?;
        let line = text.lines().find(|l| l.starts_with("RssAnon:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let mut most = 0;
    let mut samples = 0;
    let out = {
        let mut child = client;
        while child.try_wait().unwrap().is_none() {
            if let Some(k) = anon_kib() {
                most = most.max(k);
                samples += 1;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    };
    assert!(out.status.success(), "{out:?}");
    let (intervals, summaries) = parse_client(&out.stdout);
    assert!(intervals.len() >= 2 && !summaries.is_empty(), "{out:?}");
    assert!(
        summaries.iter().map(|s| s.received).sum::<u64>() > 0,
        "{summaries:?}"
    );
    assert!(
        samples >= 10,
        "the client's memory was read {samples} times"
    );
    assert!(
        most <= BOUND_KIB,
        "{FLOWS} flows held {most} KiB of anonymous memory (bound {BOUND_KIB} KiB)"
    );
}
