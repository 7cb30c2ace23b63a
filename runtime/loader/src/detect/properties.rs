//! The `key value` lines of a KFD `properties` file, read as an unordered map.
//! Keys come and go across kernel versions, so nothing here depends on order
//! or on a fixed key set; lines that are not `key <decimal>` are reported,
//! never fatal.

use std::collections::BTreeMap;

/// Longest excerpt of a bad line quoted in a problem report.
const MAX_QUOTE: usize = 60;

/// Parsed `properties`: key -> decimal value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties {
    map: BTreeMap<String, u64>,
}

impl Properties {
    /// Parses `text`, returning the map and one message per line that was
    /// skipped (1-based line numbers). Blank lines are ignored; CR line ends
    /// are accepted; for a repeated key the last value wins.
    pub fn parse(text: &str) -> (Properties, Vec<String>) {
        let mut map = BTreeMap::new();
        let mut problems = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let mut words = line.split_whitespace();
            let (Some(key), value, rest) = (words.next(), words.next(), words.next()) else {
                continue; // blank
            };
            let (Some(value), None) = (value, rest) else {
                problems.push(format!(
                    "line {number}: expected `key value`, found {}",
                    quote(line)
                ));
                continue;
            };
            let Ok(value) = value.parse::<u64>() else {
                problems.push(format!(
                    "line {number}: {key}: {} is not a decimal number",
                    quote(value)
                ));
                continue;
            };
            if map.insert(key.to_string(), value).is_some() {
                problems.push(format!("line {number}: {key} repeated; last value kept"));
            }
        }
        (Properties { map }, problems)
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<u64> {
        self.map.get(key).copied()
    }

    /// The value of `key` if present and it fits 32 bits (KFD prints most
    /// fields as `%u`).
    pub fn get_u32(&self, key: &str) -> Option<u32> {
        self.get(key).and_then(|v| u32::try_from(v).ok())
    }

    /// Number of keys read.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no key was read.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// `s` quoted and escaped, cut to [`MAX_QUOTE`] characters so a junk file
/// cannot flood the warnings.
fn quote(s: &str) -> String {
    let mut out: String = s.chars().take(MAX_QUOTE).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    format!("{out:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kernel_text() {
        let (p, problems) = Properties::parse(
            "cpu_cores_count 0\nsimd_count 192\nunique_id 18446744073709551615\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(p.get("simd_count"), Some(192));
        assert_eq!(p.get_u32("cpu_cores_count"), Some(0));
        assert_eq!(p.get("unique_id"), Some(u64::MAX));
        assert_eq!(p.get_u32("unique_id"), None, "does not fit 32 bits");
        assert_eq!(p.get("num_xcc"), None);
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn junk_is_reported_not_fatal() {
        let text = "simd_count 8\r\njunk\r\ncapability 0x10\n\n  \nfoo 1 2\nsimd_count 9\nwave_front_size -1";
        let (p, problems) = Properties::parse(text);
        assert_eq!(p.get("simd_count"), Some(9));
        assert_eq!(p.get("capability"), None);
        assert_eq!(p.get("wave_front_size"), None);
        assert_eq!(
            problems,
            [
                "line 2: expected `key value`, found \"junk\"",
                "line 3: capability: \"0x10\" is not a decimal number",
                "line 6: expected `key value`, found \"foo 1 2\"",
                "line 7: simd_count repeated; last value kept",
                "line 8: wave_front_size: \"-1\" is not a decimal number",
            ]
        );
    }

    #[test]
    fn long_junk_is_cut() {
        let line = "x".repeat(10_000);
        let (_, problems) = Properties::parse(&line);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].len() < 150, "{}", problems[0]);
    }

    proptest! {
        #[test]
        fn any_text_parses_without_panic(text in "\\PC*") {
            let (p, problems) = Properties::parse(&text);
            prop_assert!(p.len() + problems.len() <= text.lines().count());
        }

        #[test]
        fn well_formed_lines_round_trip(entries in proptest::collection::btree_map("[a-z_]{1,20}", any::<u64>(), 0..40)) {
            let text: String = entries.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
            let (p, problems) = Properties::parse(&text);
            prop_assert!(problems.is_empty());
            for (k, v) in &entries {
                prop_assert_eq!(p.get(k), Some(*v));
            }
        }
    }
}
