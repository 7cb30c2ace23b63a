//! Archives with many TOC entries, built directly as bytes (a writer run
//! per entry would measure the writer): `n` binary keys, one arch key
//! each, all pointing at one 16-byte blob of a `none` archive. For the TOC
//! benchmark (`runtime/format/examples/bench_toc.rs`) and the tests that
//! open a million-entry archive.

use rocm_kpack_format::msgpack::{encode, Value};

/// The 16-byte code object every entry points at.
pub const BLOB: &[u8; 16] = b"code object here";

/// The binary key of entry `i`.
pub fn binary_key(i: usize) -> String {
    format!("lib/libbench{:07}.so#0", i)
}

/// A valid `none` archive with `n` TOC entries (arch `gfx90a`).
pub fn many_entries(n: usize) -> Vec<u8> {
    let s = |x: &str| Value::String(x.into());
    let entry = Value::Map(vec![
        (s("type"), s("hsaco")),
        (s("ordinal"), Value::from(0)),
        (s("original_size"), Value::from(BLOB.len() as u64)),
    ]);
    let toc = (0..n)
        .map(|i| {
            (
                s(&binary_key(i)),
                Value::Map(vec![(s("gfx90a"), entry.clone())]),
            )
        })
        .collect();
    let header = 64u64;
    let top = Value::Map(vec![
        (s("format_version"), Value::from(1)),
        (s("group_name"), s("bench")),
        (s("gfx_arch_family"), s("gfx90a")),
        (s("gfx_arches"), Value::Array(vec![s("gfx90a")])),
        (s("toc"), Value::Map(toc)),
        (s("compression_scheme"), s("none")),
        (
            s("blobs"),
            Value::Array(vec![Value::Map(vec![
                (s("offset"), Value::from(header)),
                (s("size"), Value::from(BLOB.len() as u64)),
            ])]),
        ),
    ]);
    let toc_bytes = encode(&top).expect("encodable TOC");
    let mut out = Vec::with_capacity(80 + toc_bytes.len());
    out.extend_from_slice(b"KPAK");
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&(header + BLOB.len() as u64).to_le_bytes());
    out.resize(64, 0);
    out.extend_from_slice(BLOB);
    out.extend_from_slice(&toc_bytes);
    out
}
