//! Reading a throughput channel: spin briefly, then sleep in poll(2) with SO_RCVLOWAT set to
//! the bytes a large payload still misses, so the reader wakes once per payload.

use super::*;

/// A channel read that spins (non-blocking polls) for `spin` before sleeping in read(2):
/// the latency class trades a core for the wake-up latency.
pub(crate) struct SpinRead {
    pub(super) stream: TcpStream,
    pub(super) spin: Duration,
    /// Readers to wake before this thread sleeps.
    pub wakes: Wakes,
    /// Sleep until a large payload has arrived whole (SO_RCVLOWAT) instead of waking for
    /// each piece: the throughput class.
    pub(super) whole_payloads: bool,
    /// Reads return WouldBlock instead of waiting: set while an application thread looks for
    /// the next frame header (see `crate::drive`), never inside a frame.
    pub(crate) dontwait: bool,
    /// A non-waiting read came back short: the socket held no more at that moment, so the
    /// next one answers WouldBlock without a system call, until the pump that reads starts
    /// over (`crate::drive` clears it). Saves the recv(2) that fails with EAGAIN at the end of
    /// every pump (0.2-0.4 per request in the proxy pair at pipelining 1, strace). An arrival
    /// after that read wakes the next wait (level-triggered epoll and poll see the bytes; an
    /// edge-triggered reactor gets a new edge).
    pub(crate) drained: bool,
}

/// Payloads from this size up are read whole: SO_RCVLOWAT is set to what is missing first.
const WHOLE_PAYLOAD_MIN: usize = 64 * 1024;

impl SpinRead {
    /// Appends `n` payload bytes, sleeping until all of them are in the socket.
    ///
    /// Why: a reader that wakes for every arrival copies a 1 MiB payload in many small reads,
    /// and each wake-up is paid for on the CPU that delivers the segments (the sender's, on
    /// loopback). Plain TCP reading 1 MiB at a time on the 2-vCPU VM: 17.7-23.8 Gbit/s per
    /// core with the default low-water mark, 27.7-32.7 with SO_RCVLOWAT at 1 MiB
    /// (BENCHMARKS.md, issue 14 ninth pass).
    ///
    /// The mark is always exactly the bytes still missing, never more: the kernel wakes a
    /// sleeping reader only once that many are queued (tcp_data_ready, net/ipv4/tcp_input.c),
    /// and the peer is only bound to send the rest of this frame. It sleeps in poll(2), not in
    /// read(2): a blocking read copies what is queued and then sleeps for the rest, but the
    /// kernel still wakes it only when a whole mark's worth more has arrived, which at the end
    /// of a burst never happens (a stall this was first built with). The read after the poll
    /// does not block. The mark goes back to 1 after, so header reads wake for any byte.
    fn append_whole(&mut self, v: &mut Vec<u8>, n: usize) -> io::Result<()> {
        let fd = self.stream.as_fd();
        let want = v.len() + n;
        let res = (|| {
            while v.len() < want {
                let missing = want - v.len();
                tcp::set_recv_low_water(fd, u32::try_from(missing).unwrap_or(u32::MAX))?;
                if !tcp::wait_readable(fd, 0)? {
                    self.wakes.flush();
                    // Readable: the mark's worth is queued, or the stream ended or failed, or
                    // the kernel is short of receive memory; the read takes what is there.
                    tcp::wait_readable(fd, -1)?;
                }
                if netsteer_sock::buf::recv_append_now(fd, v, missing)? == Some(0) {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
            Ok(())
        })();
        let reset = tcp::set_recv_low_water(fd, 1);
        res.and(reset)
    }
}

impl Read for SpinRead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.dontwait {
            if self.drained {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = netsteer_sock::buf::recv_now(self.stream.as_fd(), buf)?;
            self.drained = n < buf.len();
            return Ok(n);
        }
        if !self.wakes.is_empty() && !tcp::wait_readable(self.stream.as_fd(), 0)? {
            self.wakes.flush();
        }
        if !self.spin.is_zero() {
            let until = Instant::now() + self.spin;
            while !tcp::wait_readable(self.stream.as_fd(), 0)? && Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        (&self.stream).read(buf)
    }
}

impl crate::frame_io::Source for SpinRead {
    fn append_exact(&mut self, v: &mut Vec<u8>, n: usize) -> io::Result<()> {
        if self.dontwait {
            // What is queued, then WouldBlock with the bytes so far left in `v` (the frame
            // reader keeps them and goes on later).
            let want = v.len() + n;
            while v.len() < want {
                if self.drained {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                let asked = want - v.len();
                match netsteer_sock::buf::recv_append_now(self.stream.as_fd(), v, asked)? {
                    None => return Err(io::ErrorKind::WouldBlock.into()),
                    Some(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Some(k) => self.drained = k < asked,
                }
            }
            return Ok(());
        }
        if self.whole_payloads && n >= WHOLE_PAYLOAD_MIN {
            return self.append_whole(v, n);
        }
        // Straight into the vector's spare capacity: no zero-fill, one read per arrival.
        netsteer_sock::buf::read_append_exact(self.stream.as_fd(), v, n)
    }
}

impl AsFd for SpinRead {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.stream.as_fd()
    }
}
