//! ETHTOOL_MSG_RINGS_GET (15).
use super::attr;
use netsteer_host::ethtool::Rings;

pub const CMD: u8 = 15;

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
