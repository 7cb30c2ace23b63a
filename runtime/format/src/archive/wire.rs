//! The TOC's MessagePack shape (docs/formats.md section 1), read and written
//! through serde: one struct for both directions, its field order the
//! order the writer emits.

use std::borrow::Cow;

#[cfg(feature = "write")]
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

#[cfg(feature = "write")]
use super::TocEntry;
use crate::msgpack::{present, Named, Pairs, Str, Value};

/// The TOC map. `T` is the `toc` field: [`TocIn`] when reading, a view
/// of the writer's entries ([`TocOut`]) when writing.
#[derive(Serialize, Deserialize)]
pub(super) struct WireToc<'a, T> {
    pub format_version: u64,
    #[serde(borrow)]
    pub group_name: Str<'a>,
    #[serde(borrow)]
    pub gfx_arch_family: Str<'a>,
    #[serde(borrow)]
    pub gfx_arches: Vec<Str<'a>>,
    pub toc: T,
    #[serde(borrow)]
    pub compression_scheme: Str<'a>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub zstd_offset: Option<u64>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub zstd_size: Option<u64>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub blobs: Option<Vec<Named<WireBlob>>>,
}

/// `toc` as read: binary key -> arch key -> entry, in encoded order, keys
/// distinct.
pub(super) type TocIn<'a> = Pairs<Str<'a>, Pairs<Str<'a>, Named<WireEntry<'a>>>>;

/// Just the version, to tell "another version" from "malformed".
#[derive(Deserialize)]
pub(super) struct VersionOnly {
    pub format_version: u64,
}

/// One TOC entry.
#[derive(Serialize, Deserialize)]
pub(super) struct WireEntry<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Str<'a>,
    pub ordinal: u64,
    pub original_size: u64,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata: Option<Cow<'a, Value>>,
}

/// One `blobs` element (scheme `none`).
#[derive(Serialize, Deserialize)]
pub(super) struct WireBlob {
    pub offset: u64,
    pub size: u64,
}

/// `toc` as written: the writer's entries, serialized in place.
#[cfg(feature = "write")]
pub(super) struct TocOut<'a>(pub &'a [(String, Vec<(String, TocEntry)>)]);

#[cfg(feature = "write")]
impl Serialize for TocOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (binary, entries) in self.0 {
            map.serialize_entry(&Str(binary), &EntriesOut(entries))?;
        }
        map.end()
    }
}

#[cfg(feature = "write")]
struct EntriesOut<'a>(&'a [(String, TocEntry)]);

#[cfg(feature = "write")]
impl Serialize for EntriesOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (arch, e) in self.0 {
            let entry = WireEntry {
                kind: Str("hsaco"),
                ordinal: u64::from(e.ordinal),
                original_size: e.original_size,
                metadata: e.metadata.as_ref().map(Cow::Borrowed),
            };
            map.serialize_entry(&Str(arch), &entry)?;
        }
        map.end()
    }
}
