//! Run to completion (`Config::app_driven`): the application's threads read the channels
//! when they wait, the endpoint's one standby thread reads when none does, and the channel
//! list follows a channel's death and replacement.

mod common;

use common::*;
use netchannel::{Config, DrivenChannel, Driver, Endpoint, Pumped, SocketOptions, VSocket};
use std::io::{Read, Write};
use std::os::fd::BorrowedFd;
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

const MESSAGES: usize = 100;
const SIZE: usize = 1000;

/// What an application thread does in its event loop: waits on every channel's socket (as
/// a watcher) and reads what arrived itself. Returns the frames it handled.
fn drive_once(d: &Driver) -> usize {
    let chans: Vec<DrivenChannel> = d.channels();
    let fds: Vec<BorrowedFd<'_>> = chans.iter().map(|c| c.fd()).collect();
    let ready = {
        let _w = netchannel::watch(&chans);
        netsteer_sock::tcp::wait_any_readable(&fds, 100).unwrap()
    };
    let mut frames = 0;
    for (c, r) in chans.iter().zip(ready) {
        if r && let Pumped::Frames(n) = c.pump() {
            frames += n;
        }
    }
    frames
}

/// Echoes `MESSAGES` messages on the first connection to port 9, reading only through
/// `drive_once`; returns the frames it pumped.
fn driven_echo(server: &Endpoint) -> (usize, VSocket) {
    let d = server
        .driver()
        .expect("an app-driven endpoint has a driver")
        .clone();
    let listener = server.bind(9).unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let mut frames = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    let sock = loop {
        if let Poll::Ready(s) = listener.poll_accept(&mut cx) {
            break s.unwrap();
        }
        assert!(Instant::now() < deadline, "no connection came");
        frames += drive_once(&d);
    };
    let mut echoed = 0;
    let mut buf = vec![0u8; 64 * 1024];
    while echoed < MESSAGES * SIZE {
        match sock.poll_read(&mut cx, &mut buf) {
            Poll::Ready(n) => {
                let n = n.unwrap();
                assert!(n > 0, "the client closed early");
                (&sock).write_all(&buf[..n]).unwrap();
                echoed += n;
            }
            Poll::Pending => {
                assert!(Instant::now() < deadline, "the echo stalled");
                frames += drive_once(&d);
            }
        }
    }
    (frames, sock)
}

fn client_round_trips(client: &Endpoint, addr: std::net::SocketAddr) -> VSocket {
    let mut s = client.connect(addr, 9, SocketOptions::default()).unwrap();
    let mut back = vec![0u8; SIZE];
    for i in 0..MESSAGES {
        let msg: Vec<u8> = (0..SIZE).map(|k| byte(i as u64, k as u64)).collect();
        s.write_all(&msg).unwrap();
        s.read_exact(&mut back).unwrap();
        assert_eq!(back, msg, "message {i} came back changed");
    }
    s
}

fn driven(standby_after: Duration) -> Config {
    Config {
        app_driven: true,
        standby_after,
        ..Config::default()
    }
}

/// With the standby held off, every frame the server received was read by the application
/// thread's own pumps (its channels' frame counters agree exactly), and nothing else was
/// needed: OPEN, data and the replies' credits all moved.
#[test]
fn the_application_thread_reads_every_frame_itself() {
    let (server, client) = pair(driven(Duration::from_secs(3600)), Config::default());
    let addr = server.local_addr().unwrap();
    let srv = thread::spawn(move || {
        let (frames, sock) = driven_echo(&server);
        (frames, sock, server)
    });
    let s = client_round_trips(&client, addr);
    let (frames, sock, server) = srv.join().unwrap();
    let got: u64 = server.stats().sessions[0]
        .channels
        .iter()
        .map(|c| c.frames_in)
        .sum();
    assert!(frames > MESSAGES, "only {frames} frames pumped");
    assert_eq!(
        frames as u64, got,
        "the application thread pumped {frames} of the {got} frames that arrived"
    );
    drop((s, sock));
}

/// A program that never waits through the driver (here: only the blocking calls) is still
/// served: the standby threads read for it.
#[test]
fn the_standby_reads_when_no_thread_waits() {
    let (server, client) = pair(driven(Duration::from_millis(1)), Config::default());
    let addr = server.local_addr().unwrap();
    let listener = server.bind(9).unwrap();
    let srv = thread::spawn(move || {
        let mut s = listener.accept_timeout(Duration::from_secs(20)).unwrap();
        let mut buf = vec![0u8; SIZE];
        for _ in 0..MESSAGES {
            s.read_exact(&mut buf).unwrap();
            s.write_all(&buf).unwrap();
        }
        s
    });
    let c = client_round_trips(&client, addr);
    let s = srv.join().unwrap();
    assert_eq!(server.driver().unwrap().channels().len(), 3);
    drop((c, s));
}

/// The connecting side drives too: its OPEN waits read the OPEN_ACK themselves. A channel
/// killed under it leaves the driver's list (the generation moves), the re-dialled one joins
/// it, and the socket goes on.
#[test]
fn a_dead_channel_leaves_the_list_and_its_replacement_joins() {
    let cfg = Config {
        latency_channels: 0,
        ..driven(Duration::from_millis(1))
    };
    let (server, client) = pair(Config::default(), cfg);
    let addr = server.local_addr().unwrap();
    let listener = server.bind(9).unwrap();
    let srv = thread::spawn(move || {
        let mut s = listener.accept_timeout(Duration::from_secs(20)).unwrap();
        let mut buf = vec![0u8; SIZE];
        while s.read_exact(&mut buf).is_ok() {
            s.write_all(&buf).unwrap();
        }
    });
    let d = client.driver().unwrap().clone();
    let mut s = client.connect(addr, 9, SocketOptions::default()).unwrap();
    let before: Vec<u64> = d.channels().iter().map(|c| c.key()).collect();
    assert_eq!(before.len(), 2);
    let generation = d.generation();
    client.break_channel(0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut back = vec![0u8; SIZE];
    let mut i = 0u64;
    loop {
        let msg: Vec<u8> = (0..SIZE).map(|k| byte(i, k as u64)).collect();
        s.write_all(&msg).unwrap();
        s.read_exact(&mut back).unwrap();
        assert_eq!(back, msg);
        i += 1;
        let now: Vec<u64> = d.channels().iter().map(|c| c.key()).collect();
        if now.len() == 2 && now.iter().any(|k| !before.contains(k)) {
            assert!(
                d.generation() >= generation + 2,
                "death and rejoin both move it"
            );
            assert!(
                d.channels().iter().all(DrivenChannel::is_alive),
                "a dead channel stayed listed"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the channel list never changed: {now:?}"
        );
        thread::sleep(Duration::from_millis(10));
    }
    drop(s);
    srv.join().unwrap();
}
