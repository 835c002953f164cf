//! ETHTOOL_MSG_RINGS_GET (15) and ETHTOOL_MSG_RINGS_SET (16).
use crate::attr;
use netsteer_host::ethtool::Rings;

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
    })
}

pub fn set(name: &str, size: u64) -> Result<Vec<u8>, String> {
    let kind = match name {
        "rx" => 6,
        "tx" => 9,
        _ => return Err(format!("no ring parameter {name:?}")),
    };
    let size = u32::try_from(size).map_err(|_| format!("ring size {size} does not fit 32 bits"))?;
    let mut a = Vec::new();
    attr::put(&mut a, kind, &size.to_ne_bytes());
    Ok(a)
}
