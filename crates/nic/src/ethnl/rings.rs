//! ETHTOOL_MSG_RINGS_GET (15) and ETHTOOL_MSG_RINGS_SET (16).
use crate::attr;
use netsteer_host::ethtool::{DataSplit, RING_DATA_SPLIT, RING_HDS_THRESH, Rings};

pub const CMD: u8 = 15;
pub const CMD_SET: u8 = 16;

pub fn parse(buf: &[u8]) -> Result<Rings, String> {
    let a = attr::parse(buf)?;
    let g = |k| attr::find(&a, k).and_then(attr::u32_of);
    Ok(Rings {
        rx_max: g(2),
        tx_max: g(5),
        rx: g(6),
        rx_mini: g(7),
        rx_jumbo: g(8),
        tx: g(9),
        rx_buf_len: g(A_RX_BUF_LEN),
        tcp_data_split: attr::find(&a, A_TCP_DATA_SPLIT)
            .and_then(attr::u8_of)
            .map(DataSplit::from_u8),
        hds_thresh: g(A_HDS_THRESH),
        hds_thresh_max: g(A_HDS_THRESH_MAX),
    })
}

/// ETHTOOL_A_RINGS_RX_BUF_LEN, _TCP_DATA_SPLIT (u8), _HDS_THRESH and _HDS_THRESH_MAX
/// (include/uapi/linux/ethtool_netlink_generated.h).
const A_RX_BUF_LEN: u16 = 10;
const A_TCP_DATA_SPLIT: u16 = 11;
const A_HDS_THRESH: u16 = 17;
const A_HDS_THRESH_MAX: u16 = 18;

/// The body of a RINGS_SET that changes one parameter: a ring size, header split on (1) or
/// off (0), or the split threshold in bytes. The kernel refuses the last two with EOPNOTSUPP
/// for a driver without ETHTOOL_RING_USE_TCP_DATA_SPLIT / _HDS_THRS, and a threshold above
/// the device's maximum with EINVAL (net/ethtool/rings.c, ethnl_set_rings_validate).
pub fn set(name: &str, value: u64) -> Result<Vec<u8>, String> {
    let mut a = Vec::new();
    if name == RING_DATA_SPLIT {
        let v = match value {
            0 => DATA_SPLIT_DISABLED,
            1 => DATA_SPLIT_ENABLED,
            _ => return Err(format!("tcp-data-split {value} is not 0 (off) or 1 (on)")),
        };
        attr::put(&mut a, A_TCP_DATA_SPLIT, &[v]);
        return Ok(a);
    }
    let kind = match name {
        "rx" => 6,
        "tx" => 9,
        RING_HDS_THRESH => A_HDS_THRESH,
        _ => return Err(format!("no ring parameter {name:?}")),
    };
    let v = u32::try_from(value).map_err(|_| format!("{name} {value} does not fit 32 bits"))?;
    attr::put(&mut a, kind, &v.to_ne_bytes());
    Ok(a)
}

/// ETHTOOL_TCP_DATA_SPLIT_DISABLED and _ENABLED (include/uapi/linux/ethtool.h). Setting
/// _UNKNOWN (0) asks for the driver's default, which would not read back as what was set.
const DATA_SPLIT_DISABLED: u8 = 1;
const DATA_SPLIT_ENABLED: u8 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_with_header_split_round_trip() {
        let mut b = Vec::new();
        attr::put(&mut b, 2, &4096u32.to_ne_bytes());
        attr::put(&mut b, 6, &1024u32.to_ne_bytes());
        attr::put(&mut b, A_RX_BUF_LEN, &4096u32.to_ne_bytes());
        attr::put(&mut b, A_TCP_DATA_SPLIT, &[2]);
        attr::put(&mut b, A_HDS_THRESH, &0u32.to_ne_bytes());
        attr::put(&mut b, A_HDS_THRESH_MAX, &1024u32.to_ne_bytes());
        let r = parse(&b).unwrap();
        assert_eq!(
            (r.rx, r.rx_max, r.rx_buf_len),
            (Some(1024), Some(4096), Some(4096))
        );
        assert_eq!(r.tcp_data_split, Some(DataSplit::Enabled));
        assert_eq!((r.hds_thresh, r.hds_thresh_max), (Some(0), Some(1024)));
        // A driver that reports nothing about splitting: absent, not "off".
        let mut plain = Vec::new();
        attr::put(&mut plain, 6, &256u32.to_ne_bytes());
        let r = parse(&plain).unwrap();
        assert_eq!((r.tcp_data_split, r.hds_thresh), (None, None));
        let mut off = Vec::new();
        attr::put(&mut off, A_TCP_DATA_SPLIT, &[1]);
        assert_eq!(
            parse(&off).unwrap().tcp_data_split,
            Some(DataSplit::Disabled)
        );
    }

    #[test]
    fn a_set_reads_back_as_the_value_it_sets() {
        for (on, want) in [(1, DataSplit::Enabled), (0, DataSplit::Disabled)] {
            let r = parse(&set(RING_DATA_SPLIT, on).unwrap()).unwrap();
            assert_eq!((r.tcp_data_split, r.rx), (Some(want), None));
        }
        let r = parse(&set(RING_HDS_THRESH, 256).unwrap()).unwrap();
        assert_eq!((r.hds_thresh, r.tcp_data_split), (Some(256), None));
        assert_eq!(parse(&set("rx", 512).unwrap()).unwrap().rx, Some(512));
        assert_eq!(parse(&set("tx", 64).unwrap()).unwrap().tx, Some(64));
        // The bytes themselves, against the uapi numbers (not this file's constants):
        // attribute 11 holding ENABLED (2) or DISABLED (1), attribute 17 a u32.
        let raw = |kind: u16, payload: &[u8]| {
            let mut b = ((4 + payload.len()) as u16).to_ne_bytes().to_vec();
            b.extend_from_slice(&kind.to_ne_bytes());
            b.extend_from_slice(payload);
            b.resize(b.len().div_ceil(4) * 4, 0);
            b
        };
        assert_eq!(set(RING_DATA_SPLIT, 1).unwrap(), raw(11, &[2]));
        assert_eq!(set(RING_DATA_SPLIT, 0).unwrap(), raw(11, &[1]));
        assert_eq!(
            set(RING_HDS_THRESH, 256).unwrap(),
            raw(17, &256u32.to_ne_bytes())
        );
        // Never "auto" (0) by accident, never a size cut to 32 bits.
        assert!(
            set(RING_DATA_SPLIT, 2)
                .unwrap_err()
                .contains("not 0 (off) or 1 (on)")
        );
        assert!(set(RING_HDS_THRESH, 1 << 32).is_err());
        assert!(
            set("rx-jumbo", 1)
                .unwrap_err()
                .contains("no ring parameter")
        );
    }
}
