//! The bpf(2) commands the AF_XDP path needs: an XSKMAP, the program, and a BPF link that
//! attaches it to an interface and detaches it when its last fd closes (so a killed process
//! leaves nothing attached, unlike an attach through rtnetlink, which outlives it).
//!
//! `union bpf_attr` is declared per command with the fields used, in the kernel's order
//! (include/uapi/linux/bpf.h); the kernel reads `size` bytes and zero-fills the rest.

use super::insn::{self, Insn};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_LINK_CREATE: libc::c_int = 28;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type` BPF_XDP.
const BPF_XDP: u32 = 37;

/// XDP attach flags (include/uapi/linux/if_link.h).
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

#[repr(C)]
#[derive(Default)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct MapElem {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

fn name16(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    // The kernel takes [A-Za-z0-9_.] and a terminating NUL within 16 bytes.
    for (o, b) in out.iter_mut().zip(name.bytes().take(15)) {
        *o = b;
    }
    out
}

/// bpf(cmd, attr): a new fd, or the errno.
fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, initialized #[repr(C)] prefix of `union bpf_attr` for `cmd`
    // (declared above in the kernel's field order), and its exact size is passed, so the
    // kernel reads no byte past it; pointers inside it point to buffers the caller keeps
    // alive for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: the kernel just returned this fd from a successful bpf(2) call that creates
    // one; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) }
}

/// An XSKMAP with `entries` slots (one per rx queue id it may hold).
pub fn xskmap(entries: u32) -> io::Result<OwnedFd> {
    let mut a = MapCreate {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries,
        map_name: name16("netsteer_xsks"),
        ..Default::default()
    };
    bpf(BPF_MAP_CREATE, &mut a).map(owned)
}

/// `map[key] = value` (an XSKMAP's value is an AF_XDP socket's fd).
pub fn map_update(map: BorrowedFd<'_>, key: u32, value: u32) -> io::Result<()> {
    let (key, value) = (key, value);
    let mut a = MapElem {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        ..Default::default()
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
}

/// Loads an XDP program. On a verifier rejection the error carries the verifier's log.
pub fn load_xdp(prog: &[Insn]) -> io::Result<OwnedFd> {
    let bytes = insn::to_bytes(prog);
    let license = CString::new("GPL").expect("no NUL");
    let mut log = vec![0u8; 64 * 1024];
    let attempt = |log_level: u32, log: &mut Vec<u8>| {
        let mut a = ProgLoad {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: prog.len() as u32,
            insns: bytes.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level,
            log_size: if log_level > 0 { log.len() as u32 } else { 0 },
            log_buf: if log_level > 0 {
                log.as_mut_ptr() as u64
            } else {
                0
            },
            prog_name: name16("netsteer_xsk"),
            expected_attach_type: BPF_XDP,
            ..Default::default()
        };
        bpf(BPF_PROG_LOAD, &mut a).map(owned)
    };
    match attempt(0, &mut log) {
        Ok(fd) => Ok(fd),
        Err(e)
            if e.raw_os_error() == Some(libc::EACCES) || e.raw_os_error() == Some(libc::EINVAL) =>
        {
            // Again with the verifier's log, to say why.
            let again = attempt(1, &mut log);
            let text = String::from_utf8_lossy(&log);
            let text = text.trim_end_matches('\0').trim();
            match again {
                Ok(fd) => Ok(fd),
                Err(e2) => Err(io::Error::new(
                    e2.kind(),
                    format!(
                        "{e2}; verifier: {}",
                        if text.is_empty() { "(no log)" } else { text }
                    ),
                )),
            }
        }
        Err(e) => Err(e),
    }
}

/// Attaches `prog` to interface `ifindex` through a BPF link (`flags`: SKB or DRV mode). The
/// program stays attached exactly as long as the returned fd is open.
pub fn link_xdp(prog: BorrowedFd<'_>, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut a = LinkCreate {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags,
    };
    bpf(BPF_LINK_CREATE, &mut a).map(owned)
}
