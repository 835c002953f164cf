//! RSS through the SIOCETHTOOL ioctl, for kernels whose ethtool netlink lacks the messages:
//! ETHTOOL_GRSSH (table, key and hash function; Linux 3.16+) where ETHTOOL_MSG_RSS_GET (6.2) is
//! missing, ETHTOOL_SRXFHINDIR (the table alone, as `ethtool -X` sends it) where
//! ETHTOOL_MSG_RSS_SET is missing; and the fields each flow type hashes on
//! (ETHTOOL_GRXFH/SRXFH, `ethtool -n/-N rx-flow-hash`), which netlink does not carry on the
//! kernels users run. Layouts from include/uapi/linux/ethtool.h, encoded and decoded by hand as
//! pure functions with round-trip tests.

use crate::ioctl::ethtool;
use netsteer_host::ethtool::Rss;
use std::io;

const ETHTOOL_GRXFH: u32 = 0x29;
const ETHTOOL_SRXFH: u32 = 0x2a;
const ETHTOOL_SRXFHINDIR: u32 = 0x39;
const ETHTOOL_GRSSH: u32 = 0x46;

/// struct ethtool_rxfh: cmd, rss_context, indir_size, key_size, hfunc (u8), input_xfrm (u8),
/// two reserved bytes, a reserved u32, then the table (u32s) and the key (bytes).
const RXFH_HEADER: usize = 24;
/// The kernel caps ETH_RXFH_INDIR and key sizes far below these; a larger answer is not trusted.
const MAX_INDIR: u32 = 1 << 16;
const MAX_KEY: u32 = 1 << 10;

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The GRSSH request: the sizes, and room for what they describe (zero sizes ask for them).
pub fn encode_get(indir_size: u32, key_size: u32) -> Vec<u8> {
    let mut b = vec![0u8; RXFH_HEADER + 4 * indir_size as usize + key_size as usize];
    b[0..4].copy_from_slice(&ETHTOOL_GRSSH.to_ne_bytes());
    b[8..12].copy_from_slice(&indir_size.to_ne_bytes());
    b[12..16].copy_from_slice(&key_size.to_ne_bytes());
    b
}

/// (indirection size, key size) of a GRSSH answer.
pub fn decode_sizes(b: &[u8]) -> Result<(u32, u32), String> {
    if b.len() < RXFH_HEADER {
        return Err(format!("ethtool_rxfh of {} bytes", b.len()));
    }
    let (indir, key) = (get32(b, 8), get32(b, 12));
    if indir > MAX_INDIR || key > MAX_KEY {
        return Err(format!(
            "implausible RSS sizes: {indir} table entries, {key} key bytes"
        ));
    }
    Ok((indir, key))
}

/// The table, key and hash function of a full GRSSH answer.
pub fn decode(b: &[u8]) -> Result<Rss, String> {
    let (indir, key) = decode_sizes(b)?;
    let need = RXFH_HEADER + 4 * indir as usize + key as usize;
    if b.len() < need {
        return Err(format!("ethtool_rxfh of {} bytes, {need} needed", b.len()));
    }
    let indirection = (0..indir as usize)
        .map(|i| get32(b, RXFH_HEADER + 4 * i))
        .collect();
    let k = &b[RXFH_HEADER + 4 * indir as usize..need];
    Ok(Rss {
        hfunc: crate::ethnl::hfunc_name(u32::from(b[16])),
        indirection,
        key: (!k.is_empty()).then(|| k.iter().map(|b| format!("{b:02x}")).collect()),
    })
}

/// The SRXFHINDIR request setting the whole table (struct ethtool_rxfh_indir: cmd, size, the
/// ring of each entry).
pub fn encode_set_indir(table: &[u32]) -> Vec<u8> {
    let mut b = Vec::with_capacity(8 + 4 * table.len());
    b.extend_from_slice(&ETHTOOL_SRXFHINDIR.to_ne_bytes());
    b.extend_from_slice(&(table.len() as u32).to_ne_bytes());
    for q in table {
        b.extend_from_slice(&q.to_ne_bytes());
    }
    b
}

/// `dev`'s RSS over ETHTOOL_GRSSH. EOPNOTSUPP: the driver has no RSS table.
pub fn read(dev: &str) -> io::Result<Rss> {
    let bad = |e: String| io::Error::new(io::ErrorKind::InvalidData, e);
    let mut sizes = encode_get(0, 0);
    ethtool(dev, &mut sizes)?;
    let (indir, key) = decode_sizes(&sizes).map_err(bad)?;
    let mut full = encode_get(indir, key);
    ethtool(dev, &mut full)?;
    decode(&full).map_err(bad)
}

/// Sets `dev`'s indirection table over ETHTOOL_SRXFHINDIR (the kernel checks the size against
/// the device's and every entry against its rx rings: EINVAL otherwise).
pub fn set_indir(dev: &str, table: &[u32]) -> io::Result<()> {
    ethtool(dev, &mut encode_set_indir(table))
}

/// The flow types whose hash fields netsteer reads and sets (ethtool.h *_FLOW).
pub const FLOW_TYPES: [(&str, u32); 4] = [
    ("tcp4", 0x01),
    ("udp4", 0x02),
    ("tcp6", 0x05),
    ("udp6", 0x06),
];

/// RXH_* bits and the letters `ethtool -N rx-flow-hash` names them by.
const FIELDS: [(char, u64); 8] = [
    ('m', 1 << 1),
    ('v', 1 << 2),
    ('t', 1 << 3),
    ('s', 1 << 4),
    ('d', 1 << 5),
    ('f', 1 << 6),
    ('n', 1 << 7),
    ('r', 1 << 31),
];

/// `sdfn` for a field mask (ethtool's letters, in its order).
pub fn fields_text(mask: u64) -> String {
    FIELDS
        .iter()
        .filter(|(_, bit)| mask & bit != 0)
        .map(|(c, _)| *c)
        .collect()
}

/// The field mask of `sdfn`; an unknown letter is an error naming it.
pub fn fields_mask(text: &str) -> Result<u64, String> {
    text.chars().try_fold(0u64, |m, c| {
        FIELDS
            .iter()
            .find(|(l, _)| *l == c)
            .map(|(_, bit)| m | bit)
            .ok_or_else(|| format!("{c:?} in {text:?} is not a flow-hash field (m v t s d f n r)"))
    })
}

fn flow_type(name: &str) -> Result<u32, String> {
    FLOW_TYPES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .ok_or_else(|| format!("no flow type {name:?} (tcp4, udp4, tcp6, udp6)"))
}

/// The GRXFH/SRXFH request (struct ethtool_rxnfc: cmd, flow_type, then `data`, 8-byte aligned).
pub fn encode_flow_hash(get: bool, flow: u32, mask: u64) -> Vec<u8> {
    // The whole ethtool_rxnfc: the kernel copies that much in and out for these commands.
    let mut b = vec![0u8; 192];
    let cmd = if get { ETHTOOL_GRXFH } else { ETHTOOL_SRXFH };
    b[0..4].copy_from_slice(&cmd.to_ne_bytes());
    b[4..8].copy_from_slice(&flow.to_ne_bytes());
    b[8..16].copy_from_slice(&mask.to_ne_bytes());
    b
}

/// The fields `dev` hashes `flow` (`udp4`) on, as ethtool's letters.
pub fn read_flow_hash(dev: &str, flow: &str) -> io::Result<String> {
    let t = flow_type(flow).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut b = encode_flow_hash(true, t, 0);
    ethtool(dev, &mut b)?;
    Ok(fields_text(u64::from_ne_bytes(
        b[8..16].try_into().expect("8 bytes"),
    )))
}

/// Makes `dev` hash `flow` on `fields` (`sdfn`).
pub fn set_flow_hash(dev: &str, flow: &str, fields: &str) -> io::Result<()> {
    let inval = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
    let t = flow_type(flow).map_err(inval)?;
    let mask = fields_mask(fields).map_err(inval)?;
    ethtool(dev, &mut encode_flow_hash(false, t, mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grssh_answer_decodes_table_key_and_function() {
        let mut b = encode_get(4, 2);
        b[16] = 1; // ETH_RSS_HASH_TOP
        for (i, q) in [0u32, 1, 0, 1].iter().enumerate() {
            b[RXFH_HEADER + 4 * i..RXFH_HEADER + 4 * i + 4].copy_from_slice(&q.to_ne_bytes());
        }
        b[RXFH_HEADER + 16] = 0xab;
        b[RXFH_HEADER + 17] = 0x01;
        let rss = decode(&b).unwrap();
        assert_eq!(rss.indirection, [0, 1, 0, 1]);
        assert_eq!(rss.key.as_deref(), Some("ab01"));
        assert_eq!(rss.hfunc.as_deref(), Some("toeplitz"));
        // igb: no key at all.
        let rss = decode(&encode_get(2, 0)).unwrap();
        assert_eq!((rss.indirection.len(), rss.key), (2, None));
        // A short or oversized answer is an error, not a panic or a huge allocation.
        assert!(decode(&b[..30]).is_err());
        assert!(decode_sizes(&encode_get(MAX_INDIR + 1, 0)[..RXFH_HEADER]).is_err());
    }

    #[test]
    fn the_indirection_request_is_the_ethtool_rxfh_indir_layout() {
        let b = encode_set_indir(&[1, 0, 1]);
        assert_eq!(b.len(), 8 + 12);
        assert_eq!(get32(&b, 0), ETHTOOL_SRXFHINDIR);
        assert_eq!(get32(&b, 4), 3);
        assert_eq!([get32(&b, 8), get32(&b, 12), get32(&b, 16)], [1, 0, 1]);
        // Size 0 is the reset to the driver's default table (ethtool.h, ethtool_rxfh_indir).
        let reset = encode_set_indir(&[]);
        assert_eq!((reset.len(), get32(&reset, 4)), (8, 0));
    }

    #[test]
    fn flow_hash_fields_round_trip_in_ethtools_letters() {
        for t in ["sd", "sdfn", "mvtsdfn", "r", ""] {
            assert_eq!(fields_text(fields_mask(t).unwrap()), t);
        }
        assert_eq!(fields_mask("sdfn").unwrap(), 0xf0);
        assert!(fields_mask("sdx").unwrap_err().contains("'x'"));
        let b = encode_flow_hash(false, 0x02, 0xf0);
        assert_eq!(get32(&b, 0), ETHTOOL_SRXFH);
        assert_eq!(get32(&b, 4), 0x02);
        assert_eq!(u64::from_ne_bytes(b[8..16].try_into().unwrap()), 0xf0);
        assert!(flow_type("sctp4").is_err());
    }
}
