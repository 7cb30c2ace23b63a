//! Database sets (docs/packaging.md, "Transport form: kernel databases"):
//! a store's `index.json` lists, per component and processor, one stream
//! of all of a processor's database files (`rocm_kpack_format::database_set`).
//! When a component needs every member of a set, the set is downloaded
//! instead of the files one by one; each member is checked against the
//! manifest before it is installed, and anything wrong sends the fetcher
//! back to the per-file objects.
//!
//! The index is a hint from the store, never trusted: a set is used only
//! when each member it lists is a database file the manifest lists and
//! this run fetches (same path, size and sha256), and its size is the one
//! those members make ([`database_set::stream_size`]); its URL is made
//! from its sha256 here, never taken from the index.

use std::collections::BTreeMap;

use rocm_kpack_format::database_set::{self, SetMember};
use serde::Deserialize;

use crate::plan::decode_sha256;

/// The part of `index.json` read here; every other key is ignored.
#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    database_sets: Vec<IndexSet>,
}

/// One `database_sets` entry of `index.json`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct IndexSet {
    /// Component whose manifest lists the members.
    pub component: String,
    /// The processor the members serve.
    pub processor: String,
    /// Stream format (`database_set::FORMAT`).
    pub format: u32,
    /// Bytes of the decoded stream.
    pub size: u64,
    /// sha256 hex of the decoded stream.
    pub sha256: String,
    /// Members, as the manifest lists them.
    pub members: Vec<IndexMember>,
}

/// One member of an [`IndexSet`].
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct IndexMember {
    /// Database path, as the manifest lists it.
    pub install_path: String,
    /// Installed size.
    pub size: u64,
    /// sha256 hex of the installed bytes.
    pub sha256: String,
}

/// The sets of an `index.json`.
pub fn parse_index(bytes: &[u8]) -> Result<Vec<IndexSet>, serde_json::Error> {
    serde_json::from_slice::<Index>(bytes).map(|i| i.database_sets)
}

/// A set chosen for download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// The processor it serves (for messages).
    pub processor: String,
    /// Size of the decoded stream.
    pub size: u64,
    /// sha256 of the decoded stream.
    pub sha256: [u8; 32],
    /// Its members, each one of `needed`.
    pub members: Vec<SetMember>,
}

/// The sets of `component` among `sets` whose every member is in `needed`
/// (database path -> size and sha256 of what this run fetches), with the
/// size those members make, in a format this fetcher reads; no file in
/// two, no two members with the same bytes. A set with a member not
/// needed is not used: its per-file objects are smaller than the set.
pub fn choose(
    sets: &[IndexSet],
    component: &str,
    needed: &BTreeMap<String, (u64, [u8; 32])>,
) -> Vec<Chosen> {
    let mut taken: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for s in sets.iter().filter(|s| s.component == component) {
        if s.format != database_set::FORMAT || s.members.len() < 2 {
            continue;
        }
        let Some(set_sha) = decode_sha256(&s.sha256) else {
            continue;
        };
        let members: Option<Vec<SetMember>> =
            s.members
                .iter()
                .map(|m| {
                    let (size, want) = needed.get(&m.install_path)?;
                    let got = decode_sha256(&m.sha256)?;
                    (got == *want && m.size == *size && !taken.contains(&m.install_path.as_str()))
                        .then(|| SetMember {
                            path: m.install_path.clone(),
                            size: m.size,
                            sha256: got,
                        })
                })
                .collect();
        let Some(mut members) = members else {
            continue;
        };
        members.sort();
        members.dedup_by(|a, b| a.path == b.path);
        // Two members with the same bytes would share one partial
        // download, which the fetcher locks per member.
        let mut shas: Vec<&[u8; 32]> = members.iter().map(|m| &m.sha256).collect();
        shas.sort();
        shas.dedup();
        if members.len() != s.members.len()
            || shas.len() != members.len()
            || database_set::stream_size(&members).ok() != Some(s.size)
        {
            continue;
        }
        taken.extend(s.members.iter().map(|m| m.install_path.as_str()));
        out.push(Chosen {
            processor: s.processor.clone(),
            size: s.size,
            sha256: set_sha,
            members,
        });
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn member(path: &str, n: u8) -> IndexMember {
        IndexMember {
            install_path: path.into(),
            size: 10 + u64::from(n),
            sha256: hex::encode([n; 32]),
        }
    }

    fn set(members: Vec<IndexMember>) -> IndexSet {
        let list: Vec<SetMember> = members
            .iter()
            .map(|m| SetMember {
                path: m.install_path.clone(),
                size: m.size,
                sha256: decode_sha256(&m.sha256).unwrap(),
            })
            .collect();
        IndexSet {
            component: "rocblas".into(),
            processor: "gfx90a".into(),
            format: 1,
            size: database_set::stream_size(&list).unwrap(),
            sha256: hex::encode([9; 32]),
            members,
        }
    }

    #[test]
    fn a_set_is_chosen_only_when_every_member_is_needed_as_the_manifest_says() {
        let needed: BTreeMap<String, (u64, [u8; 32])> = [("a", 1u8), ("b", 2), ("c", 3)]
            .iter()
            .map(|(p, n)| (p.to_string(), (10 + u64::from(*n), [*n; 32])))
            .collect();
        let good = set(vec![member("a", 1), member("b", 2)]);
        let chosen = choose(std::slice::from_ref(&good), "rocblas", &needed);
        assert_eq!(chosen.len(), 1);
        assert_eq!(chosen[0].members.len(), 2);
        assert_eq!(chosen[0].sha256, [9; 32]);
        // Another component's, a member not needed, another version of a
        // member, a size that is not the members', another format, one
        // member, a member in two sets.
        let mut other = good.clone();
        other.component = "rocsparse".into();
        let extra = set(vec![member("a", 1), member("z", 2)]);
        let stale = set(vec![member("a", 1), member("b", 7)]);
        let mut lying = good.clone();
        lying.size += 1;
        let mut newer = good.clone();
        newer.format = 2;
        let single = set(vec![member("a", 1)]);
        for bad in [other, extra, stale, lying, newer, single] {
            assert!(
                choose(std::slice::from_ref(&bad), "rocblas", &needed).is_empty(),
                "{bad:?}"
            );
        }
        // Two members with the same bytes.
        let mut twins = needed.clone();
        twins.insert("d".into(), (11, [1; 32]));
        let same = set(vec![member("a", 1), member("d", 1)]);
        assert!(choose(&[same], "rocblas", &twins).is_empty());
        let overlap = set(vec![member("b", 2), member("c", 3)]);
        assert_eq!(choose(&[good, overlap], "rocblas", &needed).len(), 1);
        // An index without sets, and one with keys this reader ignores.
        assert!(parse_index(br#"{"format_version": 2, "archives": []}"#)
            .unwrap()
            .is_empty());
        assert!(parse_index(br#"{"database_sets": 3}"#).is_err());
    }
}
