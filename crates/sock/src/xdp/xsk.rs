//! An AF_XDP socket (Documentation/networking/af_xdp.rst): a UMEM of fixed-size frames shared
//! with the kernel, and four single-producer/single-consumer rings mapped from the socket —
//! FILL (frames given to the kernel for receiving), RX (received frames), TX (frames to send)
//! and COMPLETION (sent frames given back).
//!
//! Ring indexes are free-running u32s; slot = index & (size - 1). The producer writes the
//! slots, then publishes its index with a release store; the consumer reads the index with an
//! acquire load before reading the slots, then publishes its own index with a release store
//! (the kernel side pairs them with smp_load_acquire/smp_store_release, xsk_queue.h).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// An RX or TX descriptor: a frame's UMEM address and length.
pub type Desc = libc::xdp_desc;

/// The descriptor of `len` bytes at `addr`.
pub fn desc(addr: u64, len: u32) -> Desc {
    Desc {
        addr,
        len,
        options: 0,
    }
}

/// How the socket binds to its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// The kernel copies frames between its buffers and the UMEM (works on every driver).
    Copy,
    /// The driver DMAs into the UMEM (only drivers with AF_XDP zero-copy support).
    ZeroCopy,
}

/// A UMEM: anonymous, page-aligned memory of `frames` frames of `frame_size` bytes.
pub struct Umem {
    ptr: NonNull<u8>,
    len: usize,
    pub frame_size: u32,
    pub frames: u32,
}

// SAFETY: the mapping is plain memory owned by this value; moving it to another thread moves
// the only handle (frames are handed to the kernel through the rings, not through aliases).
unsafe impl Send for Umem {}

impl Umem {
    pub fn new(frames: u32, frame_size: u32) -> io::Result<Umem> {
        if !frame_size.is_power_of_two() || !(2048..=4096).contains(&frame_size) || frames == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frames of 2048 or 4096 bytes, at least one",
            ));
        }
        let len = frames as usize * frame_size as usize;
        // SAFETY: an anonymous private mapping with no address hint: it aliases nothing, and
        // the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Umem {
            ptr: NonNull::new(p as *mut u8).expect("mmap returned a non-null address"),
            len,
            frame_size,
            frames,
        })
    }

    /// The bytes at UMEM address `addr`, `len` long, when they lie inside one frame.
    pub fn bytes(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let start = usize::try_from(addr).ok()?;
        let end = start.checked_add(len)?;
        let frame = start / self.frame_size as usize;
        if end > self.len || (end.max(1) - 1) / self.frame_size as usize != frame {
            return None;
        }
        // SAFETY: [start, end) lies inside the mapping (checked above), which lives as long as
        // `self`; the frame at `addr` was handed back by the kernel (RX or COMPLETION) or not
        // yet given to it, so the kernel does not write it meanwhile, and `&mut self` keeps
        // any other slice of the UMEM from existing at the same time.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(start), len) })
    }

    /// The address of frame `i`.
    pub fn frame_addr(&self, i: u32) -> u64 {
        u64::from(i) * u64::from(self.frame_size)
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; the socket that registered it is
        // closed first (fields drop in declaration order in `Xsk`).
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}

/// One mapped ring. `D` is the descriptor: u64 (FILL, COMPLETION) or `libc::xdp_desc`.
pub struct Ring<D: Copy> {
    map: NonNull<u8>,
    map_len: usize,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    desc: NonNull<D>,
    size: u32,
    /// This side's view: the index it publishes next and the other side's last seen index.
    cached_prod: u32,
    cached_cons: u32,
}

// SAFETY: the ring's mapping belongs to this value; the kernel is the only other party and it
// synchronizes through the producer/consumer atomics.
unsafe impl<D: Copy> Send for Ring<D> {}

impl<D: Copy> Ring<D> {
    /// Maps the ring of `fd` at page offset `pgoff` laid out as `off` says.
    fn map(
        fd: BorrowedFd<'_>,
        off: &libc::xdp_ring_offset,
        size: u32,
        pgoff: libc::off_t,
    ) -> io::Result<Ring<D>> {
        let map_len = off.desc as usize + size as usize * std::mem::size_of::<D>();
        // SAFETY: a shared mapping of the socket's ring at the offset the kernel documents for
        // it (XDP_PGOFF_* / XDP_UMEM_PGOFF_*), of the length the kernel's own offsets give;
        // the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                pgoff,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = p as *mut u8;
        // SAFETY: the offsets come from XDP_MMAP_OFFSETS for this very ring and lie inside the
        // mapping; the kernel aligns the u32 indexes and the descriptors.
        let at = |o: u64| unsafe { NonNull::new_unchecked(base.add(o as usize)) };
        Ok(Ring {
            map: NonNull::new(base).expect("mmap returned a non-null address"),
            map_len,
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            flags: at(off.flags).cast(),
            desc: at(off.desc).cast(),
            size,
            cached_prod: 0,
            cached_cons: 0,
        })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping at the kernel's producer index, an aligned u32
        // that is only accessed atomically.
        unsafe { self.producer.as_ref() }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as `producer`, for the consumer index.
        unsafe { self.consumer.as_ref() }
    }

    /// The ring's flags word (XDP_RING_NEED_WAKEUP).
    pub fn needs_wakeup(&self) -> bool {
        // SAFETY: as `producer`, for the flags word.
        let flags = unsafe { self.flags.as_ref() };
        flags.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    fn slot(&self, idx: u32) -> *mut D {
        // SAFETY: idx & (size - 1) < size, and the descriptor array has `size` entries inside
        // the mapping.
        unsafe { self.desc.as_ptr().add((idx & (self.size - 1)) as usize) }
    }

    // Producer side (FILL, TX).

    /// Slots free for producing, up to `want`.
    pub fn free(&mut self, want: u32) -> u32 {
        let used = self.cached_prod.wrapping_sub(self.cached_cons);
        if self.size - used < want {
            self.cached_cons = self.consumer().load(Ordering::Acquire);
        }
        (self.size - self.cached_prod.wrapping_sub(self.cached_cons)).min(want)
    }

    /// Writes one descriptor at the next free slot (after `free` said there is one).
    pub fn put(&mut self, d: D) {
        // SAFETY: the slot is free (the caller checked `free`): the kernel does not read it
        // until the producer index is published in `submit`.
        unsafe { self.slot(self.cached_prod).write(d) };
        self.cached_prod = self.cached_prod.wrapping_add(1);
    }

    /// Publishes what `put` wrote.
    pub fn submit(&mut self) {
        self.producer().store(self.cached_prod, Ordering::Release);
    }

    // Consumer side (RX, COMPLETION).

    /// Descriptors ready, up to `want`.
    pub fn ready(&mut self, want: u32) -> u32 {
        let mut n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n == 0 {
            self.cached_prod = self.producer().load(Ordering::Acquire);
            n = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        n.min(want)
    }

    /// The next ready descriptor (after `ready` said there is one).
    pub fn take(&mut self) -> D {
        // SAFETY: the slot was published by the kernel (its producer index, acquired in
        // `ready`, is past it) and is not reused before `release` publishes our consumer index.
        let d = unsafe { self.slot(self.cached_cons).read() };
        self.cached_cons = self.cached_cons.wrapping_add(1);
        d
    }

    /// Gives the taken slots back to the kernel.
    pub fn release(&mut self) {
        self.consumer().store(self.cached_cons, Ordering::Release);
    }
}

impl<D: Copy> Drop for Ring<D> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe {
            libc::munmap(self.map.as_ptr() as *mut libc::c_void, self.map_len);
        }
    }
}

fn setsockopt<T>(fd: BorrowedFd<'_>, opt: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a live value of the type the option takes (u32 ring sizes,
    // xdp_umem_reg), passed with its exact size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Reads an option whose value is one of the kernel's all-integer structs (xdp_mmap_offsets,
/// xdp_statistics), for which all-zero bytes are a valid value.
fn getsockopt<T: Copy>(fd: BorrowedFd<'_>, opt: libc::c_int) -> io::Result<T> {
    // SAFETY: T is only ever a plain #[repr(C)] struct of integers (see the callers), valid
    // when zeroed.
    let mut v: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is writable and `len` is its size; the kernel writes at most `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            &mut v as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

/// Where a socket failed to come up, for the caller's message.
#[derive(Debug)]
pub struct XskError {
    pub step: &'static str,
    pub source: io::Error,
}

fn step(step: &'static str) -> impl Fn(io::Error) -> XskError {
    move |source| XskError { step, source }
}

/// The XDP_STATISTICS counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskStats {
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

/// An AF_XDP socket bound to one queue, with its UMEM and rings.
pub struct Xsk {
    // Declaration order is drop order: rings unmapped, then the socket closed, then the UMEM
    // unmapped (the kernel holds the UMEM pages while the socket lives).
    pub fill: Ring<u64>,
    pub comp: Ring<u64>,
    pub rx: Ring<libc::xdp_desc>,
    pub tx: Ring<libc::xdp_desc>,
    fd: OwnedFd,
    pub umem: Umem,
    pub mode: BindMode,
}

impl Xsk {
    /// Creates the socket, registers `umem`, sizes and maps the rings (`ring` entries each, a
    /// power of two) and binds to (`ifindex`, `queue`) in `mode` with XDP_USE_NEED_WAKEUP.
    pub fn bind(
        umem: Umem,
        ring: u32,
        ifindex: u32,
        queue: u32,
        mode: BindMode,
    ) -> Result<Xsk, XskError> {
        if !ring.is_power_of_two() {
            return Err(XskError {
                step: "ring size",
                source: io::Error::new(io::ErrorKind::InvalidInput, "not a power of two"),
            });
        }
        // SAFETY: socket(2) with constant arguments; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(XskError {
                step: "socket(AF_XDP)",
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: a fresh fd from socket(2), owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let b = fd.as_fd();
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr.as_ptr() as u64,
            len: umem.len as u64,
            chunk_size: umem.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(b, libc::XDP_UMEM_REG, &reg).map_err(step("registering the UMEM"))?;
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            setsockopt(b, opt, &ring).map_err(step("sizing the rings"))?;
        }
        let off: libc::xdp_mmap_offsets =
            getsockopt(b, libc::XDP_MMAP_OFFSETS).map_err(step("XDP_MMAP_OFFSETS"))?;
        let fill = Ring::map(
            b,
            &off.fr,
            ring,
            libc::XDP_UMEM_PGOFF_FILL_RING as libc::off_t,
        )
        .map_err(step("mapping the FILL ring"))?;
        let comp = Ring::map(
            b,
            &off.cr,
            ring,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING as libc::off_t,
        )
        .map_err(step("mapping the COMPLETION ring"))?;
        let rx = Ring::map(b, &off.rx, ring, libc::XDP_PGOFF_RX_RING)
            .map_err(step("mapping the RX ring"))?;
        let tx = Ring::map(b, &off.tx, ring, libc::XDP_PGOFF_TX_RING)
            .map_err(step("mapping the TX ring"))?;
        let mut xsk = Xsk {
            fill,
            comp,
            rx,
            tx,
            fd,
            umem,
            mode,
        };
        // Half the frames go to the kernel for receiving; the rest are for sending.
        let give = (xsk.umem.frames / 2).min(ring);
        if xsk.fill.free(give) < give {
            return Err(XskError {
                step: "filling the FILL ring",
                source: io::Error::other("no room"),
            });
        }
        for i in 0..give {
            let a = xsk.umem.frame_addr(i);
            xsk.fill.put(a);
        }
        xsk.fill.submit();
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_USE_NEED_WAKEUP
                | match mode {
                    BindMode::Copy => libc::XDP_COPY,
                    BindMode::ZeroCopy => libc::XDP_ZEROCOPY,
                },
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: `sa` is a live sockaddr_xdp passed with its size.
        let r = unsafe {
            libc::bind(
                xsk.fd.as_raw_fd(),
                &sa as *const libc::sockaddr_xdp as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(XskError {
                step: "bind",
                source: io::Error::last_os_error(),
            });
        }
        Ok(xsk)
    }

    /// Frames the kernel does not hold at start: `frames/2 ..` (the sender's pool).
    pub fn first_tx_frame(&self) -> u32 {
        (self.umem.frames / 2).min(self.fill.size)
    }

    /// Whether TX needs a kick to be sent: always in copy mode (the kernel sends a copy-mode
    /// socket's frames only from sendmsg, af_xdp.rst), else when the ring's flag asks.
    pub fn tx_needs_kick(&self) -> bool {
        self.mode == BindMode::Copy || self.tx.needs_wakeup()
    }

    /// Makes the kernel send what TX holds (copy mode sends only when kicked).
    pub fn kick_tx(&self) -> io::Result<()> {
        // SAFETY: sendto(2) with no buffer and no address on our socket.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            // The kernel is busy sending or out of buffers for a moment: the frames stay in
            // the ring and go with the next kick (libxdp ignores the same errnos).
            if matches!(
                e.raw_os_error(),
                Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN)
            ) {
                return Ok(());
            }
            return Err(e);
        }
        Ok(())
    }

    /// Wakes the driver to refill its receive queue when the FILL ring asks for it.
    pub fn wake_rx(&self) {
        if self.fill.needs_wakeup() {
            // SAFETY: recvfrom(2) with no buffer on our socket; only its side effect matters.
            unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                );
            }
        }
    }

    pub fn stats(&self) -> io::Result<XskStats> {
        let s: libc::xdp_statistics = getsockopt(self.fd.as_fd(), libc::XDP_STATISTICS)?;
        Ok(XskStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: s.tx_ring_empty_descs,
        })
    }
}

impl AsFd for Xsk {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
