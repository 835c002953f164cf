//! `netsteer bench tcp-stream` and `tcp-rr` through the binary: JSON Lines read back into the
//! library's message types (lossless), both sides' figures in one client summary, exit codes
//! for verification failures and errors.

mod common;

use common::Proc;
use netsteer_bench::report::{ErrorMessage, Kind, Role};
use netsteer_bench::tcp::message::{
    RrInterval, RrSummary, ServerSummary, ServerTest, StreamInterval, StreamSummary,
};
use serde::de::DeserializeOwned;
use std::process::{Child, Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");

fn server(listen: &str, extra: &[&str]) -> (Proc, String) {
    let (child, line) = common::spawn_with_start_line(
        Command::new(BIN)
            .args([
                "bench",
                "tcp-stream",
                "server",
                "--listen",
                listen,
                "--json",
            ])
            .args(extra)
            .stdout(Stdio::piped()),
    );
    // "netsteer: tcp-stream/tcp-rr server on 127.0.0.1:40123"
    let addr = line
        .trim()
        .rsplit(" on ")
        .next()
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    (Proc(child), addr)
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// Parses one line into `T` and checks that writing it back gives the same line.
fn exact<T: DeserializeOwned + serde::Serialize>(line: &str) -> T {
    let m: T = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(
        serde_json::to_string(&m).unwrap(),
        line,
        "lossless round trip"
    );
    m
}

fn lines(out: &Output) -> Vec<(serde_json::Value, String)> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).expect("every line is one JSON object");
            (v, l.to_string())
        })
        .collect()
}

#[test]
fn stream_json_round_trip_on_ipv4_and_ipv6() {
    for listen in ["127.0.0.1:0", "[::1]:0"] {
        let (_srv, addr) = server(listen, &[]);
        for zc in [false, true] {
            let mut args = vec![
                "bench",
                "tcp-stream",
                "client",
                &addr,
                "--flows",
                "2",
                "--duration",
                "1",
                "--interval",
                "0.25",
                "--verify",
                "--json",
            ];
            if zc {
                args.extend(["--zerocopy-recv", "--zerocopy-send", "--mss", "4108"]);
            }
            let out = run(&args);
            common::succeeded(&out);
            let (mut intervals, mut summaries) = (Vec::new(), Vec::new());
            for (v, l) in lines(&out) {
                assert_eq!(
                    (v["bench"].as_str(), v["role"].as_str()),
                    (Some("tcp-stream"), Some("client"))
                );
                match v["type"].as_str().unwrap() {
                    "interval" => intervals.push(exact::<StreamInterval>(&l)),
                    "summary" => {
                        // The documented keys, by name.
                        for k in [
                            "bits_per_second",
                            "bytes",
                            "retransmits",
                            "cpu_us_per_mb",
                            "sleeps_per_mb",
                        ] {
                            assert!(v.get(k).is_some(), "{k} missing: {l}");
                        }
                        for k in ["cpu_us_per_mb", "sleeps_per_mb"] {
                            assert!(v[k]["client"].is_number(), "{k}: {l}");
                            assert!(v[k]["server"].is_number(), "{k}: {l}");
                        }
                        for k in ["rx_mapped_bytes", "rx_copybuf_bytes", "rx_read_bytes"] {
                            assert_eq!(v.get(k).is_some(), zc, "{k}: {l}");
                        }
                        summaries.push(exact::<StreamSummary>(&l));
                    }
                    other => panic!("unexpected type {other}"),
                }
            }
            assert!(intervals.len() >= 3, "{}", intervals.len());
            assert!(
                intervals
                    .iter()
                    .all(|i| i.kind == Kind::Interval && i.flows.len() == 2)
            );
            let [s] = summaries.as_slice() else {
                panic!("{summaries:?}")
            };
            assert_eq!((s.kind, s.role, s.flows), (Kind::Summary, Role::Client, 2));
            assert!(s.verify.as_ref().unwrap().ok);
            assert_eq!(s.bytes, s.sent_bytes);
            assert!(s.bits_per_second > 0.0);
            assert!(s.cost.server.thread_us() > 0);
        }
    }
}

#[test]
fn rr_json_round_trip_and_server_lines() {
    let (mut srv, addr) = server("127.0.0.1:0", &["--duration", "4"]);
    let out = run(&[
        "bench",
        "tcp-rr",
        "client",
        &addr,
        "--duration",
        "1",
        "--interval",
        "0.5",
        "--warmup",
        "0.2",
        "--request-size",
        "64",
        "--response-size",
        "1000",
        "--pipeline",
        "2",
        "--json",
    ]);
    common::succeeded(&out);
    let mut summary = None;
    let mut n_intervals = 0;
    for (v, l) in lines(&out) {
        assert_eq!(v["bench"], "tcp-rr");
        match v["type"].as_str().unwrap() {
            "interval" => {
                exact::<RrInterval>(&l);
                n_intervals += 1;
            }
            "summary" => {
                for k in ["min", "p50", "p90", "p99", "p999", "max", "mean", "stdev"] {
                    assert!(v["latency_ns"][k].is_u64(), "{k}: {l}");
                }
                assert!(v["transactions_per_second"].as_f64().unwrap() > 0.0);
                summary = Some(exact::<RrSummary>(&l));
            }
            other => panic!("unexpected type {other}"),
        }
    }
    assert_eq!(n_intervals, 2);
    let s = summary.unwrap();
    assert_eq!((s.request_size, s.response_size, s.pipeline), (64, 1000, 2));
    let l = s.latency_ns.unwrap();
    assert!(l.min <= l.p50 && l.p50 <= l.p99 && l.p99 <= l.max);

    // The server's own lines: one per test, then its summary when --duration ends.
    let out = srv.0.wait_with_output_ref();
    let mut tests = 0;
    let mut done = false;
    for (v, l) in lines(&out) {
        assert_eq!(v["role"], "server");
        if v.get("test_id").is_some() {
            let t = exact::<ServerTest>(&l);
            assert_eq!((t.bench.as_str(), t.flows), ("tcp-rr", 1));
            assert!(t.transactions > 0 && t.errors.is_empty(), "{t:?}");
            tests += 1;
        } else {
            let s = exact::<ServerSummary>(&l);
            assert_eq!(s.tests, 1);
            done = true;
        }
    }
    assert_eq!((tests, done), (1, true));
}

trait WaitRef {
    fn wait_with_output_ref(&mut self) -> Output;
}

impl WaitRef for Child {
    fn wait_with_output_ref(&mut self) -> Output {
        let mut stdout = Vec::new();
        std::io::Read::read_to_end(self.stdout.as_mut().unwrap(), &mut stdout).unwrap();
        let status = self.wait().unwrap();
        Output {
            status,
            stdout,
            stderr: Vec::new(),
        }
    }
}

#[test]
fn exit_codes_for_corruption_bad_flags_and_dead_servers() {
    let (_srv, addr) = server("127.0.0.1:0", &[]);
    let out = run(&[
        "bench",
        "tcp-stream",
        "client",
        &addr,
        "--duration",
        "0.5",
        "--verify",
        "--inject-corruption",
        "12345",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (v, l) = lines(&out).pop().unwrap();
    assert_eq!(v["type"], "summary");
    let s = exact::<StreamSummary>(&l);
    assert_eq!(
        s.verify.unwrap().problems,
        vec!["flow 0: first corrupt byte at stream offset 12345".to_string()]
    );

    for (args, needle) in [
        (vec!["--flows", "0"], "--flows <N>"),
        (vec!["--write-size", "0"], "--write-size <BYTES>"),
        (vec!["--congestion", "nosuchcc"], "nosuchcc"),
        (vec!["--duration", "-1"], "--duration"),
    ] {
        let mut a = vec!["bench", "tcp-stream", "client", &addr, "--json"];
        a.extend(args);
        let out = run(&a);
        assert_eq!(out.status.code(), Some(2), "{a:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{a:?}: {err}");
    }
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let out = run(&[
        "bench",
        "tcp-rr",
        "client",
        &dead,
        "--json",
        "--duration",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let (_, l) = lines(&out).pop().unwrap();
    let e = exact::<ErrorMessage>(&l);
    assert_eq!(
        (e.kind, e.role, e.bench.as_str()),
        (Kind::Error, Role::Client, "tcp-rr")
    );
    assert!(e.message.contains("refused"), "{}", e.message);
}
