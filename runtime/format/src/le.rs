//! Checked little-endian reads for the binary formats: a read past the end
//! of the slice is `None`, never a value, so a short input cannot pass for
//! a zero field.

fn array<const N: usize>(data: &[u8], at: usize) -> Option<[u8; N]> {
    data.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// The `u16` at byte `at`.
pub(crate) fn u16_at(data: &[u8], at: usize) -> Option<u16> {
    array(data, at).map(u16::from_le_bytes)
}

/// The `u32` at byte `at`.
pub(crate) fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    array(data, at).map(u32::from_le_bytes)
}

/// The `u64` at byte `at`.
pub(crate) fn u64_at(data: &[u8], at: usize) -> Option<u64> {
    array(data, at).map(u64::from_le_bytes)
}

/// The `u32` at file offset `at` (a `u64`, as archive offsets are).
pub(crate) fn u32_at_offset(data: &[u8], at: u64) -> Option<u32> {
    u32_at(data, usize::try_from(at).ok()?)
}

/// The `u64` at file offset `at`.
pub(crate) fn u64_at_offset(data: &[u8], at: u64) -> Option<u64> {
    u64_at(data, usize::try_from(at).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_reads_are_none() {
        let b = [1u8, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(u16_at(&b, 6), Some(0x0807));
        assert_eq!(u16_at(&b, 7), None);
        assert_eq!(u32_at(&b, 4), Some(0x0807_0605));
        assert_eq!(u32_at(&b, 5), None);
        assert_eq!(u64_at(&b, 0), Some(0x0807_0605_0403_0201));
        assert_eq!(u64_at(&b, 1), None);
        assert_eq!(u64_at(&b, usize::MAX), None);
        assert_eq!(u32_at_offset(&b, u64::MAX), None);
    }
}
