//! ETHTOOL_MSG_RSS_GET (38, Linux 6.2+): hash function, indirection table, key.
use super::attr;
use netsteer_host::ethtool::Rss;

pub const CMD: u8 = 38;
const A_HFUNC: u16 = 3;
const A_INDIR: u16 = 4;
const A_HKEY: u16 = 5;

pub fn parse(buf: &[u8]) -> Result<Rss, String> {
    let a = attr::parse(buf)?;
    // hfunc is a bitmask of ETH_RSS_HASH_* (ethtool.h): bit 0 toeplitz, 1 xor, 2 crc32.
    let hfunc = attr::find(&a, A_HFUNC).and_then(attr::u32_of).map(|h| {
        match h {
            1 => "toeplitz",
            2 => "xor",
            4 => "crc32",
            _ => "unknown",
        }
        .to_string()
    });
    let indirection = attr::find(&a, A_INDIR)
        .map(|p| p.chunks_exact(4).filter_map(attr::u32_of).collect())
        .unwrap_or_default();
    let key = attr::find(&a, A_HKEY).map(|k| k.iter().map(|b| format!("{b:02x}")).collect());
    Ok(Rss {
        hfunc,
        indirection,
        key,
    })
}
