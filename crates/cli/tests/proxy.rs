//! `netsteer netchannel proxy` between two lab namespaces, with the real Redis: unmodified
//! `redis-server` behind the server proxy, unmodified `redis-benchmark` and a reply-checking
//! RESP client in front of the client proxy, over 1, 2 and 4 channels. With 2 and 4, one
//! channel's TCP connection is killed from outside (`ss -K`) in the middle of the run: the
//! benchmark must finish without an error, every reply must be right, both proxies must have
//! carried the same bytes, and the channel must come back.

mod common;

use common::*;
use netsteer_lab::pair::SERVER_ADDR;
use std::net::TcpStream;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");
const CHANNEL_PORT: u16 = 7700;
const PROXY_PORT: u16 = 6380;

/// The namespace tests start several processes each; one at a time keeps a busy 2-CPU
/// machine from timing them out.
static SERIAL: Mutex<()> = Mutex::new(());

fn tools_present() -> Result<(), String> {
    root_and_tools(REDIS_TOOLS)
}

fn spawn(ns: &Netns, program: &str, args: &[&str]) -> Running {
    let mut all = vec![program];
    all.extend_from_slice(args);
    Running::spawn(ns, &all, &[], Stdio::null())
}

/// The client proxy's channel connections, as "local-port" strings, from `ss`.
fn channel_ports(ns: &Netns) -> Vec<String> {
    let out = ns.exec(&[
        "ss",
        "-tnH",
        "state",
        "established",
        &format!("( dport = :{CHANNEL_PORT} )"),
    ]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter_map(|a| a.rsplit(':').next().map(str::to_string))
        .collect()
}

/// The numbers of a proxy's exit summary: (bytes in, bytes out, channels alive, total).
fn summary_numbers(stdout: &str) -> (u64, u64, String) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("netchannel proxy"))
        .unwrap_or_else(|| panic!("no summary in {stdout:?}"));
    let num_before = |word: &str| -> u64 {
        let i = line
            .find(word)
            .unwrap_or_else(|| panic!("{word} in {line}"));
        line[..i]
            .trim_end()
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let alive = line
        .split("channels alive ")
        .nth(1)
        .and_then(|t| t.split(',').next())
        .unwrap_or_default()
        .to_string();
    (num_before(" bytes in"), num_before(" out;"), alive)
}

fn run_through_proxy(channels: u16, kill: bool) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let pair = Pair::create(1);
    let redis = spawn(&pair.server, REDIS_SERVER[0], &REDIS_SERVER[1..]);
    wait_port(&pair.server, "127.0.0.1", 6379);
    let listen = format!("{SERVER_ADDR}:{CHANNEL_PORT}");
    let server = spawn(
        &pair.server,
        BIN,
        &[
            "netchannel",
            "proxy",
            "server",
            "--listen",
            &listen,
            "--backend",
            "6379=127.0.0.1:6379",
        ],
    );
    wait_port(&pair.server, SERVER_ADDR, CHANNEL_PORT);
    let route = format!("127.0.0.1:{PROXY_PORT}=6379");
    let ch = channels.to_string();
    let client = spawn(
        &pair.client,
        BIN,
        &[
            "netchannel",
            "proxy",
            "client",
            "--peer",
            &listen,
            "--route",
            &route,
            "--channels",
            &ch,
            "--latency-channels",
            "0",
        ],
    );
    wait_port(&pair.client, "127.0.0.1", PROXY_PORT);
    let port = PROXY_PORT.to_string();
    // Unmodified redis-benchmark through the proxy: GET/SET of 4 KiB values, 16 deep.
    let bench = spawn(
        &pair.client,
        "redis-benchmark",
        &[
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "set,get",
            "-n",
            "60000",
            "-d",
            "4096",
            "-P",
            "16",
            "-c",
            "8",
            "-e",
            "-q",
        ],
    );
    let mut bench = bench;
    let mut killed = None;
    let client_ns = pair.client.path();
    in_netns(&client_ns, || {
        let stream = TcpStream::connect(("127.0.0.1", PROXY_PORT)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        resp::check_replies(stream, 0, 200, |round, _, _| {
            if round == 60 && kill {
                let running = bench.0.as_mut().unwrap().try_wait().unwrap().is_none();
                assert!(
                    running,
                    "redis-benchmark ended before the kill: make the run longer"
                );
                let ports = channel_ports(&pair.client);
                assert_eq!(ports.len(), channels as usize, "{ports:?}");
                let victim = &ports[0];
                let out = pair.client.exec(&[
                    "ss",
                    "-K",
                    "-tn",
                    "state",
                    "established",
                    &format!("( dport = :{CHANNEL_PORT} and sport = :{victim} )"),
                ]);
                assert!(out.status.success(), "ss -K: {out:?}");
                assert!(
                    !channel_ports(&pair.client).contains(victim),
                    "ss -K left connection {victim} up"
                );
                killed = Some(victim.clone());
            }
        });
    });
    assert_eq!(killed.is_some(), kill);
    let out = bench.0.take().unwrap().wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "redis-benchmark: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("ERR") && !text.contains("Error"), "{text}");
    assert!(text.contains("SET:") && text.contains("GET:"), "{text}");
    if kill {
        // The dead channel is re-dialed: as many connections as before.
        let deadline = Instant::now() + Duration::from_secs(10);
        while channel_ports(&pair.client).len() < channels as usize && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(channel_ports(&pair.client).len(), channels as usize);
    }
    // Both proxies carried exactly the same bytes each way: nothing lost or duplicated.
    let (c_out, c_err) = client.stop();
    let (s_out, s_err) = server.stop();
    let (c_in, c_back, c_alive) = summary_numbers(&c_out);
    let (s_in, s_back, _) = summary_numbers(&s_out);
    assert_eq!(
        (c_in, c_back),
        (s_back, s_in),
        "client {c_out} / server {s_out}"
    );
    assert!(c_in > 60_000 * 4096, "{c_out}");
    // The client stopped first, with every channel up (the server then saw them all close
    // and forgot the session).
    assert_eq!(c_alive, format!("{channels}/{channels}"), "{c_out}");
    if kill {
        assert!(c_err.contains("died"), "client log: {c_err}");
        assert!(c_err.contains("re-opened"), "client log: {c_err}");
        assert!(s_err.contains("died"), "server log: {s_err}");
    }
    for log in [&c_err, &s_err] {
        assert!(!log.contains("resetting"), "a connection was reset: {log}");
    }
    drop(redis);
}

fn live(channels: u16, kill: bool) {
    if let Err(why) = tools_present() {
        return cannot_run(&why);
    }
    run_through_proxy(channels, kill);
}

#[test]
fn redis_through_the_proxy_over_one_channel() {
    live(1, false);
}

#[test]
fn redis_through_the_proxy_over_two_channels_survives_a_killed_channel() {
    live(2, true);
}

#[test]
fn redis_through_the_proxy_over_four_channels_survives_a_killed_channel() {
    live(4, true);
}
