//! The `netdev` generic netlink family (Documentation/netlink/specs/netdev.yaml), one module
//! per message: what a device's NAPIs, queues and counters are, and NAPI_SET. Numbers are our
//! own named table (include/uapi/linux/netdev.h), as for ethtool.

pub mod dev;
pub mod napi;
pub mod qstats;
pub mod queue;

use crate::socket::NlSocket;
use netsteer_host::netdev::Netdev;

fn each<T>(replies: Vec<Vec<u8>>, f: fn(&[u8]) -> Result<T, String>) -> Result<Vec<T>, String> {
    replies.iter().map(|r| f(r)).collect()
}

/// The device's NAPI instances alone (NAPI_GET dump), by id.
pub fn napis(
    sock: &mut NlSocket,
    family: u16,
    ifindex: u32,
) -> Result<Vec<netsteer_host::netdev::Napi>, String> {
    let replies = sock
        .dump(family, napi::CMD, &napi::dump(ifindex))
        .map_err(|e| format!("napi-get: {e}"))?;
    let mut napis = each(replies, napi::parse)?;
    napis.sort_by_key(|n| n.id);
    Ok(napis)
}

/// Reads everything the family says about one device. The NAPI and queue dumps must work;
/// queue counters and XDP features are optional (drivers without qstats answer EOPNOTSUPP,
/// and kernels before 6.8 lack the command).
pub fn read(sock: &mut NlSocket, family: u16, ifindex: u32) -> Result<Netdev, String> {
    let napis = napis(sock, family, ifindex)?;
    let queues = sock
        .dump(family, queue::CMD, &queue::dump(ifindex))
        .map_err(|e| format!("queue-get: {e}"))?;
    let mut queues = each(queues, queue::parse)?;
    queues.sort_by_key(|q| (q.kind, q.id));
    let qstats = queue_stats(sock, family, ifindex).unwrap_or_default();
    let (xdp_features, xdp_zc_max_segs) = sock
        .request(family, dev::CMD, &dev::get(ifindex))
        .ok()
        .and_then(|r| r.first().and_then(|b| dev::parse(b).ok()))
        .unwrap_or((None, None));
    Ok(Netdev {
        napis,
        queues,
        qstats,
        xdp_features,
        xdp_zc_max_segs,
    })
}

/// The per-queue counters alone (QSTATS_GET, scope queue), sorted; empty when the driver keeps
/// none (EOPNOTSUPP, or an empty dump).
pub fn queue_stats(
    sock: &mut NlSocket,
    family: u16,
    ifindex: u32,
) -> Result<Vec<netsteer_host::netdev::QueueStats>, String> {
    let replies = match sock.dump(family, qstats::CMD, &qstats::dump(ifindex)) {
        Ok(r) => r,
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return Ok(Vec::new()),
        Err(e) => return Err(format!("qstats-get: {e}")),
    };
    let mut q = each(replies, qstats::parse)?;
    q.sort_by_key(|q| (q.kind, q.id));
    Ok(q)
}
