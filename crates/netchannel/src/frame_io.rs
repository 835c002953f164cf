//! Reading frames off a channel and writing them whole.

use crate::error::ReadError;
use crate::socket::lock;
use crate::wire::{ALIGN, HEADER_LEN, Header};
use bytes::Bytes;
use netsteer_sock::buf::AlignedBuf;
use std::io::{self, IoSlice, Read, Write};
use std::sync::{Arc, Mutex};

/// Payloads at least this large are read straight into their own buffer instead of through
/// the staging buffer, so the kernel copy is the only copy.
const DIRECT_READ: usize = 16 * 1024;
const STAGING: usize = 256 * 1024;
/// The alignment of a direct read's destination (see `FrameReader::payload`).
const CACHE_LINE: usize = 64;

/// Free payload buffers a pool keeps at most, in bytes, unless the reader is told otherwise
/// ([`FrameReader::keep_free`]).
const POOL_KEEP_BYTES: usize = 4 << 20;

/// Recycles the buffers of full-size payloads. A bulk sender's frames are all `max_frame`
/// long, and each used to be a fresh 1 MiB allocation freed on the application's thread. glibc
/// gives such blocks back to the kernel (trimming the heap, or munmap) and takes them again
/// a moment later, so the reader page-faulted and the kernel zeroed pages before its copy
/// landed: 56.8 k page faults in a 3 s run of E4's inline mode, 3.5 k with this pool
/// (BENCHMARKS.md, issue 14 eighth pass). A pooled buffer stays mapped and warm in the TLB.
///
/// The pool must hold as many buffers as the reader can run ahead of the application, which
/// the window bounds: with 4 MiB kept and an 8 MiB window, a reader sharing a CPU with its
/// application (it reads a whole window before the application runs) still freed and
/// re-faulted five buffers a round, 49.5 k page faults in 3 s (issue 14, ninth pass).
pub(crate) struct BufPool {
    free: Mutex<Vec<Vec<u8>>>,
    /// Capacity of every pooled buffer: the largest payload plus the alignment pad.
    capacity: usize,
    keep: usize,
}

impl BufPool {
    fn new(max_payload: usize, keep_bytes: usize) -> Arc<BufPool> {
        let capacity = max_payload + CACHE_LINE;
        Arc::new(BufPool {
            free: Mutex::new(Vec::new()),
            capacity,
            keep: keep_bytes.div_ceil(capacity).max(1),
        })
    }

    /// Whether a buffer of `need` bytes comes from the pool. Only payloads that fill most of
    /// a pooled buffer do, so a peer's small frames cannot make this side hold a full-size
    /// buffer each: buffered memory stays within 8/7 of the payload bytes the window allows.
    fn fits(&self, need: usize) -> bool {
        need <= self.capacity && need * 8 >= self.capacity * 7
    }

    fn take(&self) -> Vec<u8> {
        let recycled = lock(&self.free).pop();
        recycled.unwrap_or_else(|| Vec::with_capacity(self.capacity))
    }

    fn give_back(&self, mut v: Vec<u8>) {
        if v.capacity() != self.capacity {
            return;
        }
        v.clear();
        let mut free = lock(&self.free);
        if free.len() < self.keep {
            free.push(v);
        }
    }
}

/// A pooled payload: the bytes after the alignment pad, returned to the pool when the last
/// `Bytes` referring to them is dropped.
struct Pooled {
    buf: Vec<u8>,
    pad: usize,
    pool: Arc<BufPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf[self.pad..]
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

/// A byte source that can also fill a vector without zeroing it first (std's read_to_end
/// reads into spare capacity for sockets), so a large payload costs only the kernel copy.
pub trait Source: Read {
    /// Appends exactly `n` bytes to `v`.
    fn append_exact(&mut self, v: &mut Vec<u8>, n: usize) -> io::Result<()> {
        let at = v.len();
        v.resize(at + n, 0);
        self.read_exact(&mut v[at..])
    }
}

impl Source for &[u8] {}

/// The channel decoder: pulls frames out of a byte stream. Memory is bounded by the staging
/// buffer plus one payload of at most `max_frame` bytes, whatever the peer sends.
pub struct FrameReader<R> {
    inner: R,
    max_frame: u32,
    /// Page-aligned, for the kernel's copy (see `payload`).
    buf: AlignedBuf,
    start: usize,
    end: usize,
    /// The last payload was read directly: the next one probably will be too, so refill
    /// only up to a header and its head pad rather than pulling payload bytes through the
    /// staging buffer.
    direct: bool,
    /// Pad bytes still to pass over: the current frame's head pad until its payload is
    /// taken, then its tail pad until the next header.
    head_pad: usize,
    tail_pad: usize,
    pool: Arc<BufPool>,
    /// A direct read the source stopped with WouldBlock (a non-blocking source): the bytes so
    /// far, the alignment pad in front of them, and whether the buffer is pooled. The next
    /// `payload` call for the same header goes on from here.
    partial: Option<(Vec<u8>, usize, bool)>,
}

impl<R: Source> FrameReader<R> {
    pub fn new(inner: R, max_frame: u32) -> FrameReader<R> {
        FrameReader::with_staging(inner, max_frame, STAGING)
    }

    /// A reader whose staging buffer is `staging` bytes (at least a header). With exactly
    /// one header's worth it never reads past a header, leaving payloads in the socket.
    pub fn with_staging(inner: R, max_frame: u32, staging: usize) -> FrameReader<R> {
        FrameReader {
            inner,
            max_frame,
            buf: AlignedBuf::new(staging.max(HEADER_LEN)),
            start: 0,
            end: 0,
            direct: false,
            head_pad: 0,
            tail_pad: 0,
            pool: BufPool::new(max_frame as usize, POOL_KEEP_BYTES),
            partial: None,
        }
    }

    /// Keeps up to `bytes` of free full-size payload buffers for reuse (4 MiB unless set):
    /// a channel's reader passes its sockets' window, the most it can read ahead of an
    /// application, so no payload of a bulk stream needs a fresh allocation. Memory stays
    /// within what the window already lets a peer make this side hold.
    pub fn keep_free(mut self, bytes: usize) -> FrameReader<R> {
        self.pool = BufPool::new(self.max_frame as usize, bytes);
        self
    }

    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// Reads more bytes into the staging buffer; Ok(false) at end of stream.
    fn fill(&mut self) -> Result<bool, ReadError> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let room = if self.direct {
            // Enough for the pads ahead and one header with its head pad; more would be
            // payload copied twice.
            (self.start + self.head_pad + self.tail_pad + ALIGN)
                .min(self.buf.len())
                .max(self.end + 1)
        } else {
            self.buf.len()
        };
        loop {
            match self.inner.read(&mut self.buf[self.end..room]) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The next frame; Ok(None) when the stream ends cleanly between frames.
    pub fn next_frame(&mut self) -> Result<Option<(Header, Bytes)>, ReadError> {
        match self.next_header()? {
            Some(h) => Ok(Some((h, self.payload(&h)?))),
            None => Ok(None),
        }
    }

    /// The next frame header; its payload must be taken with [`Self::payload`] or handed off
    /// with [`Self::take_buffered`] before the next call.
    pub fn next_header(&mut self) -> Result<Option<Header>, ReadError> {
        // The previous frame's tail pad. Its payload was taken, so its head pad is gone.
        if let Some(left) = self.pass_over(|r| &mut r.tail_pad)? {
            return Err(ReadError::Truncated(left));
        }
        while self.end - self.start < HEADER_LEN {
            if !self.fill()? {
                return match self.end - self.start {
                    0 => Ok(None),
                    n => Err(ReadError::Truncated(n)),
                };
            }
        }
        let raw: &[u8; HEADER_LEN] = self.buf[self.start..self.start + HEADER_LEN]
            .try_into()
            .expect("header");
        let h = Header::decode(raw, self.max_frame)?;
        self.start += HEADER_LEN;
        (self.head_pad, self.tail_pad) = h.pads();
        Ok(Some(h))
    }

    /// Passes over the current frame's head pad, so that what follows in the stream (and in
    /// [`Self::take_buffered`]) is its payload.
    pub fn skip_head_pad(&mut self) -> Result<(), ReadError> {
        match self.pass_over(|r| &mut r.head_pad)? {
            Some(left) => Err(ReadError::Truncated(HEADER_LEN + left)),
            None => Ok(()),
        }
    }

    /// Passes over the pad bytes `pad` counts, counting it down as it goes (`fill` sizes its
    /// reads by the pads still ahead). Some(bytes still missing) if the stream ends first.
    fn pass_over(&mut self, pad: fn(&mut Self) -> &mut usize) -> Result<Option<usize>, ReadError> {
        while *pad(self) > 0 {
            if self.start == self.end && !self.fill()? {
                return Ok(Some(*pad(self)));
            }
            let k = (*pad(self)).min(self.end - self.start);
            self.start += k;
            *pad(self) -= k;
        }
        Ok(None)
    }

    /// Reads the payload of `h`.
    ///
    /// Resumable: when the source is non-blocking and runs dry (an `Io` error of kind
    /// WouldBlock), what was read is kept, and calling this again with the same header goes
    /// on. So a thread that must not wait (an application thread pumping a channel) never
    /// waits for the rest of a frame a peer may never send.
    pub fn payload(&mut self, h: &Header) -> Result<Bytes, ReadError> {
        self.skip_head_pad()?;
        let len = h.len as usize;
        let have = self.end - self.start;
        if self.partial.is_some() || (len > have && (len >= DIRECT_READ || len > self.buf.len())) {
            let (mut v, pad, pooled) = match self.partial.take() {
                Some(p) => p,
                None => {
                    // The kernel copies the rest of the payload to v[pad + have..]: start that
                    // on a cache line. Into a malloc'd buffer it lands anywhere 16 bytes apart,
                    // and on AMD EPYC `rep movsb` to user space runs at half speed unless the
                    // destination is 64-byte aligned (netsteer_sock::buf::AlignedBuf;
                    // BENCHMARKS.md, issue 14).
                    let pooled = self.pool.fits(len + CACHE_LINE);
                    let mut v = if pooled {
                        self.pool.take()
                    } else {
                        Vec::with_capacity(len + CACHE_LINE)
                    };
                    let pad = v.as_ptr().wrapping_add(have).align_offset(CACHE_LINE);
                    v.resize(pad, 0);
                    v.extend_from_slice(&self.buf[self.start..self.end]);
                    self.start = self.end;
                    self.direct = true;
                    (v, pad, pooled)
                }
            };
            let missing = pad + len - v.len();
            match self.inner.append_exact(&mut v, missing) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.partial = Some((v, pad, pooled));
                    return Err(ReadError::Io(e));
                }
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Err(ReadError::Truncated(HEADER_LEN + v.len() - pad));
                }
                Err(e) => return Err(ReadError::Io(e)),
            }
            if pooled {
                let pool = self.pool.clone();
                return Ok(Bytes::from_owner(Pooled { buf: v, pad, pool }));
            }
            return Ok(Bytes::from(v).slice(pad..));
        }
        self.direct = false;
        while self.end - self.start < len {
            if !self.fill()? {
                return Err(ReadError::Truncated(HEADER_LEN + self.end - self.start));
            }
        }
        let p = Bytes::copy_from_slice(&self.buf[self.start..self.start + len]);
        self.start += len;
        Ok(p)
    }

    /// Takes up to `max` payload bytes that are already staged (the rest is still in the
    /// socket, for a splice). The head pad must have been skipped.
    pub fn take_buffered(&mut self, max: usize) -> &[u8] {
        let n = (self.end - self.start).min(max);
        let at = self.start;
        self.start += n;
        &self.buf[at..at + n]
    }

    /// Bytes staged and not yet returned.
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }
}

/// Pad bytes: zeros, as the wire format asks.
pub const ZEROS: [u8; ALIGN] = [0; ALIGN];

/// One frame ready to go out.
pub struct OutFrame {
    pub header: [u8; HEADER_LEN],
    pub payload: Bytes,
    /// Pad bytes after the header and after the payload ([`Header::pads`]).
    pub pads: (usize, usize),
    /// The send copy worker whose pipe carries the payload (None: written from `payload`).
    pub via: Option<usize>,
    /// Not DATA: a reply or a flow-control frame (counted against `max_queued_control`).
    pub control: bool,
    /// Bytes of it already written (a sender wrote what the socket took without waiting and
    /// queued the rest); only for frames written from `payload`.
    pub skip: usize,
}

impl OutFrame {
    pub fn new(header: &Header, payload: Bytes) -> OutFrame {
        OutFrame {
            header: header.encode(),
            payload,
            pads: header.pads(),
            via: None,
            control: header.kind != crate::wire::FrameType::Data,
            skip: 0,
        }
    }

    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.pads.0 + self.payload.len() + self.pads.1
    }

    /// Bytes still to write.
    pub fn left(&self) -> usize {
        self.wire_len() - self.skip
    }

    /// The frame's bytes in order, past the `skip` already written (`via` frames excepted:
    /// their payload is in a pipe).
    pub fn parts(&self) -> Vec<&[u8]> {
        past(
            &[
                &self.header[..],
                self.head_pad(),
                &self.payload[..],
                self.tail_pad(),
            ],
            self.skip,
        )
        .collect()
    }

    pub fn head_pad(&self) -> &'static [u8] {
        &ZEROS[..self.pads.0]
    }

    pub fn tail_pad(&self) -> &'static [u8] {
        &ZEROS[..self.pads.1]
    }
}

/// The bytes of `parts` past the first `skip`, as slices (parts wholly skipped, and empty
/// ones, left out).
fn past<'a, 'p>(parts: &'p [&'a [u8]], mut skip: usize) -> impl Iterator<Item = &'a [u8]> + 'p {
    parts.iter().filter_map(move |p| {
        if skip >= p.len() {
            skip -= p.len();
            None
        } else {
            let rest = &p[skip..];
            skip = 0;
            Some(rest)
        }
    })
}

/// Writes what the socket takes of `parts` now, without waiting: the count written (short
/// when its send buffer filled).
pub fn write_now(fd: std::os::fd::BorrowedFd<'_>, parts: &[&[u8]]) -> io::Result<usize> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut done = 0;
    while done < total {
        let slices: Vec<IoSlice<'_>> = past(parts, done).map(IoSlice::new).collect();
        match netsteer_sock::buf::send_vectored_now(fd, &slices) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Writes every slice completely with as few writev(2) calls as the socket allows.
pub fn write_all_vectored(w: &mut impl Write, parts: &[&[u8]]) -> io::Result<()> {
    let mut idx = 0;
    let mut off = 0;
    loop {
        // Empty parts (and a part fully written) are skipped first: writev(2) of nothing but
        // empty buffers returns 0, which must not read as a peer that takes no more bytes.
        while idx < parts.len() && parts[idx].len() == off {
            idx += 1;
            off = 0;
        }
        if idx == parts.len() {
            return Ok(());
        }
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity((parts.len() - idx).min(128));
        slices.push(IoSlice::new(&parts[idx][off..]));
        slices.extend(parts[idx + 1..].iter().take(127).map(|p| IoSlice::new(p)));
        let mut n = match w.write_vectored(&slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        while idx < parts.len() && n > 0 {
            let left = parts[idx].len() - off;
            if n >= left {
                n -= left;
                idx += 1;
                off = 0;
            } else {
                off += n;
                n = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{FrameType, flags};
    use proptest::prelude::*;

    /// A reader that returns at most `cut` bytes per call, like a socket under load.
    struct Pieces {
        data: Vec<u8>,
        at: usize,
        cut: usize,
    }

    impl Source for Pieces {}

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.cut).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn data(seq: u64, len: u32) -> Header {
        Header {
            kind: FrameType::Data,
            flags: flags::EOM,
            src_port: 40000,
            dst_port: 7,
            len,
            credit: 0,
            seq,
        }
    }

    /// DATA frames of `lens` bytes back to back, seq counting on, payload byte i of a frame
    /// at seq s being (s + i) as u8; padded to whole lines when `padded`.
    fn data_stream(lens: &[u32], padded: bool) -> Vec<u8> {
        let mut stream = Vec::new();
        let mut seq = 0u64;
        for &len in lens {
            let mut h = data(seq, len);
            if padded {
                h.flags |= flags::PAD;
            }
            let (head, tail) = h.pads();
            stream.extend_from_slice(&h.encode());
            stream.extend_from_slice(&ZEROS[..head]);
            stream.extend((0..len).map(|i| (seq + u64::from(i)) as u8));
            stream.extend_from_slice(&ZEROS[..tail]);
            seq += u64::from(len);
        }
        stream
    }

    /// A socket-like source that records where each direct read was asked to land.
    struct Landing {
        inner: Pieces,
        dests: Vec<usize>,
    }

    impl Read for Landing {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.inner.read(buf)
        }
    }

    impl Source for Landing {
        fn append_exact(&mut self, v: &mut Vec<u8>, n: usize) -> io::Result<()> {
            self.dests.push(v.as_ptr() as usize + v.len());
            let at = v.len();
            v.resize(at + n, 0);
            self.inner.read_exact(&mut v[at..])
        }
    }

    /// Whatever part of a large payload was already staged, the kernel's copy of the rest
    /// starts on a cache line, and the payload comes back whole and in order.
    #[test]
    fn direct_reads_land_on_a_cache_line() {
        for staged in [0usize, 1, 15, 16, 63, 64, 100, 4095] {
            let len = 64 << 10;
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut stream = data(1, len as u32).encode().to_vec();
            stream.extend_from_slice(&payload);
            let src = Landing {
                inner: Pieces {
                    data: stream,
                    at: 0,
                    cut: usize::MAX,
                },
                dests: Vec::new(),
            };
            // A staging buffer of a header plus `staged` bytes stages exactly that much.
            let mut r = FrameReader::with_staging(src, 1 << 20, HEADER_LEN + staged);
            let (_, got) = r.next_frame().unwrap().unwrap();
            assert_eq!(&got[..], &payload[..], "staged {staged}");
            let dests = &r.get_ref().dests;
            assert_eq!(dests.len(), 1, "staged {staged}");
            assert_eq!(dests[0] % CACHE_LINE, 0, "staged {staged}");
        }
    }

    /// A full-size payload's buffer goes back to the pool when the application drops it and
    /// carries the next one; one still held is not reused, and small payloads get buffers of
    /// their own size.
    #[test]
    fn full_size_payload_buffers_are_recycled() {
        let max = 64 << 10;
        let mut stream = Vec::new();
        for (seq, len) in [(0u64, max), (1, max), (2, max), (3, 20_000)] {
            stream.extend_from_slice(&data(seq, len as u32).encode());
            stream.extend((0..len).map(|i| (i as u64 + seq) as u8));
        }
        let src = Pieces {
            data: stream,
            at: 0,
            cut: usize::MAX,
        };
        let mut r = FrameReader::with_staging(src, max as u32, HEADER_LEN);
        let check = |seq: u64, p: &Bytes| {
            assert!(
                p.iter()
                    .enumerate()
                    .all(|(i, &b)| b == (i as u64 + seq) as u8)
            );
            assert_eq!(p.as_ptr() as usize % CACHE_LINE, 0);
        };
        let (_, first) = r.next_frame().unwrap().unwrap();
        check(0, &first);
        let at = first.as_ptr();
        let pooled = |r: &FrameReader<Pieces>| r.pool.free.lock().unwrap().len();
        assert_eq!(pooled(&r), 0);
        drop(first);
        assert_eq!(pooled(&r), 1, "a dropped buffer goes back");
        let (_, second) = r.next_frame().unwrap().unwrap();
        check(1, &second);
        assert_eq!(pooled(&r), 0);
        assert_eq!(second.as_ptr(), at, "and carries the next payload");
        let (_, third) = r.next_frame().unwrap().unwrap();
        check(2, &third);
        assert_ne!(third.as_ptr(), second.as_ptr(), "a held buffer is not");
        drop((second, third));
        assert_eq!(pooled(&r), 2);
        let (h, small) = r.next_frame().unwrap().unwrap();
        assert_eq!(small.len(), h.len as usize);
        check(3, &small);
        assert_eq!(pooled(&r), 2, "a small payload takes no pooled buffer");
        assert!(pooled(&r) <= r.pool.keep);
        assert!(!r.pool.fits(20_000 + CACHE_LINE));
    }

    /// The pool keeps what it is told to, no more: a reader that ran five frames ahead keeps
    /// three of their buffers when told three frames' worth, and the default keeps 4 MiB.
    #[test]
    fn the_pool_keeps_what_the_reader_is_told() {
        let max = 64 << 10;
        let mut stream = Vec::new();
        for seq in 0..5u64 {
            stream.extend_from_slice(&data(seq, max as u32).encode());
            stream.extend(std::iter::repeat_n(seq as u8, max));
        }
        let src = || Pieces {
            data: stream.clone(),
            at: 0,
            cut: usize::MAX,
        };
        let pooled = |r: &FrameReader<Pieces>| r.pool.free.lock().unwrap().len();
        let mut r = FrameReader::with_staging(src(), max as u32, HEADER_LEN)
            .keep_free(3 * (max + CACHE_LINE));
        let held: Vec<Bytes> = (0..5).map(|_| r.next_frame().unwrap().unwrap().1).collect();
        assert!(
            held.iter()
                .enumerate()
                .all(|(i, p)| p.iter().all(|&b| b == i as u8))
        );
        drop(held);
        assert_eq!(pooled(&r), 3);
        let mut d = FrameReader::with_staging(src(), max as u32, HEADER_LEN);
        let held: Vec<Bytes> = (0..5).map(|_| d.next_frame().unwrap().unwrap().1).collect();
        drop(held);
        assert_eq!(pooled(&d), (POOL_KEEP_BYTES / (max + CACHE_LINE)).min(5));
    }

    /// A non-blocking source that has at most `cut` more bytes each time it is asked after
    /// running dry: every other call finds nothing (WouldBlock), as a socket read with
    /// MSG_DONTWAIT does while a peer's frame is still on its way.
    struct Stutter {
        inner: Pieces,
        dry: bool,
    }

    impl Stutter {
        fn turn(&mut self) -> io::Result<()> {
            self.dry = !self.dry;
            if self.dry {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(())
        }
    }

    impl Read for Stutter {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.turn()?;
            self.inner.read(buf)
        }
    }

    impl Source for Stutter {
        fn append_exact(&mut self, v: &mut Vec<u8>, n: usize) -> io::Result<()> {
            let want = v.len() + n;
            while v.len() < want {
                self.turn()?;
                let at = v.len();
                let k = (want - at).min(self.inner.cut);
                v.resize(at + k, 0);
                let got = self.inner.read(&mut v[at..])?;
                v.truncate(at + got);
                if got == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
            Ok(())
        }
    }

    /// A writer that accepts at most `cut` bytes per call.
    struct Short {
        out: Vec<u8>,
        cut: usize,
    }

    impl Write for Short {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.cut);
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    proptest! {
        // The decoder is fed arbitrary bytes in arbitrary pieces (a fuzzer's input): it never
        // panics, every frame it returns is well formed, and it ends with a frame, a clean end
        // or an error, never a hang.
        #[test]
        fn decoder_survives_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..8192),
                                    cut in 1usize..300) {
            let mut r = FrameReader::new(Pieces { data: bytes, at: 0, cut }, 8192);
            for _ in 0..10_000 {
                match r.next_frame() {
                    Ok(Some((h, p))) => {
                        prop_assert_eq!(p.len(), h.len as usize);
                        prop_assert!(h.len <= 8192);
                    }
                    Ok(None) | Err(_) => break,
                }
            }
        }

        // Valid frame streams cut at arbitrary points come back whole and in order; one
        // corrupted byte either still decodes to well-formed frames or gives an error.
        #[test]
        fn frames_survive_any_split(lens in proptest::collection::vec(0u32..40_000, 1..12),
                                    cut in 1usize..70_000, flip in any::<Option<(usize, u8)>>(),
                                    padded in any::<bool>()) {
            let mut stream = data_stream(&lens, padded);
            let corrupt = flip.is_some();
            if let Some((at, x)) = flip {
                let at = at % stream.len();
                stream[at] ^= x | 1;
            }
            let mut r = FrameReader::new(Pieces { data: stream, at: 0, cut }, 65536);
            let mut got = Vec::new();
            loop {
                match r.next_frame() {
                    Ok(Some(f)) => got.push(f),
                    Ok(None) => break,
                    Err(_) => { prop_assert!(corrupt); break; }
                }
            }
            if !corrupt {
                prop_assert_eq!(got.len(), lens.len());
                let mut seq = 0u64;
                for ((h, p), &len) in got.iter().zip(&lens) {
                    prop_assert_eq!(h.seq, seq);
                    prop_assert_eq!(h.len, len);
                    prop_assert!(p.iter().enumerate().all(|(i, &b)| b == (seq + i as u64) as u8));
                    seq += u64::from(len);
                }
            }
        }

        // A reader over a source that keeps running dry (WouldBlock) inside headers, pads
        // and payloads, staged or read directly, gives the same frames as over one that
        // never does, when each header and payload call is simply repeated until it
        // answers: nothing read before a WouldBlock is lost or read twice.
        #[test]
        fn frames_resume_after_would_block(lens in proptest::collection::vec(0u32..70_000, 1..10),
                                           cut in 1usize..50_000, padded in any::<bool>()) {
            let stream = data_stream(&lens, padded);
            let src = Stutter { inner: Pieces { data: stream, at: 0, cut }, dry: false };
            let mut r = FrameReader::new(src, 1 << 17);
            let would_block =
                |e: &ReadError| matches!(e, ReadError::Io(e) if e.kind() == io::ErrorKind::WouldBlock);
            let mut seq = 0u64;
            for &len in &lens {
                let h = loop {
                    match r.next_header() {
                        Ok(Some(h)) => break h,
                        Err(e) if would_block(&e) => continue,
                        other => panic!("{other:?}"),
                    }
                };
                prop_assert_eq!((h.seq, h.len), (seq, len));
                let p = loop {
                    match r.payload(&h) {
                        Ok(p) => break p,
                        Err(e) if would_block(&e) => continue,
                        Err(e) => panic!("{e}"),
                    }
                };
                prop_assert_eq!(p.len(), len as usize);
                prop_assert!(p.iter().enumerate().all(|(i, &b)| b == (seq + i as u64) as u8));
                seq += u64::from(len);
            }
            loop {
                match r.next_header() {
                    Ok(None) => break,
                    Err(e) if would_block(&e) => continue,
                    other => panic!("trailing {other:?}"),
                }
            }
        }

        #[test]
        fn vectored_writes_are_complete(parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..200),
                                        cut in 1usize..1000) {
            let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
            let mut w = Short { out: Vec::new(), cut };
            write_all_vectored(&mut w, &refs).unwrap();
            prop_assert_eq!(w.out, parts.concat());
        }
    }

    /// Nothing to write is written: a message of empty parts, and empty parts ahead of a
    /// whole batch (more than the 128 slices of one writev), never read as WriteZero.
    #[test]
    fn empty_parts_are_written_as_nothing() {
        let mut w = Short {
            out: Vec::new(),
            cut: 1,
        };
        write_all_vectored(&mut w, &[]).unwrap();
        write_all_vectored(&mut w, &[&[], &[]]).unwrap();
        assert!(w.out.is_empty());
        let mut parts: Vec<&[u8]> = vec![&[]; 300];
        parts.push(b"abc");
        parts.extend([&[][..]; 3]);
        parts.push(b"de");
        write_all_vectored(&mut w, &parts).unwrap();
        assert_eq!(w.out, b"abcde");
    }

    #[test]
    fn a_huge_length_is_refused_before_any_allocation() {
        let mut h = data(0, 0).encode();
        h[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        let mut r = FrameReader::new(
            Pieces {
                data: h.to_vec(),
                at: 0,
                cut: 24,
            },
            65536,
        );
        assert!(matches!(r.next_frame(), Err(ReadError::Wire(_))));
    }
}
