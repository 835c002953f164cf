//! ETHTOOL_MSG_PAUSE_GET (21) and ETHTOOL_MSG_PAUSE_SET (22).
use crate::attr;
use netsteer_host::ethtool::Pause;

pub const CMD: u8 = 21;
pub const CMD_SET: u8 = 22;

pub fn parse(buf: &[u8]) -> Result<Pause, String> {
    let a = attr::parse(buf)?;
    let g = |k| attr::find(&a, k).and_then(attr::u8_of).map(|v| v != 0);
    Ok(Pause {
        autoneg: g(2),
        rx: g(3),
        tx: g(4),
    })
}

pub fn set(name: &str, on: bool) -> Result<Vec<u8>, String> {
    let kind = match name {
        "autoneg" => 2,
        "rx" => 3,
        "tx" => 4,
        _ => return Err(format!("no pause parameter {name:?}")),
    };
    let mut a = Vec::new();
    attr::put(&mut a, kind, &[u8::from(on)]);
    Ok(a)
}
