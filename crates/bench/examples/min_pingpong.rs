//! Minimal UDP ping-pong client or echo server (std only): a floor to compare the benchmark's
//! own per-round-trip overhead against. `min_pingpong client ADDR SECS` / `min_pingpong server ADDR`.
use std::net::UdpSocket;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args[1].as_str() {
        "server" => {
            let s = UdpSocket::bind(&args[2]).unwrap();
            let mut buf = [0u8; 65536];
            loop {
                let (n, from) = s.recv_from(&mut buf).unwrap();
                s.send_to(&buf[..n], from).unwrap();
            }
        }
        _ => {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.connect(&args[2]).unwrap();
            if std::env::var_os("TMO").is_some() {
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            }
            let secs: f64 = args[3].parse().unwrap();
            let out = [0u8; 32];
            let mut buf = [0u8; 2048];
            let mut v = Vec::new();
            let end = Instant::now() + Duration::from_secs_f64(secs);
            while Instant::now() < end {
                let t = Instant::now();
                s.send(&out).unwrap();
                s.recv(&mut buf).unwrap();
                v.push(t.elapsed().as_nanos() as u64);
            }
            v.sort_unstable();
            println!(
                "n={} p50={:.3}us p99={:.3}us",
                v.len(),
                v[v.len() / 2] as f64 / 1e3,
                v[v.len() * 99 / 100] as f64 / 1e3
            );
        }
    }
}
