//! ETHTOOL_MSG_RSS_GET (38, Linux 6.2+): hash function, indirection table, key; and
//! ETHTOOL_MSG_RSS_SET (48, Linux 6.16+) of the indirection table. Older kernels answer the SET
//! with EOPNOTSUPP, which tune reports as a skip.
use crate::attr;
use netsteer_host::ethtool::Rss;

pub const CMD: u8 = 38;
pub const CMD_SET: u8 = 48;
const A_HFUNC: u16 = 3;
const A_INDIR: u16 = 4;
const A_HKEY: u16 = 5;

pub fn parse(buf: &[u8]) -> Result<Rss, String> {
    let a = attr::parse(buf)?;
    let hfunc = attr::find(&a, A_HFUNC)
        .and_then(attr::u32_of)
        .and_then(super::hfunc_name);
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

/// The INDIR attribute: the table as native-endian u32s, one per hash bucket.
pub fn set(table: &[u32]) -> Vec<u8> {
    let bytes: Vec<u8> = table.iter().flat_map(|q| q.to_ne_bytes()).collect();
    let mut a = Vec::new();
    attr::put(&mut a, A_INDIR, &bytes);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_table_reads_back() {
        let set = set(&[1, 2, 3, 1]);
        let rss = parse(&set).unwrap();
        assert_eq!(rss.indirection, [1, 2, 3, 1]);
    }

    /// The reset to the default table: the INDIR attribute present and empty (a missing one
    /// would leave the table alone).
    #[test]
    fn an_empty_table_is_an_empty_attribute() {
        let set = set(&[]);
        let a = attr::parse(&set).unwrap();
        assert_eq!(attr::find(&a, A_INDIR), Some(&[][..]));
    }
}
