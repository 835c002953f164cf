//! ETHTOOL_MSG_CHANNELS_GET (17) and ETHTOOL_MSG_CHANNELS_SET (18).
use crate::attr;
use netsteer_host::ethtool::Channels;

pub const CMD: u8 = 17;
pub const CMD_SET: u8 = 18;

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

/// The count attribute of one channel kind.
pub fn set(name: &str, count: u64) -> Result<Vec<u8>, String> {
    let kind = match name {
        "rx" => 6,
        "tx" => 7,
        "other" => 8,
        "combined" => 9,
        _ => return Err(format!("no channel count {name:?}")),
    };
    let count = u32::try_from(count).map_err(|_| format!("{count} channels do not fit 32 bits"))?;
    let mut a = Vec::new();
    attr::put(&mut a, kind, &count.to_ne_bytes());
    Ok(a)
}
