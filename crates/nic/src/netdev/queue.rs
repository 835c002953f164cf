//! NETDEV_CMD_QUEUE_GET (10), dumped per device: each queue and the NAPI serving it.
use crate::attr;
use netsteer_host::netdev::{Queue, QueueType};

pub const CMD: u8 = 10;

/// enum NETDEV_A_QUEUE_*.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum A {
    Id = 1,
    Ifindex = 2,
    Type = 3,
    NapiId = 4,
    Dmabuf = 5,
    IoUring = 6,
    Xsk = 7,
}

pub fn dump(ifindex: u32) -> Vec<u8> {
    let mut a = Vec::new();
    attr::put(&mut a, A::Ifindex as u16, &ifindex.to_ne_bytes());
    a
}

/// NETDEV_QUEUE_TYPE_RX 0, _TX 1.
pub fn queue_type(v: u32) -> Result<QueueType, String> {
    match v {
        0 => Ok(QueueType::Rx),
        1 => Ok(QueueType::Tx),
        _ => Err(format!("queue type {v}")),
    }
}

pub fn parse(buf: &[u8]) -> Result<Queue, String> {
    let a = attr::parse(buf)?;
    let g = |k: A| attr::find(&a, k as u16).and_then(attr::u32_of);
    Ok(Queue {
        id: g(A::Id).ok_or("a queue without an id")?,
        kind: queue_type(g(A::Type).ok_or("a queue without a type")?)?,
        napi_id: g(A::NapiId),
        // A nest, present only while an AF_XDP socket is bound.
        xsk: attr::find(&a, A::Xsk as u16).is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_round_trips() {
        let mut b = Vec::new();
        attr::put(&mut b, A::Id as u16, &3u32.to_ne_bytes());
        attr::put(&mut b, A::Ifindex as u16, &2u32.to_ne_bytes());
        attr::put(&mut b, A::Type as u16, &0u32.to_ne_bytes());
        attr::put(&mut b, A::NapiId as u16, &260u32.to_ne_bytes());
        attr::put(&mut b, A::Xsk as u16 | attr::NLA_F_NESTED, &[]);
        let q = parse(&b).unwrap();
        assert_eq!(
            q,
            Queue {
                id: 3,
                kind: QueueType::Rx,
                napi_id: Some(260),
                xsk: true
            }
        );
        let mut tx = Vec::new();
        attr::put(&mut tx, A::Id as u16, &0u32.to_ne_bytes());
        attr::put(&mut tx, A::Type as u16, &1u32.to_ne_bytes());
        let q = parse(&tx).unwrap();
        assert_eq!((q.kind, q.napi_id, q.xsk), (QueueType::Tx, None, false));
        let mut bad = Vec::new();
        attr::put(&mut bad, A::Id as u16, &0u32.to_ne_bytes());
        attr::put(&mut bad, A::Type as u16, &7u32.to_ne_bytes());
        assert!(parse(&bad).is_err());
        assert!(parse(&dump(2)).is_err());
    }
}
