//! A `.kpack` with a million TOC entries opens, and every entry is found
//! (correctness; how long it takes is `examples/bench_toc.rs`'s business).

use rocm_kpack_testkit::toc as gen;

use rocm_kpack_format::archive::Archive;

#[test]
fn a_million_entry_toc_opens_and_every_entry_is_found() {
    let n = 1_000_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.kpack");
    std::fs::write(&path, gen::many_entries(n)).unwrap();
    let archive = Archive::open(&path).expect("opens");
    assert_eq!(archive.entries().count(), n);
    for i in (0..n).step_by(997).chain([n - 1]) {
        let e = archive.entry(&gen::binary_key(i), "gfx90a").expect("entry");
        assert_eq!(e.ordinal, 0);
    }
    assert!(archive.entry(&gen::binary_key(n), "gfx90a").is_none());
    assert_eq!(
        archive.kernel(&gen::binary_key(n / 2), "gfx90a").unwrap(),
        gen::BLOB
    );
}

#[test]
fn a_repeated_key_is_still_refused_in_a_large_toc() {
    let mut bytes = gen::many_entries(5000);
    // Make the last binary key equal to the first: same length, so only
    // the text changes.
    let first = gen::binary_key(0);
    let last = gen::binary_key(4999);
    let at = bytes
        .windows(last.len())
        .rposition(|w| w == last.as_bytes())
        .unwrap();
    bytes[at..at + first.len()].copy_from_slice(first.as_bytes());
    let err = Archive::from_bytes(bytes).expect_err("duplicate key");
    assert!(err.to_string().contains("repeated"), "{err}");
}

// FIFOs, devices and sparse files are Unix notions (this file also runs
// under Wine).
#[cfg(unix)]
#[test]
fn fifos_devices_and_sparse_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.kpack");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let err = Archive::open(&fifo).expect_err("fifo");
    assert!(err.to_string().contains("FIFO"), "{err}");
    let err = Archive::open(std::path::Path::new("/dev/zero")).expect_err("device");
    assert!(err.to_string().contains("device"), "{err}");
    // A real archive header, then a 2 GiB hole.
    let sparse = dir.path().join("sparse.kpack");
    std::fs::write(&sparse, gen::many_entries(1)).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&sparse)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let err = Archive::open(&sparse).expect_err("sparse");
    assert!(err.to_string().contains("sparse"), "{err}");
}
