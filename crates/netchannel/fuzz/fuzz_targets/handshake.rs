//! Structure-aware: HELLOs built field by field (so counts such as 0xFFFF are reached at once,
//! not by chance in raw bytes), encoded, decoded, and — when accepted — laid out the way the
//! endpoint and the session lay out a link's channels. Whatever a peer puts in its HELLO, an
//! accepted one must give a layout whose slices and indices stay in bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netchannel::wire::{Class, HEADER_LEN, HELLO_LEN, Hello, MAX_CHANNELS};

fn u16_at(d: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([d.get(i).copied().unwrap_or(0), d.get(i + 1).copied().unwrap_or(0)])
}

fuzz_target!(|data: &[u8]| {
    let hello = Hello {
        version: u16::from(netchannel::wire::VERSION),
        link_id: 7,
        channel_index: u16_at(data, 0),
        class: if data.get(6).copied().unwrap_or(0) & 1 == 0 {
            Class::Throughput
        } else {
            Class::Latency
        },
        throughput_channels: u16_at(data, 2),
        latency_channels: u16_at(data, 4),
        max_frame: u32::from_be_bytes([
            data.get(7).copied().unwrap_or(0),
            data.get(8).copied().unwrap_or(1),
            0,
            0,
        ]),
    };
    let raw: [u8; HEADER_LEN + HELLO_LEN] = hello.encode();
    let Ok(got) = Hello::decode(&raw) else {
        return;
    };
    assert_eq!(got, hello);
    // What the accepting side builds from an accepted HELLO (endpoint.rs: one slot per channel;
    // session.rs: throughput channels first, latency after).
    let total = got.total_channels() as usize;
    assert!(total >= 1 && total <= MAX_CHANNELS as usize);
    let slots = vec![0u8; total];
    let thpt = got.throughput_channels as usize;
    assert!(thpt >= 1);
    let (t, l) = (&slots[..thpt], &slots[thpt..]);
    assert_eq!(t.len() + l.len(), total);
    assert!((got.channel_index as usize) < total);
});
