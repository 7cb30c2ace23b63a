//! The 24-byte `__CudaFatBinaryWrapper` in `.hipFatBinSegment` (docs/formats.md
//! section 4): one per translation unit, handed to `__hipRegisterFatBinary`.

use crate::{Error, Result};

/// Magic of a wrapper whose `binary` points at an offload bundle ("HIPF").
pub const HIPF_MAGIC: u32 = 0x4849_5046;
/// Magic of a kpack'd wrapper whose `binary` points at the marker ("HIPK").
pub const HIPK_MAGIC: u32 = 0x4B50_4948;
/// Size of one wrapper in bytes.
pub const WRAPPER_SIZE: usize = 24;
/// The only wrapper version in use.
pub const WRAPPER_VERSION: u32 = 1;

/// One fat-binary wrapper, all fields little-endian on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FatbinWrapper {
    /// [`HIPF_MAGIC`] or [`HIPK_MAGIC`].
    pub magic: u32,
    /// Always 1.
    pub version: u32,
    /// Address of the bundle (HIPF) or the marker (HIPK). In a PIE or shared
    /// object the in-file value is usually 0 and a relocation sets it.
    pub binary: u64,
    /// HIPK: low 32 bits hold the wrapper's `co_index`.
    pub reserved1: u64,
}

impl FatbinWrapper {
    /// Parses the first [`WRAPPER_SIZE`] bytes of `bytes`. The magic must be
    /// HIPF or HIPK.
    pub fn parse(bytes: &[u8]) -> Result<FatbinWrapper> {
        let b: &[u8; WRAPPER_SIZE] = bytes
            .get(..WRAPPER_SIZE)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| {
                Error::format(
                    "fat binary wrapper",
                    0,
                    format!("{} bytes, need {WRAPPER_SIZE}", bytes.len()),
                )
            })?;
        let [m0, m1, m2, m3, v0, v1, v2, v3, p0, p1, p2, p3, p4, p5, p6, p7, r0, r1, r2, r3, r4, r5, r6, r7] =
            *b;
        let w = FatbinWrapper {
            magic: u32::from_le_bytes([m0, m1, m2, m3]),
            version: u32::from_le_bytes([v0, v1, v2, v3]),
            binary: u64::from_le_bytes([p0, p1, p2, p3, p4, p5, p6, p7]),
            reserved1: u64::from_le_bytes([r0, r1, r2, r3, r4, r5, r6, r7]),
        };
        if w.magic != HIPF_MAGIC && w.magic != HIPK_MAGIC {
            return Err(Error::format(
                "fat binary wrapper",
                0,
                format!("magic {:#010x} is neither HIPF nor HIPK", w.magic),
            ));
        }
        Ok(w)
    }

    /// Parses a whole `.hipFatBinSegment`: consecutive wrappers, no gaps.
    pub fn parse_all(segment: &[u8]) -> Result<Vec<FatbinWrapper>> {
        if !segment.len().is_multiple_of(WRAPPER_SIZE) {
            return Err(Error::format(
                "fat binary segment",
                0,
                format!(
                    "{} bytes is not a multiple of {WRAPPER_SIZE}",
                    segment.len()
                ),
            ));
        }
        segment
            .chunks_exact(WRAPPER_SIZE)
            .enumerate()
            .map(|(i, chunk)| {
                FatbinWrapper::parse(chunk).map_err(|e| match e {
                    Error::InvalidFormat { what, detail, .. } => Error::InvalidFormat {
                        what,
                        offset: (i * WRAPPER_SIZE) as u64,
                        detail,
                    },
                    other => other,
                })
            })
            .collect()
    }

    /// A kpack'd wrapper pointing at a marker, carrying `co_index`.
    pub fn hipk(marker_address: u64, co_index: u32) -> FatbinWrapper {
        FatbinWrapper {
            magic: HIPK_MAGIC,
            version: WRAPPER_VERSION,
            binary: marker_address,
            reserved1: u64::from(co_index),
        }
    }

    /// True for a HIPF (offload bundle) wrapper.
    pub fn is_hipf(&self) -> bool {
        self.magic == HIPF_MAGIC
    }

    /// True for a HIPK (kpack'd) wrapper.
    pub fn is_hipk(&self) -> bool {
        self.magic == HIPK_MAGIC
    }

    /// The `co_index` a HIPK wrapper carries (low 32 bits of `reserved1`).
    pub fn co_index(&self) -> u32 {
        (self.reserved1 & 0xffff_ffff) as u32
    }

    /// The 24 on-disk bytes.
    pub fn to_bytes(&self) -> [u8; WRAPPER_SIZE] {
        let mut out = [0u8; WRAPPER_SIZE];
        out[0..4].copy_from_slice(&self.magic.to_le_bytes());
        out[4..8].copy_from_slice(&self.version.to_le_bytes());
        out[8..16].copy_from_slice(&self.binary.to_le_bytes());
        out[16..24].copy_from_slice(&self.reserved1.to_le_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_bytes_spell_hipf_and_hipk() {
        assert_eq!(&HIPF_MAGIC.to_le_bytes(), b"FPIH");
        assert_eq!(&HIPK_MAGIC.to_le_bytes(), b"HIPK");
    }

    #[test]
    fn round_trip() {
        let w = FatbinWrapper::hipk(0x1234_5678_9abc, 7);
        let bytes = w.to_bytes();
        assert_eq!(&bytes[..4], b"HIPK");
        assert_eq!(FatbinWrapper::parse(&bytes).ok(), Some(w));
        assert_eq!(w.co_index(), 7);
        assert!(w.is_hipk() && !w.is_hipf());
    }

    #[test]
    fn parses_clang_wrapper_bytes() {
        // A clang-emitted wrapper in a non-PIE executable: HIPF, version 1,
        // the bundle address, reserved 0.
        let mut b = Vec::new();
        b.extend_from_slice(&[0x46, 0x50, 0x49, 0x48, 1, 0, 0, 0]);
        b.extend_from_slice(&0x40_3000u64.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        let w = FatbinWrapper::parse(&b).ok();
        assert_eq!(
            w,
            Some(FatbinWrapper {
                magic: HIPF_MAGIC,
                version: 1,
                binary: 0x40_3000,
                reserved1: 0
            })
        );
    }

    #[test]
    fn rejects_short_and_bad_magic() {
        let good = FatbinWrapper::hipk(1, 2).to_bytes();
        for n in 0..WRAPPER_SIZE {
            assert!(FatbinWrapper::parse(&good[..n]).is_err());
        }
        let mut bad = good;
        bad[0] = b'X';
        assert!(FatbinWrapper::parse(&bad).is_err());
        assert!(FatbinWrapper::parse_all(&good[..20]).is_err());
        let mut two = good.to_vec();
        two.extend_from_slice(&bad);
        match FatbinWrapper::parse_all(&two) {
            Err(Error::InvalidFormat { offset, .. }) => assert_eq!(offset, 24),
            other => panic!("{other:?}"),
        }
        assert_eq!(FatbinWrapper::parse_all(&[]).ok(), Some(vec![]));
    }
}
