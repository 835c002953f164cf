//! ETHTOOL_MSG_COALESCE_GET (19): every parameter the driver reports, by its netlink name;
//! ETHTOOL_MSG_COALESCE_SET (20) of one parameter.
use crate::attr;
use std::collections::BTreeMap;

pub const CMD: u8 = 19;
pub const CMD_SET: u8 = 20;

/// (attribute, name, is u8) in ethtool_netlink.h order; names as `ethtool -c` prints them.
const PARAMS: &[(u16, &str, bool)] = &[
    (2, "rx-usecs", false),
    (3, "rx-frames", false),
    (4, "rx-usecs-irq", false),
    (5, "rx-frames-irq", false),
    (6, "tx-usecs", false),
    (7, "tx-frames", false),
    (8, "tx-usecs-irq", false),
    (9, "tx-frames-irq", false),
    (10, "stats-block-usecs", false),
    (11, "adaptive-rx", true),
    (12, "adaptive-tx", true),
    (13, "pkt-rate-low", false),
    (14, "rx-usecs-low", false),
    (15, "rx-frame-low", false),
    (16, "tx-usecs-low", false),
    (17, "tx-frame-low", false),
    (18, "pkt-rate-high", false),
    (19, "rx-usecs-high", false),
    (20, "rx-frame-high", false),
    (21, "tx-usecs-high", false),
    (22, "tx-frame-high", false),
    (23, "sample-interval", false),
    (24, "cqe-mode-tx", true),
    (25, "cqe-mode-rx", true),
];

pub fn set(name: &str, value: u64) -> Result<Vec<u8>, String> {
    let (kind, _, is_u8) = PARAMS
        .iter()
        .find(|(_, n, _)| *n == name)
        .ok_or_else(|| format!("no coalesce parameter {name:?}"))?;
    let mut a = Vec::new();
    if *is_u8 {
        let v = u8::try_from(value)
            .map_err(|_| format!("coalesce {name} {value} does not fit 8 bits"))?;
        attr::put(&mut a, *kind, &[v]);
    } else {
        let v = u32::try_from(value)
            .map_err(|_| format!("coalesce {name} {value} does not fit 32 bits"))?;
        attr::put(&mut a, *kind, &v.to_ne_bytes());
    }
    Ok(a)
}

pub fn parse(buf: &[u8]) -> Result<BTreeMap<String, u64>, String> {
    let a = attr::parse(buf)?;
    let mut out = BTreeMap::new();
    for (k, name, is_u8) in PARAMS {
        let v = attr::find(&a, *k).and_then(|p| {
            if *is_u8 {
                attr::u8_of(p).map(u64::from)
            } else {
                attr::u32_of(p).map(u64::from)
            }
        });
        if let Some(v) = v {
            out.insert((*name).to_string(), v);
        }
    }
    Ok(out)
}
