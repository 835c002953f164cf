//! `netsteer bench kv` against real memcached and redis-server, each run inside a namespace of
//! its own (root; deleted by a drop guard): every scheduled request completes, GETs find the
//! keys the run set, the JSON summary reads back into the library's type, and a server of the
//! other protocol is an error naming it, not a hang or a made-up result.

mod common;

use common::{Netns, Proc, REDIS_SERVER, is_root};
use netsteer_bench::kv::{KvSummary, Protocol};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");

fn usable() -> bool {
    let have = |t: &str| {
        Command::new(t)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !is_root() || !have("memcached") || !have("redis-server") {
        common::cannot_run("needs root, memcached and redis-server");
        return false;
    }
    true
}

fn kv(ns: &Netns, args: &[&str]) -> std::process::Output {
    let mut full = vec![BIN, "bench", "kv"];
    full.extend_from_slice(args);
    ns.exec(&full)
}

/// Waits until a client run succeeds (the server is listening).
fn wait_up(ns: &Netns, target: &str, protocol: &str) {
    let t = Instant::now();
    while !kv(
        ns,
        &[
            target,
            "--protocol",
            protocol,
            "--rate",
            "10",
            "--duration",
            "0.1",
            "--keys",
            "1",
        ],
    )
    .status
    .success()
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{protocol} never answered"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_fixed_rate_against_memcached_and_redis_completes_every_request() {
    if !usable() {
        return;
    }
    let ns = Netns::create();
    let _mc = Proc(
        ns.command(
            "memcached",
            &["-u", "nobody", "-l", "127.0.0.1", "-p", "11211", "-m", "64"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap(),
    );
    let _rd = Proc(
        ns.command(REDIS_SERVER[0], &REDIS_SERVER[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    for (protocol, target) in [
        (Protocol::Memcache, "127.0.0.1:11211"),
        (Protocol::Redis, "127.0.0.1:6379"),
    ] {
        let name = format!("{protocol:?}").to_lowercase();
        wait_up(&ns, target, &name);
        let out = kv(
            &ns,
            &[
                target,
                "--protocol",
                &name,
                "--rate",
                "2000",
                "--duration",
                "1",
                "--connections",
                "2",
                "--keys",
                "200",
                "--value-size",
                "300",
                "--json",
            ],
        );
        common::succeeded(&out);
        let s: KvSummary = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(s.protocol, protocol);
        // A schedule of 2,000 a second for 1 s: every request is sent and answered, whatever
        // the machine's load (a late one is sent late, not dropped).
        assert_eq!(s.transactions, 2000, "{s:?}");
        assert_eq!(s.misses, 0, "{s:?}");
        let l = s.latency_ns.unwrap();
        assert!(l.min > 0 && l.p50 <= l.p99 && l.p99 <= l.max, "{l:?}");
    }
    // memcached's port asked in RESP: an error naming the server.
    let out = kv(
        &ns,
        &[
            "127.0.0.1:11211",
            "--protocol",
            "redis",
            "--rate",
            "10",
            "--duration",
            "0.2",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("127.0.0.1:11211"), "{err}");
}
