//! Netlink attribute (TLV) encoding and decoding: pure functions over byte slices.

pub const NLA_F_NESTED: u16 = 1 << 15;
const NLA_TYPE_MASK: u16 = !(1 << 15 | 1 << 14);

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Appends one attribute.
pub fn put(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(buf.len() + align4(len) - len, 0);
}

pub fn put_str(buf: &mut Vec<u8>, kind: u16, s: &str) {
    let mut p = s.as_bytes().to_vec();
    p.push(0);
    put(buf, kind, &p);
}

/// Splits a run of attributes into (type, payload) pairs; a length that runs past the end is an
/// error rather than a panic, whatever the bytes.
pub fn parse(mut buf: &[u8]) -> Result<Vec<(u16, &[u8])>, String> {
    let mut out = Vec::new();
    while buf.len() >= 4 {
        let len = u16::from_ne_bytes([buf[0], buf[1]]) as usize;
        let kind = u16::from_ne_bytes([buf[2], buf[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > buf.len() {
            return Err(format!(
                "attribute {kind} claims {len} bytes of {}",
                buf.len()
            ));
        }
        out.push((kind, &buf[4..len]));
        buf = &buf[align4(len).min(buf.len())..];
    }
    Ok(out)
}

pub fn u32_of(p: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(p.get(..4)?.try_into().ok()?))
}

/// A netlink `uint`: 4 bytes when the value fits, else 8 (netlink.rst, "uint").
pub fn uint_of(p: &[u8]) -> Option<u64> {
    match p.len() {
        4 => u32_of(p).map(u64::from),
        8 => Some(u64::from_ne_bytes(p.try_into().ok()?)),
        _ => None,
    }
}

/// Appends a `uint` the way the kernel sends one: 4 bytes when it fits.
pub fn put_uint(buf: &mut Vec<u8>, kind: u16, v: u64) {
    match u32::try_from(v) {
        Ok(small) => put(buf, kind, &small.to_ne_bytes()),
        Err(_) => put(buf, kind, &v.to_ne_bytes()),
    }
}

pub fn u16_of(p: &[u8]) -> Option<u16> {
    Some(u16::from_ne_bytes(p.get(..2)?.try_into().ok()?))
}

pub fn u8_of(p: &[u8]) -> Option<u8> {
    p.first().copied()
}

pub fn str_of(p: &[u8]) -> String {
    let end = p.iter().position(|&b| b == 0).unwrap_or(p.len());
    String::from_utf8_lossy(&p[..end]).into_owned()
}

/// The first attribute of a type.
pub fn find<'a>(attrs: &[(u16, &'a [u8])], kind: u16) -> Option<&'a [u8]> {
    attrs.iter().find(|(k, _)| *k == kind).map(|(_, p)| *p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_hostile_lengths() {
        let mut b = Vec::new();
        put_str(&mut b, 2, "eth0");
        put(&mut b, 6, &7u32.to_ne_bytes());
        let a = parse(&b).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(str_of(a[0].1), "eth0");
        assert_eq!(u32_of(find(&a, 6).unwrap()), Some(7));
        assert!(parse(&[200, 0, 1, 0, 0]).is_err());
        assert!(parse(&[2, 0, 1, 0]).is_err());
        assert_eq!(u32_of(&[1, 2]), None);
        let mut u = Vec::new();
        put_uint(&mut u, 1, 7);
        put_uint(&mut u, 2, 1 << 40);
        let a = parse(&u).unwrap();
        assert_eq!((a[0].1.len(), a[1].1.len()), (4, 8));
        assert_eq!(uint_of(a[0].1), Some(7));
        assert_eq!(uint_of(a[1].1), Some(1 << 40));
        assert_eq!(uint_of(&[1, 2, 3]), None);
    }
}
