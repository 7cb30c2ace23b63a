//! Sizes as people read them: one style (IEC, `141.0 MiB`) in every text
//! message of both commands; `--json` carries exact bytes instead.

/// `n` bytes in IEC units with one decimal: `999 B`, `1.5 KiB`,
/// `141.0 MiB`, `1.2 GiB`.
pub fn iec_size(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    // Display only; f64 precision is ample for one decimal.
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `n` and the noun for that many: `1 binary`, `2 binaries`, `0 files`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::{iec_size, plural};

    #[test]
    fn counted_nouns() {
        assert_eq!(plural(1, "binary", "binaries"), "1 binary");
        assert_eq!(plural(0, "file", "files"), "0 files");
        assert_eq!(plural(11, "package", "packages"), "11 packages");
    }

    #[test]
    fn iec_sizes() {
        assert_eq!(iec_size(0), "0 B");
        assert_eq!(iec_size(1023), "1023 B");
        assert_eq!(iec_size(1536), "1.5 KiB");
        assert_eq!(iec_size(147_849_216), "141.0 MiB");
        assert_eq!(iec_size(3 << 30), "3.0 GiB");
        assert_eq!(iec_size(u64::MAX), "16384.0 PiB");
    }
}
