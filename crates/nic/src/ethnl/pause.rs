//! ETHTOOL_MSG_PAUSE_GET (21).
use super::attr;
use netsteer_host::ethtool::Pause;

pub const CMD: u8 = 21;

pub fn parse(buf: &[u8]) -> Result<Pause, String> {
    let a = attr::parse(buf)?;
    let g = |k| attr::find(&a, k).and_then(attr::u8_of).map(|v| v != 0);
    Ok(Pause {
        autoneg: g(2),
        rx: g(3),
        tx: g(4),
    })
}
