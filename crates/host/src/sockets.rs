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

/// The processes holding any of `inodes` open, in pid order. Processes that exit while being
/// read are skipped; fds are read as links, never opened.
pub fn socket_owners(fs: &HostFs, inodes: &BTreeSet<u64>) -> Result<Vec<u32>> {
    if inodes.is_empty() {
        return Ok(Vec::new());
    }
    let scan = fs.unrecorded();
    let want: BTreeSet<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    let mut pids: Vec<u32> = scan
        .read_dir("/proc")?
        .iter()
        .filter_map(|e| e.parse().ok())
        .collect();
    pids.sort_unstable();
    let mut out = Vec::new();
    for pid in pids {
        let Ok(fds) = scan.read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let holds = fds.iter().any(|fd| {
            scan.read_link(format!("/proc/{pid}/fd/{fd}"))
                .is_ok_and(|t| want.contains(t.to_string_lossy().as_ref()))
        });
        if holds {
            out.push(pid);
        }
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
}
