//! Who serves a port: the sockets bound to it in this network namespace's socket tables
//! (`/proc/net/{tcp,tcp6,udp,udp6}`, Documentation/networking/proc_net_tcp.rst) and the
//! processes holding them (`/proc/PID/fd/N -> socket:[INODE]`). A lane follows its service
//! through these: the service is whoever holds the port, and it is gone when nobody does.

use crate::error::{ParseError, Result};
use crate::fs::HostFs;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The transport of a service's port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Udp,
    Tcp,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        }
    }
}

impl std::fmt::Display for Proto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One line of a socket table: the local port, the state and the socket's inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketEntry {
    pub port: u16,
    /// TCP_* state number (tcp_states.h): 0x0A is LISTEN; an unconnected UDP socket reads
    /// 0x07 (TCP_CLOSE), a connected one 0x01.
    pub state: u8,
    pub inode: u64,
}

/// TCP_LISTEN in include/net/tcp_states.h.
pub const TCP_LISTEN: u8 = 0x0A;

/// Parses one `/proc/net/{tcp,udp}{,6}` table. The header line is skipped; a line that does
/// not parse is an error naming it (the format is the kernel's, fixed since 2.6).
pub fn parse_socket_table(text: &str) -> std::result::Result<Vec<SocketEntry>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let bad = |what: &str| ParseError::new(i + 1, format!("{what}: {line:?}"));
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
        let local = f.get(1).ok_or_else(|| bad("no local address"))?;
        let port = local
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            .ok_or_else(|| bad("local address without a hex port"))?;
        let state = f
            .get(3)
            .and_then(|s| u8::from_str_radix(s, 16).ok())
            .ok_or_else(|| bad("no hex state"))?;
        let inode = f
            .get(9)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("no inode"))?;
        out.push(SocketEntry { port, state, inode });
    }
    Ok(out)
}

/// The inodes of the sockets serving `port`: TCP sockets listening on it, UDP sockets bound
/// to it (connected or not). IPv4 and IPv6 tables both; an absent IPv6 table (IPv6 disabled)
/// is no socket, any other unreadable table is an error (unknown is not "nobody listens").
pub fn serving(fs: &HostFs, proto: Proto, port: u16) -> Result<BTreeSet<u64>> {
    let mut out = BTreeSet::new();
    for v6 in [false, true] {
        let path = format!("/proc/net/{}{}", proto.name(), if v6 { "6" } else { "" });
        let entries = match fs.read_parsed(&path, parse_socket_table) {
            Ok(e) => e,
            Err(e) if v6 && e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        out.extend(
            entries
                .iter()
                .filter(|e| e.port == port && e.inode != 0)
                .filter(|e| proto == Proto::Udp || e.state == TCP_LISTEN)
                .map(|e| e.inode),
        );
    }
    Ok(out)
}

/// One line of a socket table with what names its owner: the uid the kernel prints for it
/// (the credentials of whoever created the socket, `sock_i_uid`, as this reader's user
/// namespace maps them) and the local address it is bound to (its family is the table's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SocketRow {
    pub port: u16,
    /// TCP_* state number, as [`SocketEntry::state`].
    pub state: u8,
    pub inode: u64,
    pub uid: u32,
    /// The local address; an IPv6 table's is always [`std::net::IpAddr::V6`] (a v4-mapped
    /// address stays v6: it is another socket than a v4 one).
    pub local: std::net::IpAddr,
}

/// A table's hex address (`0100007F`, or 32 digits for IPv6) as the kernel prints it: each
/// 32-bit word of the address in memory order, printed as a number of this host's byte order.
fn parse_hex_addr(hex: &str) -> Option<std::net::IpAddr> {
    let word = |i: usize| {
        hex.get(i * 8..i * 8 + 8)
            .and_then(|w| u32::from_str_radix(w, 16).ok())
            .map(u32::to_ne_bytes)
    };
    match hex.len() {
        8 => Some(std::net::Ipv4Addr::from(word(0)?).into()),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            Some(std::net::Ipv6Addr::from(b).into())
        }
        _ => None,
    }
}

/// Parses one `/proc/net/{tcp,udp}{,6}` table with each socket's uid and local address (see
/// [`parse_socket_table`]).
pub fn parse_socket_rows(text: &str) -> std::result::Result<Vec<SocketRow>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let bad = |what: &str| ParseError::new(i + 1, format!("{what}: {line:?}"));
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
        let (addr, port) = f
            .get(1)
            .and_then(|l| l.rsplit_once(':'))
            .ok_or_else(|| bad("no local address"))?;
        let port = u16::from_str_radix(port, 16).map_err(|_| bad("no hex local port"))?;
        let local = parse_hex_addr(addr).ok_or_else(|| bad("no hex local address"))?;
        let state = f
            .get(3)
            .and_then(|s| u8::from_str_radix(s, 16).ok())
            .ok_or_else(|| bad("no hex state"))?;
        let uid = f
            .get(7)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("no uid"))?;
        let inode = f
            .get(9)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("no inode"))?;
        out.push(SocketRow {
            port,
            state,
            inode,
            uid,
            local,
        });
    }
    Ok(out)
}

/// The sockets serving `port` (as [`serving`]) with their uids and local addresses, IPv4's
/// table first.
pub fn serving_rows(fs: &HostFs, proto: Proto, port: u16) -> Result<Vec<SocketRow>> {
    let mut out = Vec::new();
    for v6 in [false, true] {
        let path = format!("/proc/net/{}{}", proto.name(), if v6 { "6" } else { "" });
        let rows = match fs.read_parsed(&path, parse_socket_rows) {
            Ok(e) => e,
            Err(e) if v6 && e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        out.extend(
            rows.into_iter()
                .filter(|e| e.port == port && e.inode != 0)
                .filter(|e| proto == Proto::Udp || e.state == TCP_LISTEN),
        );
    }
    Ok(out)
}

/// What a search for sockets' owners found, and what it cost: the processes and descriptors
/// it read (so a caller can bound it, and a test can count it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnerScan {
    /// The processes holding one of the sockets, in pid order.
    pub pids: Vec<u32>,
    /// Processes whose descriptor table was read.
    pub processes: usize,
    /// Descriptors read (one `readlink` each).
    pub descriptors: usize,
}

impl OwnerScan {
    fn add(&mut self, other: OwnerScan) {
        self.pids.extend(other.pids);
        self.pids.sort_unstable();
        self.pids.dedup();
        self.processes += other.processes;
        self.descriptors += other.descriptors;
    }
}

/// The processes among `candidates` holding any of `inodes` open; only the candidates'
/// descriptors are read. Processes that exit while being read are skipped; fds are read as
/// links, never opened.
pub fn socket_owners_among(
    fs: &HostFs,
    inodes: &BTreeSet<u64>,
    candidates: impl IntoIterator<Item = u32>,
) -> OwnerScan {
    let mut out = OwnerScan::default();
    if inodes.is_empty() {
        return out;
    }
    let scan = fs.unrecorded();
    let want: BTreeSet<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    let mut pids: Vec<u32> = candidates.into_iter().collect();
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        let Ok(fds) = scan.read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        out.processes += 1;
        let mut holds = false;
        for fd in &fds {
            out.descriptors += 1;
            if scan
                .read_link(format!("/proc/{pid}/fd/{fd}"))
                .is_ok_and(|t| want.contains(t.to_string_lossy().as_ref()))
            {
                holds = true;
                break;
            }
        }
        if holds {
            out.pids.push(pid);
        }
    }
    out
}

/// Every process's parent and uids (`/proc/PID/status`: one small file a process, no
/// descriptor read), in pid order; processes that exit while being read are skipped.
pub fn process_ids(fs: &HostFs) -> Result<Vec<(u32, crate::process::StatusIds)>> {
    let scan = fs.unrecorded();
    let mut pids: Vec<u32> = scan
        .read_dir("/proc")?
        .iter()
        .filter_map(|e| e.parse().ok())
        .collect();
    pids.sort_unstable();
    Ok(pids
        .into_iter()
        .filter_map(|pid| {
            scan.read_parsed(
                format!("/proc/{pid}/status"),
                crate::process::parse_status_ids,
            )
            .ok()
            .map(|ids| (pid, ids))
        })
        .collect())
}

/// The holders of `inodes`, sockets the table gives to `uid`, searched among the candidates
/// that can hold them: the processes with `uid` as their real, effective, saved or file-system
/// uid, then the children of each holder found (a server that binds as root and forks its
/// workers under another uid hands them its sockets), never every process's descriptors. The
/// children of PID 1 are not searched: init holding the socket is socket activation, and its
/// children are every service of the host (a unit names such a service).
pub fn socket_owners_of_uid(fs: &HostFs, inodes: &BTreeSet<u64>, uid: u32) -> Result<OwnerScan> {
    let mut out = OwnerScan::default();
    if inodes.is_empty() {
        return Ok(out);
    }
    let all = process_ids(fs)?;
    let mut scanned: BTreeSet<u32> = all
        .iter()
        .filter(|(_, ids)| ids.uids.contains(&uid))
        .map(|(pid, _)| *pid)
        .collect();
    out.add(socket_owners_among(fs, inodes, scanned.iter().copied()));
    let mut parents: BTreeSet<u32> = out.pids.iter().copied().filter(|p| *p != 1).collect();
    while !parents.is_empty() {
        let children: Vec<u32> = all
            .iter()
            .filter(|(pid, ids)| parents.contains(&ids.ppid) && !scanned.contains(pid))
            .map(|(pid, _)| *pid)
            .collect();
        scanned.extend(children.iter().copied());
        let found = socket_owners_among(fs, inodes, children);
        parents = found.pids.iter().copied().collect();
        out.add(found);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as a 6.12 kernel prints them (udp: unconnected 07; tcp: a listener and an
    /// established connection on the same port).
    #[test]
    fn tables_parse_and_listeners_are_told_from_connections() {
        let udp = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                   \x20 123: 00000000:10E1 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 40417 2 0000000000000000 0\n";
        let e = parse_socket_table(udp).unwrap();
        assert_eq!(
            e,
            vec![SocketEntry {
                port: 4321,
                state: 7,
                inode: 40417
            }]
        );
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
                   \x20  0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1 0000000000000000 100 0 0 10 0\n\
                   \x20  1: 0100007F:1F90 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 556 1 0000000000000000 20 4 30 10 -1\n";
        let e = parse_socket_table(tcp).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].port, e[0].state, e[0].inode), (8080, TCP_LISTEN, 555));
        assert_eq!(e[1].state, 1);
        let err = parse_socket_table("header\n  0: nonsense\n").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
    }

    /// The uid column and the local address, v4 and v6 (`[::]` and `127.0.0.2`, the issue's
    /// two strangers), as a little-endian 6.18 prints them.
    #[test]
    fn rows_carry_the_uid_and_the_local_address() {
        let head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n";
        let v4 = format!(
            "{head} 1: 00000000:10E1 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 27963 2 0000000000000000 0\n\
             \x20 2: 0200007F:10E1 00000000:0000 07 00000000:00000000 00:00000000 00000000 65534        0 27999 2 0000000000000000 0\n"
        );
        let rows = parse_socket_rows(&v4).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].uid, rows[0].port, rows[0].inode), (0, 4321, 27963));
        assert_eq!(rows[0].local.to_string(), "0.0.0.0");
        if cfg!(target_endian = "little") {
            assert_eq!(rows[1].local.to_string(), "127.0.0.2");
        }
        assert_eq!(rows[1].uid, 65534);
        let v6 = format!(
            "{head} 5: 00000000000000000000000000000000:10E1 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000 65534        0 28001 2 0000000000000000 0\n\
             \x20 6: 0000000000000000FFFF00000100007F:10E1 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000 0        0 28002 2 0000000000000000 0\n"
        );
        let rows = parse_socket_rows(&v6).unwrap();
        assert_eq!(rows[0].local.to_string(), "::");
        assert_eq!(rows[0].uid, 65534);
        if cfg!(target_endian = "little") {
            assert_eq!(rows[1].local.to_string(), "::ffff:127.0.0.1");
        }
        assert!(parse_socket_rows(&format!("{head} 1: 0000:10E1 x 07 a b c 0 0 1\n")).is_err());
        assert!(parse_socket_rows(&format!("{head} 1: 00000000:10E1 x 07 a b c u 0 1\n")).is_err());
    }
}
