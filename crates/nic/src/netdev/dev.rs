//! NETDEV_CMD_DEV_GET (1): the device's XDP features.
use crate::attr;

pub const CMD: u8 = 1;

/// enum NETDEV_A_DEV_*.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum A {
    Ifindex = 1,
    XdpFeatures = 3,
    XdpZcMaxSegs = 4,
    XdpRxMetadataFeatures = 5,
    XskFeatures = 6,
}

pub fn get(ifindex: u32) -> Vec<u8> {
    let mut a = Vec::new();
    attr::put(&mut a, A::Ifindex as u16, &ifindex.to_ne_bytes());
    a
}

/// (xdp-features, xdp-zc-max-segs).
pub fn parse(buf: &[u8]) -> Result<(Option<u64>, Option<u32>), String> {
    let a = attr::parse(buf)?;
    Ok((
        attr::find(&a, A::XdpFeatures as u16).and_then(attr::uint_of),
        attr::find(&a, A::XdpZcMaxSegs as u16).and_then(attr::u32_of),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdp_features_round_trip() {
        let mut b = get(2);
        attr::put_uint(&mut b, A::XdpFeatures as u16, 0b1011);
        attr::put(&mut b, A::XdpZcMaxSegs as u16, &1u32.to_ne_bytes());
        assert_eq!(parse(&b).unwrap(), (Some(0b1011), Some(1)));
        assert_eq!(parse(&get(2)).unwrap(), (None, None));
    }
}
