//! Shared by the archive, marker and manifest tests: the reference test
//! vectors (embedded so the tests need nothing outside the repository),
//! the kernels they contain, and small helpers.
#![allow(dead_code, clippy::unwrap_used)]

use rocm_kpack_format::archive::{ArchiveWriter, CompressionScheme};
use rocm_kpack_format::manifest::{Manifest, ManifestFile};
use rocm_kpack_format::marker::Marker;
use rocm_kpack_format::msgpack::{self, Value};
use std::io::Cursor;

/// `test_noop.kpack` as written by the reference Python writer (903 bytes).
pub const NOOP_HEX: &[&str] = &[
    "4b50414b010000003a020000000000000000000000000000000000000000000000000000000000000000000000000000",
    "000000000000000000000000000000004b45524e454c315f4746583930305f4441544100000000000000000000000000",
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000000000000000000000000000000000000000000000004b45524e454c325f47",
    "46583930365f444154410000000000000000000000000000000000000000000000000000000000000000000000000000",
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000004b45524e454c335f4150505f474658393030ffffffffffffffffffffffff",
    "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff87ae666f726d",
    "61745f76657273696f6e01aa67726f75705f6e616d65a474657374af6766785f617263685f66616d696c79a767667839",
    "303058aa6766785f61726368657392a6676678393030a6676678393036a3746f6382b06c69622f6c6962746573742e73",
    "6f233082a667667839303083a474797065a5687361636fa76f7264696e616c00ad6f726967696e616c5f73697a6577a6",
    "67667839303683a474797065a5687361636fa76f7264696e616c01ad6f726967696e616c5f73697a65ccdbad62696e2f",
    "74657374617070233081a667667839303083a474797065a5687361636fa76f7264696e616c02ad6f726967696e616c5f",
    "73697a65cca8b2636f6d7072657373696f6e5f736368656d65a46e6f6e65a5626c6f62739382a66f666673657440a473",
    "697a657782a66f6666736574ccb7a473697a65ccdb82a66f6666736574cd0192a473697a65cca8",
];

/// `test_zstd.kpack` as written by the reference Python writer (518 bytes).
pub const ZSTD_HEX: &[&str] = &[
    "4b50414b01000000c6000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "00000000000000000000000000000000030000002900000028b52ffd60fb02fd0000a84849505f4b45524e454c5f4746",
    "58313130305f41420200f04015e055c0042900000028b52ffd606b01fd0000a84849505f4b45524e454c5f4746583131",
    "30315f585902002840155054c0042400000028b52ffd60fa02d5000098544553545f4150505f4b45524e454c5f5f5f42",
    "0100c957200c88ae666f726d61745f76657273696f6e01aa67726f75705f6e616d65a474657374af6766785f61726368",
    "5f66616d696c79a767667831313058aa6766785f61726368657392a767667831313030a767667831313031a3746f6382",
    "af6c69622f6c69626869702e736f233082a76766783131303083a474797065a5687361636fa76f7264696e616c00ad6f",
    "726967696e616c5f73697a65cd03fba76766783131303183a474797065a5687361636fa76f7264696e616c01ad6f7269",
    "67696e616c5f73697a65cd026bad62696e2f68697074657374233081a76766783131303083a474797065a5687361636f",
    "a76f7264696e616c02ad6f726967696e616c5f73697a65cd03fab2636f6d7072657373696f6e5f736368656d65af7a73",
    "74642d7065722d6b65726e656cab7a7374645f6f666673657440a97a7374645f73697a65cc86",
];

fn unhex(parts: &[&str]) -> Vec<u8> {
    hex::decode(parts.concat()).unwrap()
}

/// Bytes of `test_noop.kpack`.
pub fn noop_bytes() -> Vec<u8> {
    unhex(NOOP_HEX)
}

/// Bytes of `test_zstd.kpack`.
pub fn zstd_bytes() -> Vec<u8> {
    unhex(ZSTD_HEX)
}

fn cat(prefix: &[u8], parts: &[(u8, usize)]) -> Vec<u8> {
    let mut v = prefix.to_vec();
    for &(byte, n) in parts {
        v.extend(std::iter::repeat_n(byte, n));
    }
    v
}

/// (binary key, arch, bytes) of `test_noop.kpack`, in docs/formats.md order.
pub fn noop_kernels() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    vec![
        (
            "lib/libtest.so#0",
            "gfx900",
            cat(b"KERNEL1_GFX900_DATA", &[(0, 100)]),
        ),
        (
            "lib/libtest.so#0",
            "gfx906",
            cat(b"KERNEL2_GFX906_DATA", &[(0, 200)]),
        ),
        (
            "bin/testapp#0",
            "gfx900",
            cat(b"KERNEL3_APP_GFX900", &[(0xff, 150)]),
        ),
    ]
}

/// (binary key, arch, bytes) of `test_zstd.kpack`, in docs/formats.md order.
pub fn zstd_kernels() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    vec![
        (
            "lib/libhip.so#0",
            "gfx1100",
            cat(b"HIP_KERNEL_GFX1100_", &[(b'A', 500), (b'B', 500)]),
        ),
        (
            "lib/libhip.so#0",
            "gfx1101",
            cat(b"HIP_KERNEL_GFX1101_", &[(b'X', 300), (b'Y', 300)]),
        ),
        (
            "bin/hiptest#0",
            "gfx1100",
            cat(b"TEST_APP_KERNEL___", &[(0x42, 1000)]),
        ),
    ]
}

/// Writes an archive into memory.
pub fn write_archive(
    scheme: CompressionScheme,
    group: &str,
    family: &str,
    kernels: &[(&str, &str, Vec<u8>)],
) -> Vec<u8> {
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new()), group, family, scheme, 3).unwrap();
    for (b, a, d) in kernels {
        w.add_kernel(b, a, d.clone()).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// A zstd archive written by us, with a shared (deduplicated) blob.
pub fn our_zstd_archive() -> Vec<u8> {
    let mut kernels = zstd_kernels();
    kernels.push(("bin/hiptest#1", "gfx1101", kernels[0].2.clone()));
    write_archive(
        CompressionScheme::ZstdPerKernel,
        "test",
        "gfx110X",
        &kernels,
    )
}

/// A marker as the splitter writes it.
pub fn sample_marker() -> Marker {
    Marker {
        kpack_search_paths: vec![
            "../.kpack/rand_lib.kpm".into(),
            "../.kpack/rand_lib_@GFXARCH@.kpack".into(),
        ],
        kernel_name: "lib/librocrand.so.1.1".into(),
    }
}

/// A v1 manifest with two archives.
pub fn sample_manifest() -> Manifest {
    Manifest {
        component: "rand_lib".into(),
        kpack_files: vec![
            ManifestFile {
                filename: "rand_lib_gfx110X.kpack".into(),
                family: "gfx110X".into(),
                architectures: vec!["gfx1100".into(), "gfx1101".into()],
                size: 518,
                sha256: Some([0xab; 32]),
                transport: None,
            },
            ManifestFile {
                filename: "rand_lib_gfx90a.kpack".into(),
                family: "gfx90a".into(),
                architectures: vec!["gfx90a:xnack+".into(), "gfx90a:xnack-".into()],
                size: 1 << 20,
                sha256: Some([0x01; 32]),
                transport: None,
            },
        ],
        database_files: Vec::new(),
        prefix_path: None,
    }
}

/// A legacy-schema manifest: `kpack_files` keyed by arch.
pub fn legacy_manifest_bytes() -> Vec<u8> {
    let s = |x: &str| Value::from(x);
    let files = [
        ("gfx1100", "rand_lib_gfx110X.kpack", 518u64),
        ("gfx1101", "rand_lib_gfx110X.kpack", 518),
        ("gfx942", "rand_lib_gfx942.kpack", 4096),
    ]
    .into_iter()
    .map(|(arch, file, size)| {
        (
            s(arch),
            Value::Map(vec![
                (s("file"), s(file)),
                (s("size"), Value::from(size)),
                (s("kernel_count"), Value::from(7)),
            ]),
        )
    })
    .collect();
    msgpack::encode(&Value::Map(vec![
        (s("format_version"), Value::from(1)),
        (s("component_name"), s("rand_lib")),
        (s("prefix"), s("math-libs/rocRAND/stage")),
        (s("kpack_files"), Value::Map(files)),
    ]))
    .unwrap()
}

/// `v[key]` if `v` is a map holding `key`.
pub trait ValueExt {
    fn get(&self, key: &str) -> Option<&Value>;
}

impl ValueExt for Value {
    fn get(&self, key: &str) -> Option<&Value> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
    }
}

/// SplitMix64: a tiny seeded generator, so random tests replay exactly.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
