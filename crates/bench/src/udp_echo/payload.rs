//! What each client datagram carries, so that lost, duplicated, late and corrupted echoes can be
//! told apart. Little-endian, 28 bytes of header, then filler that depends on the sequence:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4   | magic `NSUE` |
//! | 4..8   | flow id (u32) |
//! | 8..16  | sequence number (u64) |
//! | 16..24 | send time, ns of the client's monotonic clock (u64) |
//! | 24..28 | FNV-1a of bytes 0..24 (u32) |
//! | 28..   | filler: byte i = (seq + i) as u8 ^ 0x5a |

/// The smallest `--size` the client accepts.
pub const MIN_SIZE: usize = 28;
const MAGIC: &[u8; 4] = b"NSUE";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub flow: u32,
    pub seq: u64,
    pub send_ns: u64,
}

fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

fn filler(seq: u64, i: usize) -> u8 {
    (seq as u8).wrapping_add(i as u8) ^ 0x5a
}

/// Fills `buf` (at least [`MIN_SIZE`] bytes) for one datagram.
pub fn encode(buf: &mut [u8], h: Header) {
    buf[0..4].copy_from_slice(MAGIC);
    buf[4..8].copy_from_slice(&h.flow.to_le_bytes());
    buf[8..16].copy_from_slice(&h.seq.to_le_bytes());
    buf[16..24].copy_from_slice(&h.send_ns.to_le_bytes());
    let check = fnv1a(&buf[0..24]);
    buf[24..28].copy_from_slice(&check.to_le_bytes());
    for (i, b) in buf[MIN_SIZE..].iter_mut().enumerate() {
        *b = filler(h.seq, i);
    }
}

/// Reads an echo back. `expected_len` is the size that was sent: a shorter or longer echo, a
/// wrong magic or checksum, or changed filler bytes make it corrupt.
pub fn decode(buf: &[u8], expected_len: usize) -> Option<Header> {
    if buf.len() != expected_len || buf.len() < MIN_SIZE || &buf[0..4] != MAGIC {
        return None;
    }
    let check = u32::from_le_bytes(buf[24..28].try_into().ok()?);
    if check != fnv1a(&buf[0..24]) {
        return None;
    }
    let h = Header {
        flow: u32::from_le_bytes(buf[4..8].try_into().ok()?),
        seq: u64::from_le_bytes(buf[8..16].try_into().ok()?),
        send_ns: u64::from_le_bytes(buf[16..24].try_into().ok()?),
    };
    buf[MIN_SIZE..]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == filler(h.seq, i))
        .then_some(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_corruption_is_caught() {
        let h = Header {
            flow: 7,
            seq: 123_456,
            send_ns: 99,
        };
        let mut buf = vec![0u8; 64];
        encode(&mut buf, h);
        assert_eq!(decode(&buf, 64), Some(h));
        assert_eq!(decode(&buf[..63], 64), None);
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x01;
            assert_eq!(decode(&bad, 64), None, "flip in byte {i} not caught");
        }
        let mut small = vec![0u8; MIN_SIZE];
        encode(&mut small, h);
        assert_eq!(decode(&small, MIN_SIZE), Some(h));
    }
}
