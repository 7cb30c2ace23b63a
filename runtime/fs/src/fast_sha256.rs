//! SHA-256 through ring (the TLS stack's crypto, already linked into the
//! fetcher), behind `sha2`'s `Digest` interface so that every generic
//! hashing helper of this crate takes it unchanged.

use sha2::digest::consts::U32;
use sha2::digest::{FixedOutput, HashMarker, Output, OutputSizeUser, Update};

/// SHA-256 computed by ring: the same digests as `sha2::Sha256`.
#[derive(Clone)]
pub struct Sha256(ring::digest::Context);

impl Default for Sha256 {
    fn default() -> Self {
        Sha256(ring::digest::Context::new(&ring::digest::SHA256))
    }
}

impl std::fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sha256 { .. }")
    }
}

impl HashMarker for Sha256 {}

impl OutputSizeUser for Sha256 {
    type OutputSize = U32;
}

impl Update for Sha256 {
    fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }
}

impl FixedOutput for Sha256 {
    fn finalize_into(self, out: &mut Output<Self>) {
        out.copy_from_slice(self.0.finish().as_ref());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::Sha256;
    use sha2::Digest;

    /// Same digest as `sha2` for lengths around the 64-byte block and its
    /// padding boundary (55, 56, 64 bytes), and for a long input fed in
    /// uneven pieces, so a wrong buffering of partial blocks shows.
    #[test]
    fn agrees_with_sha2() {
        let data: Vec<u8> = (0..3_000_017u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for len in [0, 1, 55, 56, 63, 64, 65, 127, 128, 1000, data.len()] {
            let want: [u8; 32] = sha2::Sha256::digest(&data[..len]).into();
            let got: [u8; 32] = Sha256::digest(&data[..len]).into();
            assert_eq!(got, want, "{len} bytes at once");
            let mut h = Sha256::new();
            let mut rest = &data[..len];
            let mut step = 1;
            while !rest.is_empty() {
                let (a, b) = rest.split_at(step.min(rest.len()));
                h.update(a);
                rest = b;
                step = step * 7 % 100_003 + 1;
            }
            let chunked: [u8; 32] = h.clone().finalize().into();
            assert_eq!(chunked, want, "{len} bytes in pieces");
        }
        // FIPS 180-2's "abc" example.
        assert_eq!(
            hex_of(&Sha256::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    fn hex_of(d: &[u8]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }
}
