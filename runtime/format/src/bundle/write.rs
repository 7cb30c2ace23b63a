//! The bundle and CCOB writers (feature `write_core`): what
//! `clang-offload-bundler` writes, for the preload library, the tests and
//! the fixtures.

use md5::{Digest, Md5};

use super::{
    CcobMethod, BUNDLE_HEADER_LEN, BUNDLE_MAGIC, CCOB_MAGIC, ENTRY_FIXED_LEN, HIP_BUNDLE_ALIGN,
};
use crate::{Error, Result};

/// Writes an uncompressed bundle the way `clang-offload-bundler -type=o
/// -bundle-align=4096` does for HIP: header, then each entry's bytes at the
/// next multiple of 4096 (zero padding), no padding after the last one.
/// Entries are written in the given order; clang lists the host entry first.
pub fn write_bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
    write_bundle_aligned(entries, HIP_BUNDLE_ALIGN)
}

/// [`write_bundle`] with another alignment (1 = packed).
pub fn write_bundle_aligned(entries: &[(&str, &[u8])], align: u64) -> Vec<u8> {
    let align = align.max(1);
    let header_len: u64 = BUNDLE_HEADER_LEN as u64
        + entries
            .iter()
            .map(|(t, _)| (ENTRY_FIXED_LEN + t.len()) as u64)
            .sum::<u64>();
    let mut offsets = Vec::with_capacity(entries.len());
    let mut cursor = header_len;
    for (_, data) in entries {
        cursor = cursor.div_ceil(align) * align;
        offsets.push(cursor);
        cursor += data.len() as u64;
    }
    let mut out = Vec::with_capacity(cursor as usize);
    out.extend_from_slice(BUNDLE_MAGIC);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for ((triple, data), offset) in entries.iter().zip(&offsets) {
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
        out.extend_from_slice(&(triple.len() as u64).to_le_bytes());
        out.extend_from_slice(triple.as_bytes());
    }
    for ((_, data), &offset) in entries.iter().zip(&offsets) {
        out.resize(offset as usize, 0);
        out.extend_from_slice(data);
    }
    out
}

/// zstd level clang's bundler uses by default (with long-distance matching).
const CLANG_ZSTD_LEVEL: i32 = 3;

/// Compresses an uncompressed bundle into a CCOB of `version` (1, 2 or 3)
/// with `method`, header fields computed like clang-offload-bundler.
pub fn compress_ccob(uncompressed: &[u8], version: u16, method: CcobMethod) -> Result<Vec<u8>> {
    let header_len: usize = match version {
        1 => 20,
        2 => 24,
        3 => 32,
        v => {
            return Err(Error::InvalidArgument(format!(
                "CCOB version {v} (supported: 1, 2, 3)"
            )))
        }
    };
    let size = uncompressed.len() as u64;
    if version < 3 && size > u64::from(u32::MAX) {
        return Err(Error::InvalidArgument(format!(
            "CCOB v{version} cannot describe {size} uncompressed bytes (u32 limit)"
        )));
    }
    let compressed = match method {
        CcobMethod::Zstd => {
            // Level 3 with long-distance matching, like clang-offload-bundler:
            // gives byte-identical frames (one frame, content size, no checksum).
            let zerr = |e: std::io::Error| Error::Decompression(format!("zstd compression: {e}"));
            let mut c = zstd::bulk::Compressor::new(CLANG_ZSTD_LEVEL).map_err(zerr)?;
            c.set_parameter(zstd::zstd_safe::CParameter::EnableLongDistanceMatching(
                true,
            ))
            .map_err(zerr)?;
            c.compress(uncompressed).map_err(zerr)?
        }
        CcobMethod::Zlib => {
            let mut enc =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            std::io::Write::write_all(&mut enc, uncompressed)
                .and_then(|_| enc.finish())
                .map_err(|e| Error::Decompression(format!("zlib compression: {e}")))?
        }
    };
    let total = (header_len + compressed.len()) as u64;
    if version == 2 && total > u64::from(u32::MAX) {
        return Err(Error::InvalidArgument(format!(
            "CCOB v2 cannot describe a total size of {total} bytes (u32 limit)"
        )));
    }
    let digest = Md5::digest(uncompressed);
    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(CCOB_MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&method.code().to_le_bytes());
    match version {
        1 => out.extend_from_slice(&(size as u32).to_le_bytes()),
        2 => {
            out.extend_from_slice(&(total as u32).to_le_bytes());
            out.extend_from_slice(&(size as u32).to_le_bytes());
        }
        _ => {
            out.extend_from_slice(&total.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
        }
    }
    let low = digest
        .get(..8)
        .ok_or_else(|| Error::InvalidArgument("short MD5 digest".into()))?;
    out.extend_from_slice(low);
    out.extend_from_slice(&compressed);
    Ok(out)
}
