//! ETHTOOL_MSG_CHANNELS_GET (17).
use super::attr;
use netsteer_host::ethtool::Channels;

pub const CMD: u8 = 17;

pub fn parse(buf: &[u8]) -> Result<Channels, String> {
    let a = attr::parse(buf)?;
    let g = |k| attr::find(&a, k).and_then(attr::u32_of);
    Ok(Channels {
        rx_max: g(2),
        tx_max: g(3),
        other_max: g(4),
        combined_max: g(5),
        rx: g(6),
        tx: g(7),
        other: g(8),
        combined: g(9),
    })
}
