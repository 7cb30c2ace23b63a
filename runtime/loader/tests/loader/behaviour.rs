//! The loader's behaviour table through the Rust API (`rocm_kpack_loader::loader`),
//! with explicit configurations so nothing depends on the process
//! environment. The same table runs through the C ABI in runtime/capi/src/tests.rs.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocm_kpack_format::archive::CompressionScheme::{None as Plain, ZstdPerKernel as Zstd};
use rocm_kpack_loader::loader::{Cache, LoaderConfig};
use rocm_kpack_loader::{Error, ErrorCode};
use rocm_kpack_testkit::layout::*;

fn cache() -> Cache {
    Cache::with_config(LoaderConfig::default())
}

fn load(cache: &Cache, layout: &Layout, co: u32, arches: &[&str]) -> Result<Vec<u8>, Error> {
    cache
        .load_code_object(&layout.marker(), &layout.binary(), co, arches)
        .map(|c| c.data)
}

fn code(r: Result<Vec<u8>, Error>) -> ErrorCode {
    match r {
        Ok(_) => ErrorCode::Success,
        Err(e) => e.code(),
    }
}

/// gfx110X family archive with two code objects, listed in the manifest.
fn family_layout() -> (Layout, PathBuf) {
    let l = Layout::new();
    let a = l.archive(
        "gfx110X",
        Zstd,
        &[
            kernel(&key(0), "gfx1100", b"co0 gfx1100".to_vec()),
            kernel(&key(0), "gfx1101", b"co0 gfx1101".to_vec()),
            kernel(&key(1), "gfx1100", b"co1 gfx1100".to_vec()),
        ],
    );
    l.manifest(&[(&a, "gfx110X", &["gfx1100", "gfx1101"])]);
    (l, a)
}

#[test]
fn manifest_resolves_family_archive() {
    let (l, a) = family_layout();
    let c = cache();
    let got = c
        .load_code_object(&l.marker(), &l.binary(), 1, &["gfx1100"])
        .expect("load");
    assert_eq!(got.data, b"co1 gfx1100");
    assert_eq!(got.arch, "gfx1100");
    assert_eq!(
        fs::canonicalize(&got.archive_path).ok(),
        fs::canonicalize(&a).ok()
    );
    assert_eq!(load(&c, &l, 0, &["gfx1101"]).expect("load"), b"co0 gfx1101");
    // One archive, opened once, shared by both requests.
    assert_eq!(c.open_archive_count(), 1);
}

#[test]
fn missing_manifest_falls_through_to_the_pattern() {
    let l = Layout::new();
    l.archive(
        "gfx1100",
        Plain,
        &[kernel(&key(0), "gfx1100", b"per-target".to_vec())],
    );
    assert_eq!(
        load(&cache(), &l, 0, &["gfx1100"]).expect("load"),
        b"per-target"
    );
}

#[test]
fn per_processor_archives_are_found_through_the_pattern_alone() {
    // The splitter's layout (docs/formats.md 2.4): one archive per processor
    // holding every feature variant, in its family's tree, and one per
    // generic ISA. AMD's loader never reads the manifest, so the pattern
    // alone must find them: `gfx90a:xnack-` expands to
    // `foo_gfx90a:xnack-.kpack` (absent), then `foo_gfx90a.kpack`.
    let l = Layout::new();
    write_archive(
        &l.kpack("foo_gfx90a.kpack"),
        COMPONENT,
        "gfx90X",
        Zstd,
        &[
            kernel(&key(0), "gfx90a:xnack+", b"xnack on".to_vec()),
            kernel(&key(0), "gfx90a:xnack-", b"xnack off".to_vec()),
        ],
    );
    write_archive(
        &l.kpack("foo_gfx11-generic.kpack"),
        COMPONENT,
        "gfx11-generic",
        Zstd,
        &[kernel(&key(0), "gfx11-generic", b"generic".to_vec())],
    );
    let c = cache();
    assert_eq!(
        load(&c, &l, 0, &["gfx90a:xnack-"]).expect("xnack-"),
        b"xnack off"
    );
    assert_eq!(
        load(&c, &l, 0, &["gfx90a:sramecc+:xnack+"]).expect("xnack+"),
        b"xnack on"
    );
    // No feature-free build: a device that has not settled xnack finds none.
    assert_eq!(code(load(&c, &l, 0, &["gfx90a"])), ErrorCode::ArchNotFound);
    // A processor without native code falls back to its generic ISA's archive.
    assert_eq!(
        load(&c, &l, 0, &["gfx1151", "gfx11-generic"]).expect("generic"),
        b"generic"
    );
    // A manifest that lists only other archives (the last of several shards
    // overlaid) does not hide them.
    let other = l.kpack("foo_gfx1030.kpack");
    write_archive(
        &other,
        COMPONENT,
        "gfx103X",
        Zstd,
        &[kernel(&key(0), "gfx1030", b"rdna2".to_vec())],
    );
    l.manifest(&[(&other, "gfx103X", &["gfx1030"])]);
    let c = cache();
    assert_eq!(
        load(&c, &l, 0, &["gfx90a:xnack-"]).expect("xnack- with manifest"),
        b"xnack off"
    );
    assert_eq!(
        load(&c, &l, 0, &["gfx1100", "gfx11-generic"]).expect("generic with manifest"),
        b"generic"
    );
    assert_eq!(load(&c, &l, 0, &["gfx1030"]).expect("listed"), b"rdna2");
}

#[test]
fn stale_manifest_falls_through_to_the_pattern() {
    // The manifest names an archive that is gone, and claims gfx1100 for an
    // archive that does not hold it: both fall through to foo_gfx1100.kpack.
    let l = Layout::new();
    let other = l.archive("gfx90X", Plain, &[kernel(&key(0), "gfx90a", b"x".to_vec())]);
    let gone = l.kpack("foo_gone.kpack");
    l.archive(
        "gfx1100",
        Plain,
        &[kernel(&key(0), "gfx1100", b"from pattern".to_vec())],
    );
    fs::write(&gone, b"").expect("placeholder");
    l.manifest(&[
        (&gone, "gfx110X", &["gfx1100"]),
        (&other, "gfx90X", &["gfx1100", "gfx90a"]),
    ]);
    fs::remove_file(&gone).expect("rm");
    assert_eq!(
        load(&cache(), &l, 0, &["gfx1100"]).expect("load"),
        b"from pattern"
    );
    // A manifest that is not a manifest is skipped the same way.
    fs::write(l.kpack("foo.kpm"), b"\xc1garbage").expect("write");
    assert_eq!(
        load(&cache(), &l, 0, &["gfx1100"]).expect("load"),
        b"from pattern"
    );
}

#[test]
fn archive_without_the_arch_is_arch_not_found() {
    let (l, _) = family_layout();
    let err = load(&cache(), &l, 0, &["gfx90a"]).expect_err("no gfx90a");
    assert_eq!(err.code(), ErrorCode::ArchNotFound);
    match err {
        Error::ArchNotFound { wanted, available } => {
            assert_eq!(wanted, vec!["gfx90a"]);
            assert_eq!(available, vec!["gfx1100", "gfx1101"]);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn manifest_listing_a_missing_archive_is_archive_not_found() {
    // The manifest says gfx1100 exists, in an archive that is not installed
    // (a device package missing): that is a missing archive, not a missing arch.
    let (l, a) = family_layout();
    fs::remove_file(&a).expect("rm");
    assert_eq!(
        code(load(&cache(), &l, 0, &["gfx1100"])),
        ErrorCode::ArchiveNotFound
    );
    // ...while an arch the manifest does not list is a missing arch.
    assert_eq!(
        code(load(&cache(), &l, 0, &["gfx90a"])),
        ErrorCode::ArchNotFound
    );
}

#[test]
fn nothing_openable_is_archive_not_found_listing_the_paths() {
    let l = Layout::new();
    let err = load(&cache(), &l, 0, &["gfx1100"]).expect_err("nothing there");
    let Error::ArchiveNotFound { searched } = err else {
        panic!("unexpected {err:?}");
    };
    let text = searched.join("\n");
    assert!(text.contains("foo.kpm"), "{text}");
    assert!(text.contains("foo_gfx1100.kpack"), "{text}");
    // A corrupt archive is skipped, and the reason is kept.
    fs::write(l.kpack("foo_gfx1100.kpack"), b"KPAK\x01\0\0\0garbage").expect("write");
    let err = load(&cache(), &l, 0, &["gfx1100"]).expect_err("corrupt");
    let Error::ArchiveNotFound { searched } = err else {
        panic!("unexpected {err:?}");
    };
    assert!(
        searched.iter().any(|s| s.contains("foo_gfx1100.kpack (")),
        "{searched:?}"
    );
}

#[test]
fn xnack_device_uses_plain_code_object() {
    let l = Layout::new();
    l.archive(
        "gfx90a",
        Plain,
        &[kernel(&key(0), "gfx90a", b"plain".to_vec())],
    );
    let c = cache();
    for device in ["gfx90a:xnack+", "gfx90a:xnack-", "gfx90a"] {
        let got = c
            .load_code_object(&l.marker(), &l.binary(), 0, &[device])
            .expect(device);
        assert_eq!(got.data, b"plain");
        assert_eq!(got.arch, "gfx90a");
    }
}

#[test]
fn feature_code_object_needs_the_same_setting() {
    let l = Layout::new();
    // Only an xnack+ build, installed under the processor name the way
    // device packages do.
    l.archive(
        "gfx90a",
        Plain,
        &[kernel(&key(0), "gfx90a:xnack+", b"xnack on".to_vec())],
    );
    let c = cache();
    assert_eq!(
        load(&c, &l, 0, &["gfx90a:xnack+"]).expect("same setting"),
        b"xnack on"
    );
    assert_eq!(
        code(load(&c, &l, 0, &["gfx90a:xnack-"])),
        ErrorCode::ArchNotFound
    );
    assert_eq!(code(load(&c, &l, 0, &["gfx90a"])), ErrorCode::ArchNotFound);
}

#[test]
fn most_specific_variant_wins_over_archive_order() {
    let l = Layout::new();
    let generic = l.archive(
        "gfx942",
        Plain,
        &[kernel(&key(0), "gfx942", b"any".to_vec())],
    );
    let specific = l.archive(
        "gfx94X",
        Plain,
        &[kernel(&key(0), "gfx942:sramecc+", b"sramecc on".to_vec())],
    );
    // The manifest lists the less specific archive first.
    l.manifest(&[
        (&generic, "gfx942", &["gfx942"]),
        (&specific, "gfx94X", &["gfx942:sramecc+"]),
    ]);
    let got = cache()
        .load_code_object(&l.marker(), &l.binary(), 0, &["gfx942:sramecc+:xnack-"])
        .expect("load");
    assert_eq!(got.data, b"sramecc on");
    assert_eq!(got.arch, "gfx942:sramecc+");
}

#[test]
fn triple_prefix_is_accepted() {
    let (l, _) = family_layout();
    assert_eq!(
        load(&cache(), &l, 0, &["amdgcn-amd-amdhsa--gfx1101"]).expect("load"),
        b"co0 gfx1101"
    );
}

#[test]
fn arch_priority_comes_before_archive_order() {
    let l = Layout::new();
    let first = l.archive(
        "gfx90X",
        Plain,
        &[kernel(&key(0), "gfx906", b"906".to_vec())],
    );
    let second = l.archive(
        "gfx110X",
        Plain,
        &[kernel(&key(0), "gfx1100", b"1100".to_vec())],
    );
    l.manifest(&[
        (&first, "gfx90X", &["gfx906"]),
        (&second, "gfx110X", &["gfx1100"]),
    ]);
    let c = cache();
    assert_eq!(
        load(&c, &l, 0, &["gfx1100", "gfx906"]).expect("load"),
        b"1100"
    );
    assert_eq!(
        load(&c, &l, 0, &["gfx906", "gfx1100"]).expect("load"),
        b"906"
    );
    // Generic ISAs are entries of their own, after the native one.
    let g = Layout::new();
    g.archive(
        "gfx11-generic",
        Zstd,
        &[kernel(&key(0), "gfx11-generic", b"generic".to_vec())],
    );
    assert_eq!(
        load(&c, &g, 0, &["gfx1100", "gfx11-generic"]).expect("load"),
        b"generic"
    );
    // Nothing for gfx1100 alone: no archive to open at all.
    assert_eq!(
        code(load(&c, &g, 0, &["gfx1100"])),
        ErrorCode::ArchiveNotFound
    );
}

#[test]
fn a_kernel_missing_from_the_first_archive_comes_from_the_next() {
    // Both archives hold gfx1100; the first lacks this binary's kernel, so
    // the loader falls through to the second (AMD's loader since
    // rocm-systems #9953).
    let l = Layout::new();
    let a = l.archive(
        "a",
        Plain,
        &[kernel("lib/other.so#0", "gfx1100", b"other".to_vec())],
    );
    let b = l.archive("b", Plain, &[kernel(&key(0), "gfx1100", b"ours".to_vec())]);
    l.manifest(&[(&a, "a", &["gfx1100"]), (&b, "b", &["gfx1100"])]);
    let got = cache()
        .load_code_object(&l.marker(), &l.binary(), 0, &["gfx1100"])
        .expect("falls through to b");
    assert_eq!(got.data, b"ours");
    assert_eq!(got.archive_path.file_name(), b.file_name());
    // co_index selects the key: #3 exists nowhere, after every archive.
    let (f, _) = family_layout();
    assert_eq!(
        code(load(&cache(), &f, 3, &["gfx1100"])),
        ErrorCode::KernelNotFound
    );
}

#[test]
fn corrupt_payload_of_the_deciding_archive_is_reported() {
    let l = Layout::new();
    let a = l.archive(
        "gfx1100",
        Zstd,
        &[kernel(&key(0), "gfx1100", vec![7u8; 4096])],
    );
    corrupt_first_frame(&a);
    assert_eq!(
        code(load(&cache(), &l, 0, &["gfx1100"])),
        ErrorCode::DecompressionFailed
    );
}

#[test]
fn path_override_replaces_every_search_path() {
    let (l, _) = family_layout();
    let elsewhere = tempfile::tempdir().expect("tmp");
    let other = elsewhere.path().join("x.kpack");
    write_archive(
        &other,
        "x",
        "gfx1100",
        Plain,
        &[kernel(&key(0), "gfx1100", b"override".to_vec())],
    );
    let c = Cache::with_config(LoaderConfig {
        path_override: Some(vec![PathBuf::from("/nonexistent/a.kpack"), other.clone()]),
        path_prefix: vec![l.kpack("foo_gfx110X.kpack")],
        ..LoaderConfig::default()
    });
    assert_eq!(load(&c, &l, 0, &["gfx1100"]).expect("load"), b"override");
    // The marker's archives are not consulted: gfx1101 is only there.
    assert_eq!(code(load(&c, &l, 0, &["gfx1101"])), ErrorCode::ArchNotFound);
}

#[test]
fn path_prefix_is_searched_first() {
    let (l, _) = family_layout();
    let elsewhere = tempfile::tempdir().expect("tmp");
    let other = elsewhere.path().join("x.kpack");
    write_archive(
        &other,
        "x",
        "gfx1100",
        Plain,
        &[kernel(&key(0), "gfx1100", b"prefix".to_vec())],
    );
    let c = Cache::with_config(LoaderConfig {
        path_prefix: vec![PathBuf::from("/nonexistent/p.kpack"), other],
        ..LoaderConfig::default()
    });
    assert_eq!(load(&c, &l, 0, &["gfx1100"]).expect("load"), b"prefix");
    // Arches the prefix archive lacks still come from the marker's paths.
    assert_eq!(load(&c, &l, 0, &["gfx1101"]).expect("load"), b"co0 gfx1101");
}

#[test]
fn disabled_and_arch_override() {
    let (l, _) = family_layout();
    let off = Cache::with_config(LoaderConfig {
        disabled: true,
        ..LoaderConfig::default()
    });
    assert_eq!(
        code(load(&off, &l, 0, &["gfx1100"])),
        ErrorCode::NotImplemented
    );
    let over = Cache::with_config(LoaderConfig {
        arch_override: Some(vec!["gfx1101".into()]),
        ..LoaderConfig::default()
    });
    assert_eq!(
        load(&over, &l, 0, &["gfx1100"]).expect("load"),
        b"co0 gfx1101"
    );
}

// Unix only: the symlinks are what Debian/RPM device packages install;
// Windows packages (wheels) carry no symlinks, and Wine cannot create them.
#[cfg(unix)]
#[test]
fn relative_symlinks_share_one_open_archive() {
    // Device packages install foo_<processor>.kpack -> foo_<family>.kpack for
    // the reference runtime; both names are the same open archive here.
    let (l, _) = family_layout();
    fs::remove_file(l.kpack("foo.kpm")).expect("rm manifest");
    std::os::unix::fs::symlink("foo_gfx110X.kpack", l.kpack("foo_gfx1100.kpack")).expect("ln");
    std::os::unix::fs::symlink("foo_gfx110X.kpack", l.kpack("foo_gfx1101.kpack")).expect("ln");
    let c = cache();
    assert_eq!(load(&c, &l, 0, &["gfx1100"]).expect("load"), b"co0 gfx1100");
    assert_eq!(load(&c, &l, 0, &["gfx1101"]).expect("load"), b"co0 gfx1101");
    assert_eq!(c.open_archive_count(), 1);
}

#[test]
fn bad_markers_are_invalid_metadata() {
    use rocm_kpack_loader::loader::parse_marker;
    let cases: &[&[u8]] = &[
        b"",
        b"this is not valid msgpack data!",
        b"\x91\xa1x",                                              // array, not map
        b"\x81\xabkernel_name\xa3lib",                             // no search paths
        b"\x82\xb2kpack_search_paths\x90\xabkernel_name\xa1x",     // empty paths
        b"\x82\xb2kpack_search_paths\xa1x\xabkernel_name\xa1x",    // paths not array
        b"\x82\xb2kpack_search_paths\x91\xa1x\xabkernel_name\x05", // name not str
    ];
    for bytes in cases {
        let err = parse_marker(bytes).expect_err("must fail");
        assert_eq!(err.code(), ErrorCode::InvalidMetadata, "{bytes:?}: {err}");
    }
    let good = marker("lib/x.so", &["a.kpack"])
        .to_msgpack()
        .expect("encode");
    assert_eq!(
        parse_marker(&good).expect("parses"),
        marker("lib/x.so", &["a.kpack"])
    );
    // Read through a raw pointer: exactly the value's bytes, trailing data ignored.
    let mut padded = good.clone();
    padded.extend_from_slice(b"\xc1\xc1 trailing junk");
    // SAFETY: padded is a live buffer holding a marker.
    let m = unsafe { rocm_kpack_loader::loader::marker_from_ptr(padded.as_ptr()) }.expect("marker");
    assert_eq!(m.kernel_name, "lib/x.so");
}

#[test]
fn sixteen_threads_load_from_one_cache() {
    // 48 kernels in two zstd archives; threads load different and identical
    // kernels for a bounded time and check every byte.
    let l = Layout::new();
    let mut rng = Rng::new(16);
    let mut expected = Vec::new();
    let mut a = Vec::new();
    let mut b = Vec::new();
    for co in 0..24u32 {
        for (arch, list) in [("gfx1100", &mut a), ("gfx90a", &mut b)] {
            let len = 20_000 + rng.below(60_000);
            let data = rng.code_object(len, &format!("{co}/{arch}"));
            list.push(kernel(&key(co), arch, data.clone()));
            expected.push((co, arch, data));
        }
    }
    let pa = l.archive("gfx110X", Zstd, &a);
    let pb = l.archive("gfx90a", Zstd, &b);
    l.manifest(&[(&pa, "gfx110X", &["gfx1100"]), (&pb, "gfx90a", &["gfx90a"])]);
    let cache = Arc::new(cache());
    let expected = Arc::new(expected);
    let marker = Arc::new(l.marker());
    let binary = Arc::new(l.binary());
    let deadline = Instant::now() + Duration::from_secs(2);
    let threads: Vec<_> = (0..16u64)
        .map(|t| {
            let (cache, expected, marker, binary) = (
                cache.clone(),
                expected.clone(),
                marker.clone(),
                binary.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = Rng::new(t);
                let mut loads = 0u64;
                while Instant::now() < deadline || loads < 50 {
                    // Even threads hammer one shared kernel, odd ones roam.
                    let i = if t % 2 == 0 {
                        0
                    } else {
                        rng.below(expected.len())
                    };
                    let (co, arch, data) = &expected[i];
                    let got = cache
                        .load_code_object(&marker, &binary, *co, &[*arch])
                        .unwrap_or_else(|e| panic!("thread {t}: {co}/{arch}: {e}"));
                    assert!(got.data == *data, "thread {t}: {co}/{arch}: wrong bytes");
                    loads += 1;
                }
                loads
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|h| h.join().expect("thread")).sum();
    assert!(total >= 16 * 50);
    assert_eq!(cache.open_archive_count(), 2);
}

#[test]
fn discovers_binary_of_a_data_address() {
    static ANCHOR: [u8; 4] = *b"anch";
    let found =
        rocm_kpack_loader::loader::discover_binary_path(ANCHOR.as_ptr() as usize).expect("mapped");
    let exe = fs::canonicalize(std::env::current_exe().expect("exe")).expect("canonical");
    assert_eq!(fs::canonicalize(&found.path).expect("canonical"), exe);
    assert!(found.offset > 0);
    let heap = Box::new(0u64);
    let err = rocm_kpack_loader::loader::discover_binary_path(&*heap as *const u64 as usize)
        .expect_err("heap");
    assert_eq!(err.code(), ErrorCode::PathDiscoveryFailed);
}
