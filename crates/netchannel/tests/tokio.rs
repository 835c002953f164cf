//! The async face: a tokio task streams through AsyncVSocket while another reads.
#![cfg(feature = "tokio")]

mod common;

use common::*;
use netchannel::{AsyncVSocket, Config, SocketOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "current_thread")]
async fn async_streams_round_trip_with_backpressure() {
    let small = Config {
        window: 128 * 1024,
        max_frame: 16 * 1024,
        channel_limit: 256 * 1024,
        ..Config::default()
    };
    let (server, client) = pair(small.clone(), small);
    let listener = server.bind(11).unwrap();
    let s = client
        .connect(server.local_addr().unwrap(), 11, SocketOptions::default())
        .unwrap();
    let a = listener.accept().unwrap();
    let mut w = AsyncVSocket::new(s);
    let mut r = AsyncVSocket::new(a);
    let total = 8usize << 20;
    // One thread runs both tasks, so the writer must yield when credit runs out.
    let writer = async move {
        let mut buf = vec![0u8; 100_000];
        let mut off = 0;
        while off < total {
            let n = buf.len().min(total - off);
            fill(3, off as u64, &mut buf[..n]);
            w.write_all(&buf[..n]).await.unwrap();
            off += n;
        }
        w.shutdown().await.unwrap();
        w
    };
    let reader = async move {
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        got
    };
    let (_w, got) = tokio::join!(writer, reader);
    assert_eq!(got.len(), total);
    assert!(got.iter().enumerate().all(|(i, &b)| b == byte(3, i as u64)));
}
