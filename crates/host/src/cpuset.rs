//! CPU sets in the two spellings the kernel uses.
//!
//! * CPU lists (`0-3,8`, `0-15:2/4`, `all`, `N`) as printed by `%*pbl` and parsed by
//!   `bitmap_parselist()` (lib/bitmap-str.c).
//! * Hex masks with comma-separated 32-bit groups as printed by `%*pb` (`ffffffff,ffffffff`,
//!   `00,0000000f`). The kernel prints and accepts them at an exact width of `nr_cpu_ids` bits:
//!   `bitmap_parse()` rejects a mask with more groups than needed, or bits at or above
//!   `nr_cpu_ids`, with EOVERFLOW, so writers must use [`CpuSet::to_mask`] with the host's width.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Largest CPU id accepted from text. NR_CPUS tops out at 8192 on every architecture today; the
/// slack keeps hostile input (`0-4294967295`) from allocating gigabytes.
pub const MAX_CPU_ID: u32 = 65_535;

/// Why a CPU list or mask could not be parsed or printed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetError {
    #[error("invalid CPU list {input:?}: {reason}")]
    List { input: String, reason: String },
    #[error("invalid CPU mask {input:?}: {reason}")]
    Mask { input: String, reason: String },
    #[error("CPU {cpu} does not fit a mask of {nbits} CPUs (the kernel would answer EOVERFLOW)")]
    Overflow { cpu: u32, nbits: u32 },
}

/// A set of CPU ids, stored as a bitmap.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    /// Bit `i` of word `w` is CPU `64 * w + i`; no trailing zero words, so equality is structural.
    words: Vec<u64>,
}

impl CpuSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// CPUs `0..n`.
    pub fn first_n(n: u32) -> Self {
        (0..n).collect()
    }

    pub fn insert(&mut self, cpu: u32) {
        let (w, b) = (cpu as usize / 64, cpu % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << b;
    }

    pub fn remove(&mut self, cpu: u32) {
        let (w, b) = (cpu as usize / 64, cpu % 64);
        if let Some(word) = self.words.get_mut(w) {
            *word &= !(1 << b);
        }
        self.trim();
    }

    pub fn contains(&self, cpu: u32) -> bool {
        let (w, b) = (cpu as usize / 64, cpu % 64);
        self.words.get(w).is_some_and(|word| word & (1 << b) != 0)
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Lowest CPU in the set.
    pub fn lowest(&self) -> Option<u32> {
        self.words
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i as u32 * 64 + w.trailing_zeros())
    }

    /// Highest CPU in the set.
    pub fn max(&self) -> Option<u32> {
        let last = self.words.last()?;
        Some((self.words.len() as u32 - 1) * 64 + 63 - last.leading_zeros())
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &word)| {
            let mut bits = word;
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                Some(w as u32 * 64 + b)
            })
        })
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let words = (0..n)
            .map(|i| self.word(i) | other.word(i))
            .collect::<Vec<_>>();
        CpuSet::from_words(words)
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().min(other.words.len());
        CpuSet::from_words((0..n).map(|i| self.word(i) & other.word(i)).collect())
    }

    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet::from_words(
            (0..self.words.len())
                .map(|i| self.word(i) & !other.word(i))
                .collect(),
        )
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.difference(other).is_empty()
    }

    fn word(&self, i: usize) -> u64 {
        self.words.get(i).copied().unwrap_or(0)
    }

    fn from_words(words: Vec<u64>) -> CpuSet {
        let mut set = CpuSet { words };
        set.trim();
        set
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }

    /// Parses a CPU list the way `bitmap_parselist()` does: comma-separated regions `a`, `a-b`
    /// or `a-b:used/group`; `N` stands for the last CPU and `all` for every CPU, both of which
    /// need `nr_cpu_ids`. Surrounding white space (the kernel's trailing newline) is ignored and
    /// an empty list is the empty set (what `isolated` reads when nothing is isolated).
    pub fn parse_list(input: &str, nr_cpu_ids: Option<u32>) -> Result<CpuSet, CpuSetError> {
        let err = |reason: String| CpuSetError::List {
            input: input.to_string(),
            reason,
        };
        let text = input.trim();
        let mut set = CpuSet::new();
        if text.is_empty() {
            return Ok(set);
        }
        let last_cpu = || {
            nr_cpu_ids
                .filter(|n| *n > 0)
                .map(|n| n - 1)
                .ok_or_else(|| err("'N' and 'all' need the number of possible CPUs".into()))
        };
        let number = |s: &str| -> Result<u32, CpuSetError> {
            if s == "N" {
                return last_cpu();
            }
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err(format!("{s:?} is not a CPU number")));
            }
            let n: u64 = s.parse().map_err(|_| err(format!("{s:?} is too large")))?;
            if n > MAX_CPU_ID as u64 {
                return Err(err(format!(
                    "CPU {n} is above the largest supported id {MAX_CPU_ID}"
                )));
            }
            Ok(n as u32)
        };
        for region in text.split(',') {
            let region = region.trim();
            if region.is_empty() {
                return Err(err("empty region".into()));
            }
            let (range, stride) = match region.split_once(':') {
                Some((r, s)) => (r, Some(s)),
                None => (region, None),
            };
            let (start, end) = if range == "all" {
                (0, last_cpu()?)
            } else if let Some((a, b)) = range.split_once('-') {
                (number(a)?, number(b)?)
            } else {
                let n = number(range)?;
                (n, n)
            };
            if start > end {
                return Err(err(format!("range {start}-{end} runs backwards")));
            }
            let (used, group) = match stride {
                None => (1, 1),
                Some(s) => {
                    let (u, g) = s
                        .split_once('/')
                        .ok_or_else(|| err(format!("stride {s:?} is not used/group")))?;
                    let (u, g) = (number(u)?, number(g)?);
                    if g == 0 || u == 0 || u > g {
                        return Err(err(format!("stride {u}/{g} is invalid")));
                    }
                    (u, g)
                }
            };
            let mut cpu = start;
            while cpu <= end {
                if (cpu - start) % group < used {
                    set.insert(cpu);
                }
                cpu += 1;
            }
        }
        Ok(set)
    }

    /// The canonical list form, e.g. `0-3,8`; empty for the empty set.
    pub fn to_list(&self) -> String {
        let mut out = String::new();
        let mut iter = self.iter().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end = iter.next().unwrap_or(end);
            }
            if !out.is_empty() {
                out.push(',');
            }
            if start == end {
                out.push_str(&start.to_string());
            } else {
                out.push_str(&format!("{start}-{end}"));
            }
        }
        out
    }

    /// Parses a hex mask with optional comma-separated 32-bit groups (`3`, `0200`,
    /// `ffffffff,00000001`). Like the kernel it rejects a `0x` prefix and groups longer than
    /// eight digits; it does not enforce a width (see [`CpuSet::to_mask`] for that).
    pub fn parse_mask(input: &str) -> Result<CpuSet, CpuSetError> {
        let err = |reason: &str| CpuSetError::Mask {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let text = input.trim();
        if text.is_empty() {
            return Err(err("empty mask"));
        }
        let groups: Vec<&str> = text.split(',').collect();
        if groups.len() as u64 * 32 > MAX_CPU_ID as u64 + 32 {
            return Err(err("more groups than any kernel supports"));
        }
        let mut set = CpuSet::new();
        for (k, group) in groups.iter().rev().enumerate() {
            if group.is_empty() || group.len() > 8 {
                return Err(err("each comma group must have 1 to 8 hex digits"));
            }
            let value = u32::from_str_radix(group, 16)
                .map_err(|_| err("not a hexadecimal number (no 0x prefix)"))?;
            if !group.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err("not a hexadecimal number (no 0x prefix)"));
            }
            for bit in 0..32 {
                if value & (1 << bit) != 0 {
                    set.insert(k as u32 * 32 + bit);
                }
            }
        }
        Ok(set)
    }

    /// Prints the mask exactly as the kernel's `%*pb` does for a bitmap of `nbits` bits (for CPU
    /// masks `nbits` = `nr_cpu_ids`, see [`nr_cpu_ids`]): `ceil(nbits / 4)` zero-padded hex
    /// digits, a comma before every group of eight counted from the right. This is also the only
    /// width `bitmap_parse()` accepts without EOVERFLOW.
    pub fn to_mask(&self, nbits: u32) -> Result<String, CpuSetError> {
        if nbits == 0 {
            return Err(CpuSetError::Overflow { cpu: 0, nbits });
        }
        if let Some(max) = self.max().filter(|m| *m >= nbits) {
            return Err(CpuSetError::Overflow { cpu: max, nbits });
        }
        let digits = nbits.div_ceil(4) as usize;
        let mut out = String::with_capacity(digits + digits / 8);
        for d in (0..digits).rev() {
            let nibble = (0..4).fold(0u32, |acc, b| {
                acc | (u32::from(self.contains(d as u32 * 4 + b)) << b)
            });
            out.push(char::from_digit(nibble, 16).unwrap_or('0'));
            if d % 8 == 0 && d != 0 {
                out.push(',');
            }
        }
        Ok(out)
    }
}

/// `nr_cpu_ids` as the kernel computes it: one past the highest possible CPU. Masks are that many
/// bits wide.
pub fn nr_cpu_ids(possible: &CpuSet) -> u32 {
    possible.max().map_or(1, |m| m + 1)
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut set = CpuSet::new();
        for cpu in iter {
            set.insert(cpu);
        }
        set
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&self.to_list())
        }
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({})", self.to_list())
    }
}

/// Serialized as the canonical CPU list string (`"0-3,8"`, `""` for none).
impl Serialize for CpuSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_list())
    }
}

impl<'de> Deserialize<'de> for CpuSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        CpuSet::parse_list(&text, None).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn list(s: &str) -> CpuSet {
        CpuSet::parse_list(s, Some(16)).unwrap()
    }

    #[test]
    fn lists_parse_like_bitmap_parselist() {
        assert_eq!(list("0-3,8").to_list(), "0-3,8");
        assert_eq!(list("8,0-3\n").to_list(), "0-3,8");
        assert_eq!(list("all").to_list(), "0-15");
        assert_eq!(list("N").to_list(), "15");
        assert_eq!(list("0-15:2/4").to_list(), "0-1,4-5,8-9,12-13");
        assert_eq!(list("0-N:1/8").to_list(), "0,8");
        assert_eq!(list("").len(), 0);
        assert!(CpuSet::parse_list("1-0", None).is_err());
        assert!(CpuSet::parse_list("abc", None).is_err());
        assert!(CpuSet::parse_list("0,,1", None).is_err());
        assert!(CpuSet::parse_list("all", None).is_err());
        assert!(CpuSet::parse_list("0-7:0/4", None).is_err());
        assert!(CpuSet::parse_list("0-7:5/4", None).is_err());
        assert!(CpuSet::parse_list("0-4294967295", None).is_err());
    }

    #[test]
    fn masks_print_at_exact_kernel_width() {
        let s = list("0-3");
        assert_eq!(
            s.to_mask(2).unwrap_err(),
            CpuSetError::Overflow { cpu: 3, nbits: 2 }
        );
        assert_eq!(list("0-1").to_mask(2).unwrap(), "3");
        assert_eq!(s.to_mask(40).unwrap(), "00,0000000f");
        assert_eq!(s.to_mask(16).unwrap(), "000f");
        assert_eq!(
            CpuSet::first_n(64).to_mask(64).unwrap(),
            "ffffffff,ffffffff"
        );
        assert_eq!(CpuSet::new().to_mask(4).unwrap(), "0");
        assert_eq!(list("9").to_mask(16).unwrap(), "0200");
        assert_eq!(
            CpuSet::from_iter([0, 127]).to_mask(128).unwrap(),
            "80000000,00000000,00000000,00000001"
        );
    }

    #[test]
    fn masks_parse_groups_from_the_right() {
        assert_eq!(CpuSet::parse_mask("0200\n").unwrap().to_list(), "9");
        assert_eq!(
            CpuSet::parse_mask("00000001,00000000,80000000")
                .unwrap()
                .to_list(),
            "31,64"
        );
        assert_eq!(CpuSet::parse_mask("0").unwrap(), CpuSet::new());
        assert!(CpuSet::parse_mask("0x3").is_err());
        assert!(CpuSet::parse_mask("000000003").is_err());
        assert!(CpuSet::parse_mask("+3").is_err());
        assert!(CpuSet::parse_mask("").is_err());
        assert!(CpuSet::parse_mask("3,,3").is_err());
    }

    #[test]
    fn set_operations() {
        let a = list("0-7");
        let b = list("4-11");
        assert_eq!(a.union(&b).to_list(), "0-11");
        assert_eq!(a.intersection(&b).to_list(), "4-7");
        assert_eq!(a.difference(&b).to_list(), "0-3");
        assert!(list("1-2").is_subset(&a));
        assert_eq!(list("70,3").max(), Some(70));
        let mut c = list("64");
        c.remove(64);
        assert!(c.is_empty());
        assert_eq!(c, CpuSet::new());
    }

    proptest! {
        #[test]
        fn list_and_mask_round_trip(nbits in 1u32..=1024, seed in proptest::collection::vec(any::<u32>(), 0..64)) {
            let set: CpuSet = seed.iter().map(|v| v % nbits).collect();
            let listed = set.to_list();
            prop_assert_eq!(CpuSet::parse_list(&listed, Some(nbits)).unwrap(), set.clone());
            let mask = set.to_mask(nbits).unwrap();
            prop_assert_eq!(mask.len() as u32, nbits.div_ceil(4) + (nbits.div_ceil(4) - 1) / 8);
            prop_assert_eq!(CpuSet::parse_mask(&mask).unwrap(), set);
        }

        #[test]
        fn full_sets_round_trip(nbits in 1u32..=1024) {
            let set = CpuSet::first_n(nbits);
            prop_assert_eq!(set.to_list(), if nbits == 1 { "0".to_string() } else { format!("0-{}", nbits - 1) });
            prop_assert_eq!(CpuSet::parse_mask(&set.to_mask(nbits).unwrap()).unwrap(), set.clone());
            prop_assert!(set.to_mask(nbits - 1).is_err() || nbits == 1);
        }

        #[test]
        fn parsers_never_panic(s in "\\PC{0,64}") {
            let _ = CpuSet::parse_list(&s, Some(64));
            let _ = CpuSet::parse_mask(&s);
        }

        #[test]
        fn parsers_never_panic_on_near_valid_input(s in "[0-9a-fN,:/ all-]{0,40}") {
            let _ = CpuSet::parse_list(&s, Some(4096));
            let _ = CpuSet::parse_mask(&s);
        }
    }
}
