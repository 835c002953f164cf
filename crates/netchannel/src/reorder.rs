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
//! Memory. The window bounds payload bytes, not what holding them costs: a 1-byte frame kept
//! as its own buffer and queue entry cost ~72 bytes, so a 1 MiB window filled with them held
//! ~72 MiB (issue 77). So a socket is charged for what it holds — each buffer's allocation
//! and each entry of the in-order queue, the message ends and the out-of-order tree — and may
//! hold at most its [`share`] (what the endpoint leases for it, so the endpoint's caps hold
//! for real memory); a piece that takes it past is refused and the socket reset. Small
//! pieces are copied into shared buffers as they come (in order: appended to the queue's
//! tail buffer when it has room; out of order: merged with the piece they continue), so a
//! stream of 1-byte frames costs about a byte a byte, and honest traffic stays well below the
//! share. Out-of-order pieces are also bounded in number by [`max_pieces`].

use bytes::{Buf as _, Bytes, BytesMut};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
    #[error(
        "bytes {seq}..{end} would make the socket hold {charged} bytes here (buffers and \
         bookkeeping), past its share of {share} (the peer fragments its stream)"
    )]
    OverShare {
        seq: u64,
        end: u64,
        charged: u64,
        share: u64,
    },
}

/// Pieces below this size that continue a held small piece are copied into it.
pub const MERGE_BELOW: usize = 16 * 1024;

/// In-order pieces below this size are copied into the in-order queue's tail buffer instead
/// of being kept as they arrived: what a kept piece costs beyond its bytes (its allocation's
/// slack and its queue entry) is then at most a fifth of it.
pub const COPY_BELOW: usize = 4096;

/// Largest tail buffer small in-order pieces are copied into (a run's buffers grow from
/// [`FIRST_CHUNK`] to it). A tail that closes
/// (a large piece follows, or the next small one does not fit) with more than an eighth of
/// it unused is copied down to its size, so only the open tail wastes room.
pub const CHUNK: usize = 64 * 1024;

/// Capacity of the first tail buffer of a run of small pieces (the next ones double).
const FIRST_CHUNK: usize = 1024;

/// What a buffer of `bytes` costs beyond them: the allocator's header and rounding, and the
/// reference count a shared buffer carries.
const ALLOC_OVERHEAD: u64 = 64;

/// What one out-of-order piece costs in the tree beyond its buffer: its key and value, twice
/// (a B-tree's nodes are at least half full), and the node's own fields.
const OFO_ENTRY: u64 = 2 * (8 + std::mem::size_of::<OfoPiece>() as u64) + 16;

/// Out-of-order pieces one socket may hold with this window: 64, plus one per 4 KiB of
/// window. Honest senders (merged runs of small frames, or frames of at least 4 KiB) stay
/// well under it.
pub fn max_pieces(window: u64) -> usize {
    64 + usize::try_from(window / 4096).unwrap_or(usize::MAX)
}

/// What a piece kept as received (at least [`COPY_BELOW`] bytes) may cost: this crate's
/// readers put such a payload in a buffer of its length plus a cache line, or in a pooled
/// buffer it fills to at least 7/8 (`frame_io`), so at most 8/7 of that, plus the overhead.
pub fn whole_cost(len: usize) -> u64 {
    (len as u64 + 64) * 8 / 7 + ALLOC_OVERHEAD
}

/// The most a socket with this window may hold, charged as above: one and a half windows
/// (pieces kept whole cost up to 8/7 of their bytes, merged out-of-order runs grow their
/// buffers by a quarter at a time, closed tail buffers waste at most an eighth), one frame
/// more (the front piece, partly read, keeps its whole buffer while the sender may already
/// fill the window behind it), an open tail buffer and the fixed bookkeeping. This is what
/// the endpoint leases per socket a peer opens.
pub fn share(window: u64, max_frame: u64) -> u64 {
    window + window / 2 + whole_cost(max_frame as usize) + 2 * CHUNK as u64 + (128 << 10)
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

/// In-order bytes as held: a piece as received, or small pieces copied into a buffer of
/// ours (whose allocation we know).
#[derive(Debug)]
enum Store {
    Whole(Bytes),
    Owned(BytesMut),
}

#[derive(Debug)]
struct Chunk {
    buf: Store,
    /// What it was charged when it was made (its allocation stays until it is popped).
    cost: u64,
}

impl Chunk {
    fn bytes(&self) -> &[u8] {
        match &self.buf {
            Store::Whole(b) => b,
            Store::Owned(m) => m,
        }
    }

    fn advance(&mut self, n: usize) {
        match &mut self.buf {
            Store::Whole(b) => b.advance(n),
            Store::Owned(m) => m.advance(n),
        }
    }

    fn split_to(&mut self, n: usize) -> Bytes {
        match &mut self.buf {
            Store::Whole(b) => b.split_to(n),
            Store::Owned(m) => m.split_to(n).freeze(),
        }
    }

    /// Room to append small pieces in place (an owned buffer's unused capacity).
    fn room(&self) -> usize {
        match &self.buf {
            Store::Whole(_) => 0,
            Store::Owned(m) => m.capacity() - m.len(),
        }
    }
}

/// A piece held out of order: as received, or small pieces copied into one buffer that
/// grows by a quarter at a time (so it holds at most 5/4 of its bytes).
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

    fn cost(&self) -> u64 {
        match self {
            Held::Whole(b) => whole_cost(b.len()),
            Held::Merged(v) => v.capacity() as u64 + ALLOC_OVERHEAD,
        }
    }

    fn append(&mut self, more: &[u8]) {
        if let Held::Whole(b) = self {
            let mut v = Vec::with_capacity(b.len() + more.len());
            v.extend_from_slice(b);
            *self = Held::Merged(v);
        }
        if let Held::Merged(v) = self {
            if v.capacity() - v.len() < more.len() {
                v.reserve_exact(more.len().max(v.capacity() / 4));
            }
            v.extend_from_slice(more);
        }
    }
}

#[derive(Debug)]
struct OfoPiece {
    data: Held,
    eom: bool,
    /// Several frames were merged into it (so a re-send of one lies inside it).
    merged: bool,
}

#[derive(Debug)]
pub struct Reassembly {
    window: u64,
    consumed: u64,
    next: u64,
    ready: VecDeque<Chunk>,
    /// Stream offsets where a message (an EOM piece) ends, in order, none below `consumed`.
    ends: VecDeque<u64>,
    ofo: BTreeMap<u64, OfoPiece>,
    ofo_bytes: u64,
    highest_end: u64,
    final_seq: Option<u64>,
    /// What the buffers of `ready` and `ofo` cost.
    buffers: u64,
    share: u64,
    /// Where the charge is also counted (the endpoint's total), and what was counted there.
    meter: Option<Arc<AtomicU64>>,
    metered: u64,
}

impl Drop for Reassembly {
    fn drop(&mut self) {
        if let Some(m) = &self.meter {
            m.fetch_sub(self.metered, Ordering::Relaxed);
        }
    }
}

impl Reassembly {
    /// A reassembly whose share allows frames as large as the window.
    pub fn new(window: u64) -> Reassembly {
        Reassembly::with_share(window, share(window, window))
    }

    /// A reassembly that may hold at most `share` bytes, charged as the module says.
    pub fn with_share(window: u64, share: u64) -> Reassembly {
        Reassembly {
            window,
            consumed: 0,
            next: 0,
            ready: VecDeque::new(),
            ends: VecDeque::new(),
            ofo: BTreeMap::new(),
            ofo_bytes: 0,
            highest_end: 0,
            final_seq: None,
            buffers: 0,
            share,
            meter: None,
            metered: 0,
        }
    }

    /// Counts this socket's charge into `meter` too, for as long as it lives.
    pub fn metered(mut self, meter: Arc<AtomicU64>) -> Reassembly {
        self.meter = Some(meter);
        self.sync();
        self
    }

    /// Bytes the app has taken so far (what CREDIT frames report).
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    pub fn window(&self) -> u64 {
        self.window
    }

    /// Payload bytes held: in order and not yet read, plus out of order.
    pub fn held(&self) -> u64 {
        self.next - self.consumed + self.ofo_bytes
    }

    /// What holding them costs: the buffers' allocations, the queue's, the message ends' and
    /// the out-of-order tree's entries.
    pub fn charged(&self) -> u64 {
        self.buffers
            + (self.ready.capacity() * std::mem::size_of::<Chunk>()) as u64
            + (self.ends.capacity() * 8) as u64
            + self.ofo.len() as u64 * OFO_ENTRY
    }

    /// The most [`Reassembly::charged`] may reach.
    pub fn share(&self) -> u64 {
        self.share
    }

    fn sync(&mut self) {
        if let Some(m) = &self.meter {
            let now = self.charged();
            if now >= self.metered {
                m.fetch_add(now - self.metered, Ordering::Relaxed);
            } else {
                m.fetch_sub(self.metered - now, Ordering::Relaxed);
            }
            self.metered = now;
        }
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
    pub fn insert(&mut self, seq: u64, data: Bytes, eom: bool) -> Result<Placed, ReorderError> {
        let r = self.place(seq, data, eom);
        let charged = self.charged();
        self.sync();
        match r {
            Ok((Placed::Duplicate, _)) => Ok(Placed::Duplicate),
            Ok((_, (seq, end))) if charged > self.share => Err(ReorderError::OverShare {
                seq,
                end,
                charged,
                share: self.share,
            }),
            Ok((p, _)) => Ok(p),
            Err(e) => Err(e),
        }
    }

    /// Puts a piece where it goes; where that was, and the range it covered.
    fn place(
        &mut self,
        seq: u64,
        mut data: Bytes,
        eom: bool,
    ) -> Result<(Placed, (u64, u64)), ReorderError> {
        let mut seq = seq;
        // An offset near 2^64 is refused, not wrapped. The wire decoder already refuses such
        // a frame (SeqOverflow), but this is public and fuzzed on its own.
        let Some(end) = seq.checked_add(data.len() as u64) else {
            return Err(ReorderError::WindowExceeded {
                seq,
                end: u64::MAX,
                consumed: self.consumed,
                window: self.window,
            });
        };
        if seq < self.next {
            if end <= self.next {
                return Ok((Placed::Duplicate, (seq, end)));
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
            return Ok((Placed::InOrder, (seq, end)));
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
            let merged = self.ofo[&s].merged;
            let resent = if merged {
                seq >= s && end <= e && !data.is_empty()
            } else {
                seq == s && end == e
            };
            if resent {
                return Ok((Placed::Duplicate, (seq, end)));
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
        if seq == self.next {
            self.push_ready(data, eom);
            while let Some(entry) = self.ofo.first_entry() {
                if *entry.key() != self.next {
                    break;
                }
                let p = entry.remove();
                self.ofo_bytes -= p.data.len() as u64;
                self.buffers -= p.data.cost();
                match p.data {
                    Held::Whole(b) => self.push_ready(b, p.eom),
                    Held::Merged(v) => {
                        // Already a buffer of ours, charged by its capacity: it joins the
                        // queue as it is (small ones are copied as any small piece).
                        if v.len() < COPY_BELOW {
                            self.push_ready(Bytes::from(v), p.eom);
                        } else {
                            self.close_tail();
                            let cost = v.capacity() as u64 + ALLOC_OVERHEAD;
                            let len = v.len() as u64;
                            self.push_chunk(Store::Whole(Bytes::from(v)), cost);
                            self.advance_next(len, p.eom);
                        }
                    }
                }
            }
            Ok((Placed::InOrder, (seq, end)))
        } else {
            let len = data.len();
            self.ofo_bytes += len as u64;
            if let Some((s, e, false)) = before
                && e == seq
                && (e - s) < MERGE_BELOW as u64
                && len < MERGE_BELOW
            {
                let held = self.ofo.get_mut(&s).expect("the piece just looked up");
                let was = held.data.cost();
                held.data.append(&data);
                held.eom = eom;
                held.merged = true;
                self.buffers = self.buffers - was + held.data.cost();
                return Ok((Placed::OutOfOrder, (seq, end)));
            }
            let max = max_pieces(self.window);
            if self.ofo.len() >= max {
                self.ofo_bytes -= len as u64;
                return Err(ReorderError::TooFragmented {
                    seq,
                    end,
                    pieces: self.ofo.len() + 1,
                    max,
                });
            }
            // A small piece is copied into a buffer of its size (what it arrived in may be
            // larger, and its cost unknown here).
            let data = if len < COPY_BELOW {
                Held::Merged(data.to_vec())
            } else {
                Held::Whole(data)
            };
            self.buffers += data.cost();
            self.ofo.insert(
                seq,
                OfoPiece {
                    data,
                    eom,
                    merged: false,
                },
            );
            Ok((Placed::OutOfOrder, (seq, end)))
        }
    }

    /// Appends an in-order piece: a small one is copied into the tail buffer (a new one when
    /// it has no room), a large one is queued as it came.
    fn push_ready(&mut self, data: Bytes, eom: bool) {
        let len = data.len();
        if len < COPY_BELOW {
            if self.ready.back().is_none_or(|c| c.room() < len) {
                // A run of small pieces gets buffers twice as large each time, up to CHUNK;
                // one alone gets a small one (a socket drained between small messages holds
                // nothing, as before: a 64 KiB buffer kept per idle socket would cost 256 MiB
                // over 4,096 of them).
                let cap = match self.ready.back() {
                    Some(Chunk {
                        buf: Store::Owned(_),
                        cost,
                    }) => (2 * (cost - ALLOC_OVERHEAD) as usize).min(CHUNK),
                    _ => FIRST_CHUNK,
                }
                .max(len);
                self.close_tail();
                let m = BytesMut::with_capacity(cap);
                let cost = m.capacity() as u64 + ALLOC_OVERHEAD;
                self.push_chunk(Store::Owned(m), cost);
            }
            if let Some(Chunk {
                buf: Store::Owned(m),
                ..
            }) = self.ready.back_mut()
            {
                m.extend_from_slice(&data);
            }
        } else {
            self.close_tail();
            self.push_chunk(Store::Whole(data), whole_cost(len));
        }
        self.advance_next(len as u64, eom);
    }

    fn advance_next(&mut self, len: u64, eom: bool) {
        self.next += len;
        if eom {
            self.ends.push_back(self.next);
        }
    }

    fn push_chunk(&mut self, buf: Store, cost: u64) {
        self.buffers += cost;
        self.ready.push_back(Chunk { buf, cost });
    }

    /// The tail buffer takes no more pieces: if more than an eighth of it is unused, it is
    /// copied down to its size, so closed buffers waste at most that.
    fn close_tail(&mut self) {
        let Some(tail) = self.ready.back_mut() else {
            return;
        };
        let Store::Owned(m) = &mut tail.buf else {
            return;
        };
        if m.capacity() - m.len() <= m.capacity() / 8 {
            return;
        }
        let exact = BytesMut::from(&m[..]);
        let cost = exact.capacity() as u64 + ALLOC_OVERHEAD;
        self.buffers = self.buffers - tail.cost + cost;
        *tail = Chunk {
            buf: Store::Owned(exact),
            cost,
        };
    }

    fn pop_front(&mut self) {
        if let Some(c) = self.ready.pop_front() {
            self.buffers -= c.cost;
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
            let have = front.bytes();
            let take = have.len().min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&have[..take]);
            front.advance(take);
            n += take;
            if front.bytes().is_empty() {
                self.pop_front();
            }
        }
        self.consumed += n as u64;
        if !buf.is_empty() {
            // Message ends read past (a plain read ignores boundaries).
            while self.ends.front().is_some_and(|&e| e <= self.consumed) {
                self.ends.pop_front();
            }
        }
        self.sync();
        n
    }

    /// Copies in-order bytes into `buf` without consuming them (MSG_PEEK).
    pub fn peek(&self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        for c in &self.ready {
            if n == buf.len() {
                break;
            }
            let p = c.bytes();
            let take = p.len().min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&p[..take]);
            n += take;
        }
        n
    }

    /// The next in-order piece (no copy: a piece as received, or a part of a buffer small
    /// pieces were copied into), never past the end of a message, and whether a message ends
    /// with it.
    pub fn read_chunk(&mut self) -> Option<(Bytes, bool)> {
        let end = self.ends.front().copied();
        if end == Some(self.consumed) {
            // An empty message.
            self.ends.pop_front();
            self.sync();
            return Some((Bytes::new(), true));
        }
        let front = self.ready.front_mut()?;
        let avail = front.bytes().len();
        if avail == 0 {
            return None;
        }
        let n = match end {
            Some(e) if ((e - self.consumed) as usize) < avail => (e - self.consumed) as usize,
            _ => avail,
        };
        let out = front.split_to(n);
        if front.bytes().is_empty() {
            self.pop_front();
        }
        self.consumed += n as u64;
        let eom = end == Some(self.consumed);
        if eom {
            self.ends.pop_front();
        }
        self.sync();
        Some((out, eom))
    }

    /// Whether a whole message (up to an EOM piece) is readable.
    pub fn has_message(&self) -> bool {
        !self.ends.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

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

    /// Issue 77: a window filled with 1-byte pieces in order costs about a byte a byte (each
    /// was its own buffer and queue entry: ~72 bytes a byte), the meter counts it, and gives
    /// it all back when the socket goes.
    #[test]
    fn one_byte_pieces_in_order_are_coalesced_and_charged_by_what_they_hold() {
        let window = 1u64 << 20;
        let meter = Arc::new(AtomicU64::new(0));
        let mut r = Reassembly::with_share(window, share(window, 1 << 16)).metered(meter.clone());
        for seq in 0..window {
            assert_eq!(r.insert(seq, bytes(seq, 1), false), Ok(Placed::InOrder));
        }
        let charged = r.charged();
        // The bytes, the unused end of the open tail buffer and the queue's entries.
        assert!(
            charged <= window + CHUNK as u64 + 4096,
            "{charged} bytes charged for {window}"
        );
        assert_eq!(meter.load(Ordering::Relaxed), charged);
        let mut buf = vec![0u8; window as usize];
        assert_eq!(r.read(&mut buf), window as usize);
        assert_eq!(&buf[..], &bytes(0, window as usize)[..]);
        assert!(r.charged() < 8 * CHUNK as u64, "{}", r.charged());
        // Drained between small messages, a socket keeps no buffer.
        for k in 0..100u64 {
            let seq = window + 100 * k;
            r.insert(seq, bytes(seq, 100), true).unwrap();
            assert_eq!(r.read(&mut buf[..100]), 100);
            assert!(
                r.charged() < 4096,
                "{} bytes charged when drained",
                r.charged()
            );
        }
        drop(r);
        assert_eq!(meter.load(Ordering::Relaxed), 0);
    }

    /// Honest patterns at their most costly stay within the share: small and large pieces
    /// alternating, a whole window of small pieces out of order behind a gap, and window-sized
    /// frames with the front one partly read while the next window arrives.
    #[test]
    fn honest_worst_cases_stay_within_the_share() {
        let window = 1u64 << 20;
        let frame = 1u64 << 20;
        let mut r = Reassembly::with_share(window, share(window, frame));
        let mut seq = 0;
        while seq + 4097 <= window {
            r.insert(seq, bytes(seq, 1), false).unwrap();
            r.insert(seq + 1, bytes(seq + 1, 4096), false).unwrap();
            seq += 4097;
        }
        assert!(r.charged() <= r.share(), "{} of {}", r.charged(), r.share());
        let mut o = Reassembly::with_share(window, share(window, frame));
        let mut seq = 1;
        while seq + 700 <= window {
            assert_eq!(
                o.insert(seq, bytes(seq, 700), false),
                Ok(Placed::OutOfOrder)
            );
            seq += 700;
        }
        assert!(o.charged() <= o.share(), "{} of {}", o.charged(), o.share());
        assert_eq!(o.insert(0, bytes(0, 1), false), Ok(Placed::InOrder));
        assert!(o.charged() <= o.share(), "{} of {}", o.charged(), o.share());
        let mut w = Reassembly::with_share(window, share(window, frame));
        w.insert(0, bytes(0, frame as usize), false).unwrap();
        let mut half = vec![0u8; frame as usize / 2 + 1];
        w.read(&mut half);
        w.insert(frame, bytes(frame, frame as usize / 2), false)
            .unwrap();
        assert!(w.charged() <= w.share(), "{} of {}", w.charged(), w.share());
    }

    /// A peer whose pieces cost more than the share (1-byte messages: a message end each) is
    /// refused by name, well inside the window.
    #[test]
    fn pieces_that_cost_past_the_share_are_refused() {
        let window = 1u64 << 20;
        let mut r = Reassembly::with_share(window, share(window, 1 << 16));
        let mut refused = None;
        for seq in 0..window {
            if let Err(e) = r.insert(seq, bytes(seq, 1), true) {
                refused = Some((seq, e));
                break;
            }
        }
        let (at, e) = refused.expect("never refused");
        assert!(matches!(e, ReorderError::OverShare { .. }), "{e}");
        assert!(at < window, "{at}");
        assert!(e.to_string().contains("share"), "{e}");
    }

    /// A piece whose offset plus length passes 2^64 is refused as beyond the window, never
    /// wrapped (the decoder refuses such frames first; the reassembly is public).
    #[test]
    fn an_offset_near_the_end_of_u64_is_refused_not_wrapped() {
        let mut r = Reassembly::new(1 << 20);
        let e = r.insert(u64::MAX - 3, bytes(0, 100), false).unwrap_err();
        assert!(matches!(e, ReorderError::WindowExceeded { .. }), "{e}");
        assert!(matches!(
            r.insert(u64::MAX, bytes(0, 1), false),
            Err(ReorderError::WindowExceeded { .. })
        ));
        assert_eq!(r.held(), 0);
    }

    /// Message ends survive coalescing: small pieces copied into one buffer come back one
    /// message at a time, and an empty message is one too.
    #[test]
    fn messages_coalesced_into_one_buffer_come_back_one_by_one() {
        let mut r = Reassembly::new(1 << 20);
        r.insert(0, Bytes::from_static(b"ab"), true).unwrap();
        r.insert(2, Bytes::from_static(b"c"), false).unwrap();
        r.insert(3, Bytes::from_static(b"d"), true).unwrap();
        r.insert(4, Bytes::new(), true).unwrap();
        r.insert(4, Bytes::from_static(b"e"), false).unwrap();
        assert!(r.has_message());
        assert_eq!(r.read_chunk(), Some((Bytes::from_static(b"ab"), true)));
        assert_eq!(r.read_chunk(), Some((Bytes::from_static(b"cd"), true)));
        assert_eq!(r.read_chunk(), Some((Bytes::new(), true)));
        assert!(!r.has_message());
        assert_eq!(r.read_chunk(), Some((Bytes::from_static(b"e"), false)));
        assert_eq!(r.read_chunk(), None);
        r.insert(5, Bytes::from_static(b"f"), false).unwrap();
        assert_eq!(r.read_chunk(), Some((Bytes::from_static(b"f"), false)));
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
                prop_assert!(r.charged() <= r.share());
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
