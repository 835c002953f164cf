//! NETDEV_CMD_QSTATS_GET (12), dumped per device with scope "queue": per-queue counters where
//! the driver keeps them (virtio_net, mlx5, ...; veth keeps none).
use super::queue::queue_type;
use crate::attr;
use netsteer_host::netdev::{QueueStats, QueueType};

pub const CMD: u8 = 12;

/// enum NETDEV_A_QSTATS_* (counters are `uint`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum A {
    Ifindex = 1,
    QueueType = 2,
    QueueId = 3,
    Scope = 4,
    RxPackets = 8,
    RxBytes = 9,
    TxPackets = 10,
    TxBytes = 11,
    RxAllocFail = 12,
    RxHwDrops = 13,
    TxHwDrops = 24,
}

/// NETDEV_QSTATS_SCOPE_QUEUE: one message per queue instead of the device's sum.
const SCOPE_QUEUE: u32 = 1;

pub fn dump(ifindex: u32) -> Vec<u8> {
    let mut a = Vec::new();
    attr::put(&mut a, A::Ifindex as u16, &ifindex.to_ne_bytes());
    attr::put(&mut a, A::Scope as u16, &SCOPE_QUEUE.to_ne_bytes());
    a
}

pub fn parse(buf: &[u8]) -> Result<QueueStats, String> {
    let a = attr::parse(buf)?;
    let uint = |k: A| attr::find(&a, k as u16).and_then(attr::uint_of);
    let kind = queue_type(
        attr::find(&a, A::QueueType as u16)
            .and_then(attr::u32_of)
            .ok_or("queue stats without a queue type")?,
    )?;
    let id = attr::find(&a, A::QueueId as u16)
        .and_then(attr::u32_of)
        .ok_or("queue stats without a queue id")?;
    let sum = |x: Option<u64>, y: Option<u64>| match (x, y) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0) + y.unwrap_or(0)),
    };
    Ok(match kind {
        QueueType::Rx => QueueStats {
            kind,
            id,
            packets: uint(A::RxPackets),
            bytes: uint(A::RxBytes),
            drops: sum(uint(A::RxAllocFail), uint(A::RxHwDrops)),
        },
        QueueType::Tx => QueueStats {
            kind,
            id,
            packets: uint(A::TxPackets),
            bytes: uint(A::TxBytes),
            drops: uint(A::TxHwDrops),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_counters_round_trip() {
        let mut b = Vec::new();
        attr::put(&mut b, A::Ifindex as u16, &2u32.to_ne_bytes());
        attr::put(&mut b, A::QueueType as u16, &0u32.to_ne_bytes());
        attr::put(&mut b, A::QueueId as u16, &1u32.to_ne_bytes());
        attr::put_uint(&mut b, A::RxPackets as u16, 10);
        attr::put_uint(&mut b, A::RxBytes as u16, 5 << 32);
        attr::put_uint(&mut b, A::RxAllocFail as u16, 3);
        let s = parse(&b).unwrap();
        assert_eq!(
            s,
            QueueStats {
                kind: QueueType::Rx,
                id: 1,
                packets: Some(10),
                bytes: Some(5 << 32),
                drops: Some(3)
            }
        );
        let mut tx = Vec::new();
        attr::put(&mut tx, A::QueueType as u16, &1u32.to_ne_bytes());
        attr::put(&mut tx, A::QueueId as u16, &0u32.to_ne_bytes());
        attr::put_uint(&mut tx, A::TxPackets as u16, 4);
        let s = parse(&tx).unwrap();
        assert_eq!((s.packets, s.bytes, s.drops), (Some(4), None, None));
        assert!(parse(&dump(2)).is_err(), "no queue type");
    }
}
