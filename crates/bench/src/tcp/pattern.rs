//! The stream payload: a per-flow pseudo-random byte pattern with a prime period, so the
//! sender writes slices of one immutable buffer (safe for MSG_ZEROCOPY, no per-write work) and
//! the receiver can check every byte against its stream offset. A prime period (65521) means a
//! lost, duplicated or misplaced page-sized chunk never lines up with the pattern again.

pub const PERIOD: usize = 65_521;

pub struct Pattern {
    /// The period followed by `max_len` more bytes of it, so any slice of up to `max_len`
    /// bytes at any offset is contiguous.
    bytes: Vec<u8>,
    max_len: usize,
}

impl Pattern {
    pub fn new(seed: u64, max_len: usize) -> Pattern {
        // xorshift64*: cheap and good enough that no two flows or offsets look alike.
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut period = Vec::with_capacity(PERIOD);
        while period.len() < PERIOD {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            let take = (PERIOD - period.len()).min(8);
            period.extend_from_slice(&v[..take]);
        }
        let mut bytes = Vec::with_capacity(PERIOD + max_len);
        while bytes.len() < PERIOD + max_len {
            let take = (PERIOD + max_len - bytes.len()).min(PERIOD);
            bytes.extend_from_slice(&period[..take]);
        }
        Pattern { bytes, max_len }
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The `len` bytes (≤ max_len) the stream holds at `offset`.
    pub fn slice(&self, offset: u64, len: usize) -> &[u8] {
        let start = (offset % PERIOD as u64) as usize;
        &self.bytes[start..start + len.min(self.max_len)]
    }

    /// Offset within `data` (which sits at stream `offset`) of the first byte that differs.
    pub fn first_mismatch(&self, offset: u64, data: &[u8]) -> Option<usize> {
        let mut done = 0;
        while done < data.len() {
            let n = (data.len() - done).min(self.max_len);
            let want = self.slice(offset + done as u64, n);
            let got = &data[done..done + n];
            if got != want {
                let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                return Some(done + i);
            }
            done += n;
        }
        None
    }
}

/// The pattern seed of a flow: distinct per test and flow, so crossed connections are caught.
pub fn flow_seed(test_id: u64, flow: u32) -> u64 {
    test_id ^ (u64::from(flow) + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_are_the_stream_and_mismatches_are_found() {
        let p = Pattern::new(7, 1000);
        let mut stream = Vec::new();
        let mut off = 0u64;
        for len in [1usize, 999, 1000, 17, 65_000, 3] {
            let mut l = len;
            while l > 0 {
                let n = l.min(1000);
                stream.extend_from_slice(p.slice(off, n));
                off += n as u64;
                l -= n;
            }
        }
        assert_eq!(p.first_mismatch(0, &stream), None);
        assert_eq!(p.first_mismatch(5, &stream[5..]), None);
        // Lost bytes or the wrong offset.
        assert!(p.first_mismatch(0, &stream[4096..]).is_some());
        let mut bad = stream.clone();
        bad[40_000] ^= 1;
        assert_eq!(p.first_mismatch(0, &bad), Some(40_000));
        // Another flow's pattern.
        assert!(Pattern::new(8, 1000).first_mismatch(0, &stream).is_some());
        assert_ne!(flow_seed(1, 0), flow_seed(1, 1));
    }
}
