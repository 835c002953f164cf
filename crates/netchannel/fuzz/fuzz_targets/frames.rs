//! The channel decoder on arbitrary bytes: HELLO first, then frames, as a channel reader sees
//! them. It must never panic, never return a frame over the limit, and always end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netchannel::frame_io::FrameReader;
use netchannel::wire::{HEADER_LEN, HELLO_LEN, Hello};

fuzz_target!(|data: &[u8]| {
    if data.len() >= HEADER_LEN + HELLO_LEN {
        let hello: &[u8; HEADER_LEN + HELLO_LEN] =
            data[..HEADER_LEN + HELLO_LEN].try_into().unwrap();
        let _ = Hello::decode(hello);
    }
    let limit = 64 * 1024;
    let mut r = FrameReader::with_staging(data, limit, 4096);
    loop {
        match r.next_frame() {
            Ok(Some((h, payload))) => {
                assert_eq!(payload.len(), h.len as usize);
                assert!(h.len <= limit);
            }
            Ok(None) | Err(_) => break,
        }
    }
});
