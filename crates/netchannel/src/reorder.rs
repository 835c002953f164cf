//! The receive side of one virtual socket: pieces of its byte stream arrive on several
//! channels in any order, each tagged with its stream offset; the app reads them in order.
//!
//! Each channel is TCP, but a channel can die with frames in flight, and the sender then
//! re-sends every frame it cannot know was consumed on a surviving channel. So a piece the
//! socket already has — wholly below the in-order prefix, or the very piece held out of
//! order — is a duplicate and is dropped (the first copy wins; the peer sends the same bytes
//! at the same offset). Any other overlap, a piece beyond the advertised window, or one past
//! the final length is a broken or hostile peer, and is refused (the caller resets the
//! socket) rather than merged. Everything held lies inside `[consumed, consumed + window)`.
//!
//! Memory. Bytes are bounded by the window, and pieces by [`max_pieces`]: each piece held
//! out of order costs bookkeeping (a tree entry and a buffer: ~124 bytes for a 1-byte
//! piece), so a peer filling gaps with 1-byte pieces could otherwise hold half a million of
//! them per 1 MiB window. Small pieces that arrive back to back on one channel (a run of
//! small writes) are merged into one buffer as they come, so honest traffic stays far below
//! the bound; a peer that exceeds it fragments on purpose and its socket is reset.

use bytes::{Buf, Bytes};
use std::collections::{BTreeMap, VecDeque};
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReorderError {
    #[error("bytes {seq}..{end} lie beyond the window (consumed {consumed} + window {window})")]
    WindowExceeded {
        seq: u64,
        end: u64,
        consumed: u64,
        window: u64,
    },
    #[error("bytes {seq}..{end} overlap data already received")]
    Overlap { seq: u64, end: u64 },
    #[error("bytes {seq}..{end} lie beyond the final length {final_seq}")]
    BeyondFin { seq: u64, end: u64, final_seq: u64 },
    #[error("FIN at {final_seq} conflicts with data up to {have} or an earlier FIN")]
    BadFin { final_seq: u64, have: u64 },
    #[error(
        "bytes {seq}..{end} would be out-of-order piece {pieces}; at most {max} are held per \
         socket (the peer fragments its stream)"
    )]
    TooFragmented {
        seq: u64,
        end: u64,
        pieces: usize,
        max: usize,
    },
}

/// Pieces below this size that continue a held small piece are copied into it.
pub const MERGE_BELOW: usize = 16 * 1024;

/// Out-of-order pieces one socket may hold with this window: 64, plus one per 4 KiB of
/// window. Honest senders (merged runs of small frames, or frames of at least 4 KiB) stay
/// well under it; at ~124 bytes a piece, the bookkeeping of a 1 MiB window is ≤ 40 KiB.
pub fn max_pieces(window: u64) -> usize {
    64 + usize::try_from(window / 4096).unwrap_or(usize::MAX)
}

/// Where [`Reassembly::insert`] put a piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// It extended the in-order prefix (something new is readable).
    InOrder,
    /// It waits for a gap before it to fill.
    OutOfOrder,
    /// The socket already had these bytes (a re-sent frame); nothing changed.
    Duplicate,
}

#[derive(Debug, Clone)]
struct Piece {
    data: Bytes,
    eom: bool,
}

/// A piece held out of order: as received, or small pieces merged into one growing buffer
/// (a Vec grows by doubling, so it holds at most twice its bytes).
#[derive(Debug)]
enum Held {
    Whole(Bytes),
    Merged(Vec<u8>),
}

impl Held {
    fn len(&self) -> usize {
        match self {
            Held::Whole(b) => b.len(),
            Held::Merged(v) => v.len(),
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Held::Whole(b) => b,
            Held::Merged(v) => Bytes::from(v),
        }
    }

    fn append(&mut self, more: &[u8]) {
        if let Held::Whole(b) = self {
            let mut v = Vec::with_capacity(b.len() + more.len());
            v.extend_from_slice(b);
            *self = Held::Merged(v);
        }
        if let Held::Merged(v) = self {
            v.extend_from_slice(more);
        }
    }
}

#[derive(Debug)]
struct OfoPiece {
    data: Held,
    eom: bool,
}
#[derive(Debug)]
pub struct Reassembly {
    window: u64,
    consumed: u64,
    next: u64,
    ready: VecDeque<Piece>,
    ofo: BTreeMap<u64, OfoPiece>,
    ofo_bytes: u64,
    highest_end: u64,
    final_seq: Option<u64>,
}

impl Reassembly {
    pub fn new(window: u64) -> Reassembly {
        Reassembly {
            window,
            consumed: 0,
            next: 0,
            ready: VecDeque::new(),
            ofo: BTreeMap::new(),
            ofo_bytes: 0,
            highest_end: 0,
            final_seq: None,
        }
    }

    /// Bytes the app has taken so far (what CREDIT frames report).
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// End of the in-order prefix.
    pub fn next_expected(&self) -> u64 {
        self.next
    }

    pub fn window(&self) -> u64 {
        self.window
    }

    /// Bytes held: in order and not yet read, plus out of order.
    pub fn held(&self) -> u64 {
        self.next - self.consumed + self.ofo_bytes
    }

    /// Bytes readable now.
    pub fn readable(&self) -> u64 {
        self.next - self.consumed
    }

    pub fn out_of_order_pieces(&self) -> usize {
        self.ofo.len()
    }

    /// True when every byte up to FIN has arrived (some may still be unread).
    pub fn complete(&self) -> bool {
        self.final_seq == Some(self.next)
    }

    /// True when every byte up to FIN has been read.
    pub fn at_eof(&self) -> bool {
        self.final_seq == Some(self.consumed)
    }

    /// Adds a piece and says where it went.
    pub fn insert(&mut self, seq: u64, mut data: Bytes, eom: bool) -> Result<Placed, ReorderError> {
        let mut seq = seq;
        let end = seq + data.len() as u64;
        if seq < self.next {
            if end <= self.next {
                return Ok(Placed::Duplicate);
            }
            // Frames are re-sent whole, so this only happens if the peer re-framed: keep the
            // new tail.
            data = data.slice((self.next - seq) as usize..);
            seq = self.next;
        }
        let limit = self.consumed + self.window;
        if end > limit {
            return Err(ReorderError::WindowExceeded {
                seq,
                end,
                consumed: self.consumed,
                window: self.window,
            });
        }
        if let Some(f) = self.final_seq
            && end > f
        {
            return Err(ReorderError::BeyondFin {
                seq,
                end,
                final_seq: f,
            });
        }
        if data.is_empty() && !eom {
            return Ok(Placed::InOrder);
        }
        // A re-send of the very piece held, or of one of the whole frames a merged piece
        // was made of (merging only joins whole frames, so a re-send lies wholly inside):
        // the first copy wins.
        let before = self
            .ofo
            .range(..=seq)
            .next_back()
            .map(|(&s, p)| (s, s + p.data.len() as u64, p.eom));
        if let Some((s, e, _)) = before {
            let merged = matches!(self.ofo[&s].data, Held::Merged(_));
            let resent = if merged {
                seq >= s && end <= e && !data.is_empty()
            } else {
                seq == s && end == e
            };
            if resent {
                return Ok(Placed::Duplicate);
            }
            if e > seq || s == seq {
                return Err(ReorderError::Overlap { seq, end });
            }
        }
        if let Some((&s, _)) = self.ofo.range(seq..).next()
            && (s < end || s == seq)
        {
            return Err(ReorderError::Overlap { seq, end });
        }
        self.highest_end = self.highest_end.max(end);
        let piece = Piece { data, eom };
        if seq == self.next {
            self.next = end;
            self.ready.push_back(piece);
            while let Some(entry) = self.ofo.first_entry() {
                if *entry.key() != self.next {
                    break;
                }
                let p = entry.remove();
                self.ofo_bytes -= p.data.len() as u64;
                self.next += p.data.len() as u64;
                self.ready.push_back(Piece {
                    data: p.data.into_bytes(),
                    eom: p.eom,
                });
            }
            Ok(Placed::InOrder)
        } else {
            self.ofo_bytes += piece.data.len() as u64;
            if let Some((s, e, false)) = before
                && e == seq
                && (e - s) < MERGE_BELOW as u64
                && piece.data.len() < MERGE_BELOW
            {
                let held = self.ofo.get_mut(&s).expect("the piece just looked up");
                held.data.append(&piece.data);
                held.eom = piece.eom;
                return Ok(Placed::OutOfOrder);
            }
            let max = max_pieces(self.window);
            if self.ofo.len() >= max {
                self.ofo_bytes -= piece.data.len() as u64;
                return Err(ReorderError::TooFragmented {
                    seq,
                    end,
                    pieces: self.ofo.len() + 1,
                    max,
                });
            }
            self.ofo.insert(
                seq,
                OfoPiece {
                    data: Held::Whole(piece.data),
                    eom: piece.eom,
                },
            );
            Ok(Placed::OutOfOrder)
        }
    }

    /// Records the final length. Data already beyond it, or a second different FIN, is refused.
    pub fn set_fin(&mut self, final_seq: u64) -> Result<(), ReorderError> {
        let bad = match self.final_seq {
            Some(f) => f != final_seq,
            None => self.highest_end > final_seq || final_seq < self.next,
        };
        if bad {
            return Err(ReorderError::BadFin {
                final_seq,
                have: self.highest_end,
            });
        }
        self.final_seq = Some(final_seq);
        Ok(())
    }

    /// Copies in-order bytes into `buf`; 0 means nothing is readable now.
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            let Some(front) = self.ready.front_mut() else {
                break;
            };
            let take = front.data.len().min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&front.data[..take]);
            front.data.advance(take);
            n += take;
            if front.data.is_empty() {
                self.ready.pop_front();
            }
        }
        self.consumed += n as u64;
        n
    }

    /// Copies in-order bytes into `buf` without consuming them (MSG_PEEK).
    pub fn peek(&self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        for p in &self.ready {
            if n == buf.len() {
                break;
            }
            let take = p.data.len().min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&p.data[..take]);
            n += take;
        }
        n
    }

    /// The next in-order piece as received (no copy) and whether a message ends with it.
    pub fn read_chunk(&mut self) -> Option<(Bytes, bool)> {
        let p = self.ready.pop_front()?;
        self.consumed += p.data.len() as u64;
        Some((p.data, p.eom))
    }

    /// Whether a whole message (up to an EOM piece) is readable.
    pub fn has_message(&self) -> bool {
        self.ready.iter().any(|p| p.eom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes(seq: u64, len: usize) -> Bytes {
        (0..len)
            .map(|i| ((seq + i as u64) * 31 % 251) as u8)
            .collect()
    }

    #[test]
    fn refuses_overlap_window_and_fin_violations() {
        let mut r = Reassembly::new(100);
        r.insert(10, bytes(10, 10), false).unwrap();
        assert!(matches!(
            r.insert(15, bytes(15, 10), false),
            Err(ReorderError::Overlap { .. })
        ));
        assert!(matches!(
            r.insert(5, bytes(5, 6), false),
            Err(ReorderError::Overlap { .. })
        ));
        assert!(matches!(
            r.insert(10, bytes(10, 1), false),
            Err(ReorderError::Overlap { .. })
        ));
        // The very piece again is a re-send, not an overlap.
        assert_eq!(r.insert(10, bytes(10, 10), false), Ok(Placed::Duplicate));
        assert!(matches!(
            r.insert(95, bytes(95, 10), false),
            Err(ReorderError::WindowExceeded { .. })
        ));
        assert_eq!(r.insert(0, bytes(0, 10), false), Ok(Placed::InOrder));
        assert_eq!(r.insert(0, bytes(0, 1), false), Ok(Placed::Duplicate));
        // A re-framed piece straddling the prefix keeps only its new tail.
        let mut t = Reassembly::new(100);
        t.insert(0, bytes(0, 10), false).unwrap();
        assert_eq!(t.insert(5, bytes(5, 10), false), Ok(Placed::InOrder));
        let mut all = [0u8; 15];
        assert_eq!(t.read(&mut all), 15);
        assert_eq!(&all[..], &bytes(0, 15)[..]);
        assert!(r.set_fin(15).is_err());
        r.set_fin(30).unwrap();
        assert!(r.set_fin(31).is_err());
        assert!(matches!(
            r.insert(25, bytes(25, 10), false),
            Err(ReorderError::BeyondFin { .. })
        ));
        let mut buf = [0u8; 64];
        assert_eq!(r.read(&mut buf), 20);
        assert!(!r.at_eof());
        r.insert(20, bytes(20, 10), true).unwrap();
        assert!(r.has_message());
        assert_eq!(r.read(&mut buf), 10);
        assert!(r.at_eof());
    }

    /// A peer filling a gap's far side with 1-byte pieces and 1-byte holes is refused at
    /// `max_pieces`, far below the half a million pieces the window would allow by bytes.
    #[test]
    fn one_byte_pieces_with_holes_are_refused_at_the_piece_bound() {
        let window = 1 << 20;
        let max = max_pieces(window);
        let mut r = Reassembly::new(window);
        let mut refused = None;
        for k in 0..(window / 2 - 1) {
            let seq = 2 + 2 * k;
            match r.insert(seq, bytes(seq, 1), false) {
                Ok(Placed::OutOfOrder) => {}
                Err(e) => {
                    refused = Some((k, e));
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        let (k, e) = refused.expect("never refused");
        assert_eq!(k as usize, max, "{e}");
        assert!(matches!(e, ReorderError::TooFragmented { .. }), "{e}");
        assert!(r.out_of_order_pieces() <= max);
        assert!(e.to_string().contains("fragments"), "{e}");
    }

    /// A run of small frames arriving back to back ahead of a gap (one channel ahead of
    /// another) is merged, stays far below the bound, reads back intact, and a re-send of any
    /// of its frames is a duplicate.
    #[test]
    fn back_to_back_small_pieces_merge_and_resends_are_duplicates() {
        let mut r = Reassembly::new(1 << 20);
        let (len, n) = (16u64, 20_000u64);
        for k in 0..n {
            let seq = 100 + k * len;
            assert_eq!(
                r.insert(seq, bytes(seq, len as usize), false),
                Ok(Placed::OutOfOrder)
            );
        }
        assert!(
            r.out_of_order_pieces() <= (n * len) as usize / (MERGE_BELOW / 2) + 1,
            "{} pieces",
            r.out_of_order_pieces()
        );
        let seq = 100 + 777 * len;
        assert_eq!(
            r.insert(seq, bytes(seq, len as usize), false),
            Ok(Placed::Duplicate)
        );
        assert!(matches!(
            r.insert(seq + 1, bytes(seq + 1, len as usize + 100_000), false),
            Err(ReorderError::Overlap { .. })
        ));
        assert_eq!(r.insert(0, bytes(0, 100), false), Ok(Placed::InOrder));
        let total = (100 + n * len) as usize;
        let mut buf = vec![0u8; total];
        assert_eq!(r.read(&mut buf), total);
        assert_eq!(&buf[..], &bytes(0, total)[..]);
    }

    proptest! {
        // Any permutation of a stream's pieces, interleaved with reads of any size, gives back
        // exactly the stream; memory held never exceeds the window.
        #[test]
        fn any_arrival_order_reassembles(lens in proptest::collection::vec(1usize..3000, 1..40),
                                         order_seed in any::<u64>(), read_size in 1usize..5000) {
            let mut pieces = Vec::new();
            let mut seq = 0u64;
            for &len in &lens {
                pieces.push((seq, bytes(seq, len)));
                seq += len as u64;
            }
            let total = seq;
            // Fisher-Yates with a small LCG: proptest shrinks the seed, not the permutation.
            let mut s = order_seed | 1;
            for i in (1..pieces.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                pieces.swap(i, (s >> 33) as usize % (i + 1));
            }
            let mut r = Reassembly::new(total);
            r.set_fin(total).unwrap();
            let mut out = Vec::new();
            let mut buf = vec![0u8; read_size];
            for (seq, data) in pieces {
                r.insert(seq, data, false).unwrap();
                prop_assert!(r.held() <= total);
                let n = r.read(&mut buf);
                out.extend_from_slice(&buf[..n]);
            }
            loop {
                let n = r.read(&mut buf);
                if n == 0 { break; }
                out.extend_from_slice(&buf[..n]);
            }
            prop_assert!(r.at_eof());
            prop_assert_eq!(out, bytes(0, total as usize).to_vec());
        }

        // A duplicate of any piece (a frame re-sent after a channel died), at any time, is
        // dropped and changes nothing.
        #[test]
        fn duplicates_are_dropped(lens in proptest::collection::vec(1usize..500, 2..20), dup in any::<prop::sample::Index>()) {
            let mut r = Reassembly::new(1 << 20);
            let mut seq = 0u64;
            let mut pieces = Vec::new();
            for &len in &lens {
                pieces.push((seq, bytes(seq, len)));
                seq += len as u64;
            }
            for (s, d) in pieces.iter().rev() {
                r.insert(*s, d.clone(), false).unwrap();
            }
            let (s, d) = &pieces[dup.index(pieces.len())];
            let held = r.held();
            prop_assert_eq!(r.insert(*s, d.clone(), false), Ok(Placed::Duplicate));
            prop_assert_eq!(r.held(), held);
            prop_assert_eq!(r.readable(), seq);
            let mut buf = vec![0u8; seq as usize];
            prop_assert_eq!(r.read(&mut buf), seq as usize);
            prop_assert_eq!(&buf[..], &bytes(0, seq as usize)[..]);
            // Below what was read too.
            prop_assert_eq!(r.insert(*s, d.clone(), false), Ok(Placed::Duplicate));
            prop_assert_eq!(r.held(), 0);
        }
    }
}
