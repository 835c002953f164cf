//! NETDEV_CMD_NAPI_GET (11, dumped per device) and NETDEV_CMD_NAPI_SET (14).
use crate::attr;
use netsteer_host::netdev::{Napi, NapiAttr};

pub const CMD: u8 = 11;
pub const CMD_SET: u8 = 14;

/// enum NETDEV_A_NAPI_* (include/uapi/linux/netdev.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum A {
    Ifindex = 1,
    Id = 2,
    Irq = 3,
    Pid = 4,
    DeferHardIrqs = 5,
    GroFlushTimeout = 6,
    IrqSuspendTimeout = 7,
    Threaded = 8,
}

/// The dump filter: this device's NAPIs only.
pub fn dump(ifindex: u32) -> Vec<u8> {
    let mut a = Vec::new();
    attr::put(&mut a, A::Ifindex as u16, &ifindex.to_ne_bytes());
    a
}

pub fn parse(buf: &[u8]) -> Result<Napi, String> {
    let a = attr::parse(buf)?;
    let u32_ = |k: A| attr::find(&a, k as u16).and_then(attr::u32_of);
    let uint = |k: A| attr::find(&a, k as u16).and_then(attr::uint_of);
    Ok(Napi {
        id: u32_(A::Id).ok_or("a NAPI without an id")?,
        irq: u32_(A::Irq),
        pid: u32_(A::Pid).filter(|p| *p != 0),
        defer_hard_irqs: u32_(A::DeferHardIrqs),
        gro_flush_timeout_ns: uint(A::GroFlushTimeout),
        irq_suspend_timeout_ns: uint(A::IrqSuspendTimeout),
        threaded: u32_(A::Threaded),
    })
}

/// NAPI_SET's attributes: the id and one setting.
pub fn set(id: u32, what: NapiAttr, v: u64) -> Result<Vec<u8>, String> {
    let mut a = Vec::new();
    attr::put(&mut a, A::Id as u16, &id.to_ne_bytes());
    match what {
        NapiAttr::DeferHardIrqs => {
            let v = u32::try_from(v)
                .ok()
                .filter(|v| *v <= i32::MAX as u32)
                .ok_or_else(|| format!("defer-hard-irqs {v}: 0 to {}", i32::MAX))?;
            attr::put(&mut a, A::DeferHardIrqs as u16, &v.to_ne_bytes());
        }
        NapiAttr::GroFlushTimeout => attr::put_uint(&mut a, A::GroFlushTimeout as u16, v),
        NapiAttr::IrqSuspendTimeout => attr::put_uint(&mut a, A::IrqSuspendTimeout as u16, v),
        NapiAttr::Threaded => {
            // netdev.yaml napi-threaded: disabled, enabled, busy-poll (6.19); an older
            // kernel refuses 2 with EINVAL and names the attribute in its extack.
            if v > 2 {
                return Err(format!("threaded {v}: 0, 1 or 2 (busy-poll)"));
            }
            attr::put(&mut a, A::Threaded as u16, &(v as u32).to_ne_bytes());
        }
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply as netdev_nl_napi_fill_one() builds it (uint timeouts of 4 and 8 bytes), read
    /// back; NAPI_SET's attributes are what the reply would carry for the same values.
    #[test]
    fn a_napi_round_trips() {
        let mut b = Vec::new();
        attr::put(&mut b, A::Id as u16, &257u32.to_ne_bytes());
        attr::put(&mut b, A::Ifindex as u16, &2u32.to_ne_bytes());
        attr::put(&mut b, A::DeferHardIrqs as u16, &2u32.to_ne_bytes());
        attr::put_uint(&mut b, A::GroFlushTimeout as u16, 200_000);
        attr::put_uint(&mut b, A::IrqSuspendTimeout as u16, 1 << 33);
        attr::put(&mut b, A::Pid as u16, &4242u32.to_ne_bytes());
        attr::put(&mut b, A::Threaded as u16, &1u32.to_ne_bytes());
        let n = parse(&b).unwrap();
        assert_eq!(
            n,
            Napi {
                id: 257,
                irq: None,
                pid: Some(4242),
                defer_hard_irqs: Some(2),
                gro_flush_timeout_ns: Some(200_000),
                irq_suspend_timeout_ns: Some(1 << 33),
                threaded: Some(1),
            }
        );
        let s = set(257, NapiAttr::IrqSuspendTimeout, 1 << 33).unwrap();
        let back = parse(&s).unwrap();
        assert_eq!(back.irq_suspend_timeout_ns, Some(1 << 33));
        assert_eq!(back.id, 257);
        assert!(set(1, NapiAttr::Threaded, 2).is_ok(), "busy-poll (6.19)");
        assert!(set(1, NapiAttr::Threaded, 3).is_err());
        assert!(set(1, NapiAttr::DeferHardIrqs, 1 << 31).is_err());
        assert!(parse(&dump(2)).is_err(), "no id");
    }
}
