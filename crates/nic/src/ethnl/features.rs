//! ETHTOOL_MSG_FEATURES_GET (11) and ETHTOOL_MSG_FEATURES_SET (12). Requested without ETHTOOL_FLAG_COMPACT_BITSETS, so each bitset
//! comes as a list of named bits; `hw`, `active` and `nochange` are lists of the set bits.
use crate::attr;
use netsteer_host::ethtool::Feature;
use std::collections::{BTreeMap, BTreeSet};

pub const CMD: u8 = 11;
pub const CMD_SET: u8 = 12;
const A_WANTED: u16 = 3;
const A_HW: u16 = 2;
const A_ACTIVE: u16 = 4;
const A_NOCHANGE: u16 = 5;
const BITSET_BITS: u16 = 3;
const BITS_BIT: u16 = 1;
const BIT_NAME: u16 = 2;
const BIT_VALUE: u16 = 3;

/// WANTED as a verbose bitset *with* a mask (no NOMASK flag): only the bit listed changes, to
/// VALUE when the flag is present, else off.
pub fn set(name: &str, on: bool) -> Vec<u8> {
    let mut bit = Vec::new();
    attr::put_str(&mut bit, BIT_NAME, name);
    if on {
        attr::put(&mut bit, BIT_VALUE, &[]);
    }
    let mut bits = Vec::new();
    attr::put(&mut bits, BITS_BIT | attr::NLA_F_NESTED, &bit);
    let mut bitset = Vec::new();
    attr::put(&mut bitset, BITSET_BITS | attr::NLA_F_NESTED, &bits);
    let mut a = Vec::new();
    attr::put(&mut a, A_WANTED | attr::NLA_F_NESTED, &bitset);
    a
}

/// Names of the bits set in one verbose bitset. In a list (NOMASK) bitset every listed bit is
/// set; with a mask, a bit is set when it carries the VALUE flag.
fn set_bits(bitset: &[u8]) -> Result<BTreeSet<String>, String> {
    let a = attr::parse(bitset)?;
    let nomask = attr::find(&a, 1).is_some();
    let mut out = BTreeSet::new();
    if let Some(bits) = attr::find(&a, BITSET_BITS) {
        for (kind, bit) in attr::parse(bits)? {
            if kind != BITS_BIT {
                continue;
            }
            let b = attr::parse(bit)?;
            let on = nomask || attr::find(&b, BIT_VALUE).is_some();
            if let (true, Some(name)) = (on, attr::find(&b, BIT_NAME)) {
                out.insert(attr::str_of(name));
            }
        }
    }
    Ok(out)
}

/// Features the device has or has on; one that is absent is off and cannot be turned on.
pub fn parse(buf: &[u8]) -> Result<BTreeMap<String, Feature>, String> {
    let a = attr::parse(buf)?;
    let get = |k| {
        attr::find(&a, k)
            .map(set_bits)
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let (hw, active, nochange) = (get(A_HW)?, get(A_ACTIVE)?, get(A_NOCHANGE)?);
    Ok(hw
        .union(&active)
        .map(|name| {
            (
                name.clone(),
                Feature {
                    active: active.contains(name),
                    changeable: hw.contains(name) && !nochange.contains(name),
                },
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bit(name: &str, value: bool) -> Vec<u8> {
        let mut b = Vec::new();
        attr::put_str(&mut b, BIT_NAME, name);
        if value {
            attr::put(&mut b, BIT_VALUE, &[]);
        }
        b
    }

    fn bitset(nomask: bool, bits: &[(&str, bool)]) -> Vec<u8> {
        let mut list = Vec::new();
        for (n, v) in bits {
            attr::put(&mut list, BITS_BIT | attr::NLA_F_NESTED, &bit(n, *v));
        }
        let mut set = Vec::new();
        if nomask {
            attr::put(&mut set, 1, &[]);
        }
        attr::put(&mut set, BITSET_BITS | attr::NLA_F_NESTED, &list);
        set
    }

    #[test]
    fn fixed_and_changeable_features() {
        let mut msg = Vec::new();
        attr::put(
            &mut msg,
            A_HW,
            &bitset(true, &[("rx-gro", false), ("ntuple-filters", false)]),
        );
        attr::put(
            &mut msg,
            A_ACTIVE,
            &bitset(true, &[("rx-gro", false), ("rx-checksum", false)]),
        );
        attr::put(
            &mut msg,
            A_NOCHANGE,
            &bitset(true, &[("rx-checksum", false)]),
        );
        let f = parse(&msg).unwrap();
        assert_eq!(
            f["rx-gro"],
            Feature {
                active: true,
                changeable: true
            }
        );
        assert_eq!(
            f["ntuple-filters"],
            Feature {
                active: false,
                changeable: true
            }
        );
        assert_eq!(
            f["rx-checksum"],
            Feature {
                active: true,
                changeable: false
            }
        );
        // With a mask, only bits carrying VALUE are set.
        let mut masked = Vec::new();
        attr::put(
            &mut masked,
            A_ACTIVE,
            &bitset(false, &[("a", true), ("b", false)]),
        );
        let f = parse(&masked).unwrap();
        assert!(f["a"].active);
        assert!(!f.contains_key("b"));
        assert!(parse(&[9, 0, 2, 0, 1]).is_err());
        // A SET's WANTED bitset reads back (as a masked bitset) as exactly that bit.
        let wanted = set("rx-gro", true);
        let a = attr::parse(&wanted).unwrap();
        assert_eq!(a[0].0, A_WANTED);
        let bits = set_bits(a[0].1).unwrap();
        assert_eq!(
            bits.into_iter().collect::<Vec<_>>(),
            vec!["rx-gro".to_string()]
        );
        let off = set("rx-gro", false);
        assert!(
            set_bits(attr::parse(&off).unwrap()[0].1)
                .unwrap()
                .is_empty()
        );
    }
}
