//! The wire format. Each channel is a TCP byte stream that starts with one HELLO frame in
//! each direction and then carries frames back to back. Every frame is a 24-byte header,
//! big-endian, followed by `len` payload bytes:
//!
//! ```text
//!  0      1      2         3         4          6          8           12          16          24
//!  | type | flags| hdr_len | version | src_port | dst_port | len (u32) | credit(u32)| seq (u64) |
//! ```
//!
//! * `hdr_len` is the header length in 4-byte words (6); `version` is [`VERSION`]. A frame with
//!   another value of either is refused: there are no optional header words.
//! * `src_port`/`dst_port` are the virtual ports of the sending and the receiving socket.
//!   Together with the session (the group of channels) they name one virtual socket.
//! * `len` is the payload length: DATA up to the `max_frame` both sides agreed in HELLO
//!   (at most [`MAX_FRAME_LIMIT`]); HELLO exactly [`HELLO_LEN`]; every other type 0.
//!
//! | type | name | fields |
//! |---|---|---|
//! | 1 | HELLO | payload = [`Hello`]; ports, credit and seq are 0 |
//! | 2 | DATA | `seq` = stream offset of the first payload byte; flag EOM ends a message |
//! | 3 | OPEN | opens `src_port` → `dst_port`; `credit` = the opener's receive window |
//! | 4 | OPEN_ACK | accepts an OPEN; `credit` = the acceptor's receive window |
//! | 5 | CREDIT | `seq` = bytes of the stream the reader has consumed; `credit` = its window. The sender may send up to `seq + credit`, and may drop its copies of frames below `seq`. Sent every quarter window and once at EOF. |
//! | 6 | FIN | no more data; `seq` = the stream's final length (data on other channels may still be in flight) |
//! | 7 | RST | the socket is aborted; `credit` = an [`RstReason`] code |
//!
//! Recovery: when a channel dies, each side re-sends on the surviving channels of the
//! socket's class every DATA frame it had put on the dead channel and not yet seen consumed
//! (same `seq`, same payload), plus its FIN, its latest CREDIT and an OPEN still unanswered.
//! A receiver drops DATA it already holds or has consumed, takes a FIN with the same final
//! length again, and answers an OPEN for a socket it has with OPEN_ACK.
//!
//! Flags: bit 0 EOM (end of message), bit 1 LAT (sent by a latency-class socket), bit 2 PAD
//! (the frame is padded, below). Unknown flag bits are refused so that a later version can
//! give them meaning.
//!
//! Padding (flag PAD): zero bytes the receiver skips. A payload of at least
//! [`HEAD_PAD_MIN`] bytes starts [`ALIGN`] bytes after its header's first byte (40 bytes of
//! pad after the header), and every padded frame ends with a tail pad that makes its whole
//! length a multiple of [`ALIGN`]. Why: the kernel copies a write(2) into its page fragments
//! back to back, starting each fragment page at offset 0, so a thread whose writes are all
//! multiples of 64 bytes has every payload copied to a 64-byte aligned destination — and on
//! the AMD EPYC measured here `rep movsb` runs at about half speed into one that is not
//! (BENCHMARKS.md, issue 14: raw TCP writing a 24-byte header and 1 MiB, 12.7 Gbit/s per core
//! at a fixed misalignment against 23.5 aligned; netchannel's own stream, padded against not,
//! 0.824 against 0.759 of TCP's rate per core, better in 7 of 8 alternated pairs). The
//! payload also lies 64-byte aligned in the skb pages the receiver's copy reads from. HELLO is
//! never padded.

use thiserror::Error;

pub const HEADER_LEN: usize = 24;
/// 2: frames may be re-sent after a channel dies (a receiver drops what it already has), the
/// reader sends a final CREDIT at EOF, and a repeated OPEN is answered again. Version 1
/// peers failed sockets instead, so the two do not mix.
///
/// 3: frames may be padded (flag PAD). Version 2 peers refuse the flag, so the two do not mix.
pub const VERSION: u8 = 3;
/// Padded frames are whole multiples of this, and large payloads start on it.
pub const ALIGN: usize = 64;
/// Padded payloads at least this long start [`ALIGN`] bytes into their frame. Below it the 40
/// bytes of head pad would cost more than 1 % of the payload.
pub const HEAD_PAD_MIN: u32 = 4096;
/// The HELLO payload's first bytes.
pub const MAGIC: [u8; 4] = *b"NSCH";
pub const HELLO_LEN: usize = 32;
/// No peer may ask for frames larger than this (bounds the memory one frame can take).
pub const MAX_FRAME_LIMIT: u32 = 1 << 20;

pub mod flags {
    pub const EOM: u8 = 1;
    pub const LAT: u8 = 2;
    pub const PAD: u8 = 4;
    pub const ALL: u8 = EOM | LAT | PAD;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameType {
    Hello = 1,
    Data = 2,
    Open = 3,
    OpenAck = 4,
    Credit = 5,
    Fin = 6,
    Rst = 7,
}

impl FrameType {
    fn from_u8(v: u8) -> Option<FrameType> {
        Some(match v {
            1 => FrameType::Hello,
            2 => FrameType::Data,
            3 => FrameType::Open,
            4 => FrameType::OpenAck,
            5 => FrameType::Credit,
            6 => FrameType::Fin,
            7 => FrameType::Rst,
            _ => return None,
        })
    }
}

/// Why a socket was reset (the `credit` field of RST).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RstReason {
    /// Nobody listens on the destination port, or its accept queue is full.
    Refused = 1,
    /// A channel that carried this socket's data died; bytes may be lost.
    ChannelLost = 2,
    /// The peer closed the socket without reading everything, or broke the protocol.
    Aborted = 3,
    /// The peer has too many sockets open on this session.
    TooManySockets = 4,
}

impl RstReason {
    pub fn from_u32(v: u32) -> RstReason {
        match v {
            1 => RstReason::Refused,
            2 => RstReason::ChannelLost,
            4 => RstReason::TooManySockets,
            _ => RstReason::Aborted,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: FrameType,
    pub flags: u8,
    pub src_port: u16,
    pub dst_port: u16,
    pub len: u32,
    pub credit: u32,
    pub seq: u64,
}

impl Header {
    pub fn control(kind: FrameType, src_port: u16, dst_port: u16, credit: u32, seq: u64) -> Header {
        Header {
            kind,
            flags: 0,
            src_port,
            dst_port,
            len: 0,
            credit,
            seq,
        }
    }

    /// Pad bytes between the header and the payload, and after the payload (both 0 for a
    /// frame without the PAD flag).
    pub fn pads(&self) -> (usize, usize) {
        if self.flags & flags::PAD == 0 {
            return (0, 0);
        }
        let head = if self.len >= HEAD_PAD_MIN {
            ALIGN - HEADER_LEN
        } else {
            0
        };
        let used = (HEADER_LEN + head + self.len as usize) % ALIGN;
        (head, (ALIGN - used) % ALIGN)
    }

    /// Bytes the frame takes on the channel: header, pads and payload.
    pub fn wire_len(&self) -> usize {
        let (head, tail) = self.pads();
        HEADER_LEN + head + self.len as usize + tail
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.kind as u8;
        b[1] = self.flags;
        b[2] = (HEADER_LEN / 4) as u8;
        b[3] = VERSION;
        b[4..6].copy_from_slice(&self.src_port.to_be_bytes());
        b[6..8].copy_from_slice(&self.dst_port.to_be_bytes());
        b[8..12].copy_from_slice(&self.len.to_be_bytes());
        b[12..16].copy_from_slice(&self.credit.to_be_bytes());
        b[16..24].copy_from_slice(&self.seq.to_be_bytes());
        b
    }

    /// Parses and checks a header. `max_frame` is the DATA payload limit of this channel.
    pub fn decode(b: &[u8; HEADER_LEN], max_frame: u32) -> Result<Header, WireError> {
        let kind = FrameType::from_u8(b[0]).ok_or(WireError::UnknownType(b[0]))?;
        if b[2] as usize != HEADER_LEN / 4 {
            return Err(WireError::HeaderLength(b[2]));
        }
        if b[3] != VERSION {
            return Err(WireError::Version(b[3]));
        }
        let flags = b[1];
        if flags & !flags::ALL != 0 {
            return Err(WireError::Flags(flags));
        }
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let h = Header {
            kind,
            flags,
            src_port: u16_at(4),
            dst_port: u16_at(6),
            len: u32_at(8),
            credit: u32_at(12),
            seq: u64::from_be_bytes(b[16..24].try_into().expect("8 bytes")),
        };
        let allowed = match kind {
            FrameType::Data => max_frame.min(MAX_FRAME_LIMIT),
            FrameType::Hello => HELLO_LEN as u32,
            _ => 0,
        };
        if kind == FrameType::Hello && h.len != HELLO_LEN as u32 || h.len > allowed {
            return Err(WireError::Length {
                kind,
                len: h.len,
                max: allowed,
            });
        }
        if kind == FrameType::Data && h.seq.checked_add(u64::from(h.len)).is_none() {
            return Err(WireError::SeqOverflow(h.seq));
        }
        Ok(h)
    }
}

/// Channel class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    Throughput = 0,
    Latency = 1,
}

/// The HELLO payload: which link (session) a channel belongs to and how it is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    /// Random per session; the accepting side groups channels by it.
    pub link_id: u64,
    pub channel_index: u16,
    pub class: Class,
    pub throughput_channels: u16,
    pub latency_channels: u16,
    /// Largest DATA payload this side will send.
    pub max_frame: u32,
}

impl Hello {
    /// Both counts come from the peer: added in 32 bits so 0xFFFF + 2 cannot wrap to 1 and
    /// slip past the `MAX_CHANNELS` check.
    pub fn total_channels(&self) -> u32 {
        u32::from(self.throughput_channels) + u32::from(self.latency_channels)
    }

    pub fn encode(&self) -> [u8; HEADER_LEN + HELLO_LEN] {
        let mut b = [0u8; HEADER_LEN + HELLO_LEN];
        let h = Header {
            kind: FrameType::Hello,
            flags: 0,
            src_port: 0,
            dst_port: 0,
            len: HELLO_LEN as u32,
            credit: 0,
            seq: 0,
        };
        b[..HEADER_LEN].copy_from_slice(&h.encode());
        let p = &mut b[HEADER_LEN..];
        p[0..4].copy_from_slice(&MAGIC);
        p[4..6].copy_from_slice(&self.version.to_be_bytes());
        p[6..14].copy_from_slice(&self.link_id.to_be_bytes());
        p[14..16].copy_from_slice(&self.channel_index.to_be_bytes());
        p[16] = self.class as u8;
        p[17..19].copy_from_slice(&self.throughput_channels.to_be_bytes());
        p[19..21].copy_from_slice(&self.latency_channels.to_be_bytes());
        p[21..25].copy_from_slice(&self.max_frame.to_be_bytes());
        b
    }

    /// Parses a whole HELLO frame (header and payload) and checks it.
    pub fn decode(b: &[u8; HEADER_LEN + HELLO_LEN]) -> Result<Hello, WireError> {
        let h = Header::decode(b[..HEADER_LEN].try_into().expect("header"), 0)?;
        if h.kind != FrameType::Hello {
            return Err(WireError::Unexpected(h.kind));
        }
        let p = &b[HEADER_LEN..];
        if p[0..4] != MAGIC {
            return Err(WireError::Magic([p[0], p[1], p[2], p[3]]));
        }
        let u16_at = |i: usize| u16::from_be_bytes([p[i], p[i + 1]]);
        let version = u16_at(4);
        if version != u16::from(VERSION) {
            return Err(WireError::HelloVersion(version));
        }
        let class = match p[16] {
            0 => Class::Throughput,
            1 => Class::Latency,
            c => return Err(WireError::Class(c)),
        };
        let hello = Hello {
            version,
            link_id: u64::from_be_bytes(p[6..14].try_into().expect("8 bytes")),
            channel_index: u16_at(14),
            class,
            throughput_channels: u16_at(17),
            latency_channels: u16_at(19),
            max_frame: u32::from_be_bytes(p[21..25].try_into().expect("4 bytes")),
        };
        if hello.throughput_channels == 0
            || hello.total_channels() > u32::from(MAX_CHANNELS)
            || u32::from(hello.channel_index) >= hello.total_channels()
        {
            return Err(WireError::Channels {
                index: hello.channel_index,
                throughput: hello.throughput_channels,
                latency: hello.latency_channels,
            });
        }
        let expected = if hello.channel_index < hello.throughput_channels {
            Class::Throughput
        } else {
            Class::Latency
        };
        if class != expected {
            return Err(WireError::Class(p[16]));
        }
        if hello.max_frame < MIN_FRAME || hello.max_frame > MAX_FRAME_LIMIT {
            return Err(WireError::MaxFrame(hello.max_frame));
        }
        Ok(hello)
    }
}

/// Channels per session: the per-socket "channels used" set is a u64 bitmap.
pub const MAX_CHANNELS: u16 = 64;
pub const MIN_FRAME: u32 = 4096;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("unknown frame type {0}")]
    UnknownType(u8),
    #[error("header length {0} words (version 1 headers are 6 words)")]
    HeaderLength(u8),
    #[error("frame version {0} (this build speaks {VERSION})")]
    Version(u8),
    #[error("unknown flag bits {0:#04x}")]
    Flags(u8),
    #[error("{kind:?} frame of {len} bytes (at most {max})")]
    Length { kind: FrameType, len: u32, max: u32 },
    #[error("DATA seq {0} overflows the 64-bit stream offset")]
    SeqOverflow(u64),
    #[error("expected HELLO, got {0:?}")]
    Unexpected(FrameType),
    #[error("bad magic {0:02x?} (not a netchannel peer)")]
    Magic([u8; 4]),
    #[error("HELLO version {0} (this build speaks {VERSION})")]
    HelloVersion(u16),
    #[error("bad channel class {0}")]
    Class(u8),
    #[error(
        "bad channel layout: index {index} of {throughput} throughput + {latency} latency channels (at most {MAX_CHANNELS})"
    )]
    Channels {
        index: u16,
        throughput: u16,
        latency: u16,
    },
    #[error("max_frame {0} outside {MIN_FRAME}..={MAX_FRAME_LIMIT}")]
    MaxFrame(u32),
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    #[test]
    fn header_round_trip_and_layout() {
        let h = data(0x0102_0304_0506_0708, 4096);
        let b = h.encode();
        assert_eq!(&b[..8], &[2, 1, 6, VERSION, 0x9c, 0x40, 0, 7]);
        assert_eq!(&b[16..24], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Header::decode(&b, 65536).unwrap(), h);
    }

    /// Every padded frame is a whole number of 64-byte lines, and a payload from
    /// HEAD_PAD_MIN up starts on the line after its header; unpadded frames have no pad.
    #[test]
    fn padded_frames_fill_whole_lines() {
        for len in [0u32, 1, 39, 40, 41, 100, 4095, 4096, 4097, 65_536, 1 << 20] {
            let mut h = data(0, len);
            assert_eq!(h.pads(), (0, 0), "len {len}");
            assert_eq!(h.wire_len(), HEADER_LEN + len as usize);
            h.flags |= flags::PAD;
            let (head, tail) = h.pads();
            assert_eq!(h.wire_len() % ALIGN, 0, "len {len}");
            assert!(tail < ALIGN, "len {len}");
            if len >= HEAD_PAD_MIN {
                assert_eq!(HEADER_LEN + head, ALIGN, "len {len}");
            } else {
                assert_eq!(head, 0, "len {len}");
            }
            assert_eq!(Header::decode(&h.encode(), 1 << 20).unwrap(), h);
        }
    }

    #[test]
    fn hostile_headers_are_refused() {
        let good = data(0, 100).encode();
        let mut b = good;
        b[0] = 99;
        assert_eq!(Header::decode(&b, 65536), Err(WireError::UnknownType(99)));
        let mut b = good;
        b[3] = 1;
        assert_eq!(Header::decode(&b, 65536), Err(WireError::Version(1)));
        let mut b = good;
        b[1] = 0x80;
        assert!(matches!(
            Header::decode(&b, 65536),
            Err(WireError::Flags(_))
        ));
        let huge = data(0, u32::MAX).encode();
        assert!(matches!(
            Header::decode(&huge, 65536),
            Err(WireError::Length { .. })
        ));
        let mut credit = Header::control(FrameType::Credit, 1, 2, 3, 4);
        credit.len = 5;
        assert!(Header::decode(&credit.encode(), 65536).is_err());
        assert!(matches!(
            Header::decode(&data(u64::MAX - 10, 100).encode(), 65536),
            Err(WireError::SeqOverflow(_))
        ));
    }

    #[test]
    fn hello_round_trip_and_checks() {
        let h = Hello {
            version: u16::from(VERSION),
            link_id: 0xdead_beef_0bad_cafe,
            channel_index: 3,
            class: Class::Latency,
            throughput_channels: 3,
            latency_channels: 1,
            max_frame: 65536,
        };
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        let mut b = h.encode();
        b[HEADER_LEN] = b'X';
        assert!(matches!(Hello::decode(&b), Err(WireError::Magic(_))));
        let wrong_class = Hello {
            class: Class::Throughput,
            ..h
        };
        assert!(Hello::decode(&wrong_class.encode()).is_err());
        let too_many = Hello {
            throughput_channels: 100,
            ..h
        };
        assert!(Hello::decode(&too_many.encode()).is_err());
        let huge = Hello {
            max_frame: u32::MAX,
            ..h
        };
        assert!(Hello::decode(&huge.encode()).is_err());
    }

    proptest! {
        #[test]
        fn hello_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), HEADER_LEN + HELLO_LEN)) {
            let b: [u8; HEADER_LEN + HELLO_LEN] = bytes.try_into().unwrap();
            let _ = Hello::decode(&b);
        }
    }
}
