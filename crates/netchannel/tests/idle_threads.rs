//! Issue 53: channels cost no thread while idle. Alone in its test binary, so every
//! netchannel thread of this process is this test's.

mod common;

use common::*;
use netchannel::{Config, Endpoint, SocketOptions, VSocket};
use std::io::{Read, Write};
use std::thread;
use std::time::Duration;

/// This process's threads whose name starts with `prefix` (/proc/self/task/*/comm).
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.trim_end().starts_with(prefix))
        })
        .count()
}

fn echo(s: &mut VSocket, n: usize) {
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf).unwrap();
    s.write_all(&buf).unwrap();
}

/// Three client endpoints of three channels each to one app-driven server: one standby
/// thread serves the server's nine channels, the writers that carried the traffic end once
/// nothing is queued for a linger, and a later 4 MiB burst on an idle channel starts them
/// again and comes back whole.
#[test]
fn idle_channels_cost_no_thread_and_one_standby_serves_them_all() {
    let server_cfg = Config {
        app_driven: true,
        standby_after: Duration::from_millis(1),
        ..Config::default()
    };
    let (server, first) = pair(server_cfg, Config::default());
    let addr = server.local_addr().unwrap();
    let listener = server.bind(9).unwrap();
    const BURST: usize = 4 << 20;
    let srv = thread::spawn(move || {
        let mut socks: Vec<VSocket> = (0..3)
            .map(|_| {
                let mut s = listener.accept_timeout(Duration::from_secs(20)).unwrap();
                echo(&mut s, 1000);
                s
            })
            .collect();
        // After the idle spell: the burst on the first socket, echoed.
        echo(&mut socks[0], BURST);
        (socks, server)
    });
    let clients: Vec<Endpoint> = std::iter::once(first)
        .chain((0..2).map(|_| Endpoint::new(Config::default()).unwrap()))
        .collect();
    let mut held: Vec<VSocket> = clients
        .iter()
        .map(|c| {
            let mut s = c.connect(addr, 9, SocketOptions::default()).unwrap();
            let msg: Vec<u8> = (0..1000).map(|k| byte(1, k)).collect();
            s.write_all(&msg).unwrap();
            let mut back = vec![0u8; 1000];
            s.read_exact(&mut back).unwrap();
            assert_eq!(back, msg);
            s
        })
        .collect();
    // Only the server is app-driven: the clients read with reader threads.
    assert_eq!(
        threads_named("nc-standby"),
        1,
        "one standby for nine channels"
    );
    // A thread names itself once it runs, so a reader spawned a moment ago may still carry
    // its parent's name: wait (bounded) for all nine to show.
    let t = std::time::Instant::now();
    while threads_named("nc-rx") < 9 && t.elapsed() < Duration::from_secs(10) {
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(threads_named("nc-rx"), 9, "the clients' reader threads");
    // Idle past the writers' linger: no writer thread is left anywhere.
    thread::sleep(netchannel::WRITER_LINGER + Duration::from_millis(1500));
    assert_eq!(
        threads_named("nc-tx"),
        0,
        "writer threads left on idle channels"
    );
    // A burst on an idle channel still goes out and comes back whole.
    let big: Vec<u8> = (0..BURST).map(|k| byte(7, k as u64)).collect();
    let c = &mut held[0];
    let mut got = vec![0u8; BURST];
    thread::scope(|sc| {
        let w = sc.spawn(|| (&*c).write_all(&big).unwrap());
        (&*c).read_exact(&mut got).unwrap();
        w.join().unwrap();
    });
    assert!(got == big, "the burst came back changed");
    let (socks, _server) = srv.join().unwrap();
    drop((held, socks, clients));
}
