//! A socket's reassembly under an arbitrary (hostile) sequence of pieces, FINs and reads: it
//! must never panic, never hold more than its window or `max_pieces` out-of-order pieces, and
//! return bytes only in order (merged pieces included).
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use netchannel::reorder::Reassembly;

fuzz_target!(|data: &[u8]| {
    let window = 4096u64;
    let mut r = Reassembly::new(window);
    let mut out = 0u64;
    let mut buf = [0u8; 512];
    for op in data.chunks(5) {
        if op.len() < 5 {
            break;
        }
        let seq = u64::from(u16::from_le_bytes([op[1], op[2]]));
        let len = usize::from(u16::from_le_bytes([op[3], op[4]]) % 2048);
        match op[0] % 4 {
            0 | 1 => {
                // The payload encodes its own offset so order can be checked on the way out.
                let piece: Bytes = (0..len).map(|i| ((seq + i as u64) % 251) as u8).collect();
                let _ = r.insert(seq, piece, op[0] & 0x10 != 0);
            }
            2 => {
                let _ = r.set_fin(seq);
            }
            _ => {
                let n = r.read(&mut buf[..(len % 512).max(1)]);
                for (k, &b) in buf[..n].iter().enumerate() {
                    assert_eq!(b, ((out + k as u64) % 251) as u8);
                }
                out += n as u64;
            }
        }
        assert!(r.held() <= window);
        assert!(r.out_of_order_pieces() <= netchannel::reorder::max_pieces(window));
        assert_eq!(r.consumed(), out);
    }
});
