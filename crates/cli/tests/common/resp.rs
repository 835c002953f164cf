//! The reply-checking RESP client the Redis tests share (the proxy pair, the preload).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// The value the checker stores under key `i` (4 KiB, different for every key).
pub fn value(i: u64) -> Vec<u8> {
    (0..4096u64)
        .map(|k| b'a' + ((i.wrapping_mul(2654435761) ^ k.wrapping_mul(40503)) % 26) as u8)
        .collect()
}

pub fn read_line(r: &mut impl BufRead) -> String {
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    assert!(l.ends_with("\r\n"), "truncated reply line {l:?}");
    l.trim_end().to_string()
}

/// A RESP client that checks every reply: `rounds` pipelines of 16 SETs then 16 GETs of
/// 4 KiB values, calling `at_round(r, writer, reader)` before round r (a kill, a BGSAVE).
pub fn check_replies(
    stream: TcpStream,
    first_key: u64,
    rounds: u64,
    mut at_round: impl FnMut(u64, &mut TcpStream, &mut BufReader<TcpStream>),
) {
    let mut w = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    for round in 0..rounds {
        at_round(round, &mut w, &mut r);
        let keys: Vec<u64> = (0..16).map(|k| first_key + round * 16 + k).collect();
        let mut req = Vec::new();
        for &k in &keys {
            let key = format!("nc:{k}");
            let v = value(k);
            write!(
                req,
                "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n",
                key.len(),
                v.len()
            )
            .unwrap();
            req.extend_from_slice(&v);
            req.extend_from_slice(b"\r\n");
        }
        for &k in &keys {
            let key = format!("nc:{k}");
            write!(req, "*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()).unwrap();
        }
        w.write_all(&req).unwrap();
        for &k in &keys {
            assert_eq!(read_line(&mut r), "+OK", "SET nc:{k}");
        }
        for &k in &keys {
            assert_eq!(read_line(&mut r), "$4096", "GET nc:{k}");
            let mut got = vec![0u8; 4096 + 2];
            r.read_exact(&mut got).unwrap();
            assert!(got[..4096] == value(k)[..], "GET nc:{k}: wrong value");
            assert_eq!(&got[4096..], b"\r\n");
        }
    }
}
