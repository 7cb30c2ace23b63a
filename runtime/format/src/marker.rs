//! The marker a split host binary carries in `.rocm_kpack_ref` (ELF) or
//! `.kpackrf` (PE/COFF): where its archives are and under which name its
//! code objects are filed (docs/formats.md section 2).

use crate::error::{Error, Result};
use crate::msgpack;

/// Decoded marker contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// Candidate archive locations, in order: `.kpm` manifests, patterns
    /// containing `@GFXARCH@`, plain `.kpack` paths. Relative paths are
    /// resolved against the directory of the host binary.
    pub kpack_search_paths: Vec<String>,
    /// The binary's TOC key without the `#N` code-object suffix.
    pub kernel_name: String,
}

fn bad(detail: impl Into<String>) -> Error {
    Error::InvalidMetadata(format!("marker: {}", detail.into()))
}

impl Marker {
    /// Parses marker bytes. The map must hold exactly `kpack_search_paths`
    /// ([str]) and `kernel_name` (str). Trailing zero bytes are accepted
    /// (section padding); anything else after the map is an error.
    pub fn parse(bytes: &[u8]) -> Result<Marker> {
        let mut reader = msgpack::Reader::new(bytes);
        let value = reader.read_value()?;
        let rest = bytes.get(reader.position()..).unwrap_or_default();
        if rest.iter().any(|&b| b != 0) {
            return Err(bad(format!(
                "{} unexpected bytes after the map",
                rest.len()
            )));
        }
        let map = value.map_entries().ok_or_else(|| {
            bad(format!(
                "expected a map with distinct str keys, found {}",
                value.type_name()
            ))
        })?;
        let mut paths = None;
        let mut name = None;
        for (key, v) in map {
            match key {
                "kpack_search_paths" => {
                    let list = v.as_array().ok_or_else(|| {
                        bad(format!(
                            "kpack_search_paths must be an array, found {}",
                            v.type_name()
                        ))
                    })?;
                    let mut out = Vec::with_capacity(list.len());
                    for item in list {
                        let s = item.as_str().ok_or_else(|| {
                            bad(format!(
                                "kpack_search_paths element must be a str, found {}",
                                item.type_name()
                            ))
                        })?;
                        out.push(s.to_owned());
                    }
                    paths = Some(out);
                }
                "kernel_name" => {
                    let s = v.as_str().ok_or_else(|| {
                        bad(format!(
                            "kernel_name must be a str, found {}",
                            v.type_name()
                        ))
                    })?;
                    name = Some(s.to_owned());
                }
                other => return Err(bad(format!("unexpected key {other:?}"))),
            }
        }
        Ok(Marker {
            kpack_search_paths: paths.ok_or_else(|| bad("missing kpack_search_paths"))?,
            kernel_name: name.ok_or_else(|| bad("missing kernel_name"))?,
        })
    }

    /// Encodes the marker: keys in the order `kpack_search_paths`,
    /// `kernel_name`, strings as `str`. Same marker, same bytes.
    pub fn to_msgpack(&self) -> Result<Vec<u8>> {
        let mut b = Vec::new();
        msgpack::write_map_len(&mut b, 2)?;
        msgpack::write_str(&mut b, "kpack_search_paths")?;
        msgpack::write_str_array(&mut b, &self.kpack_search_paths)?;
        msgpack::write_str(&mut b, "kernel_name")?;
        msgpack::write_str(&mut b, &self.kernel_name)?;
        Ok(b)
    }
}
