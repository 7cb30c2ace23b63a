//! Unit tests of the C ABI: the functions librocm_kpack.so exports,
//! called directly: argument checks, the environment variables read by
//! `kpack_cache_create`, the loader behaviour table, a corpus of malformed
//! archives/markers/manifests, a seeded mutation fuzzer (iterations from
//! `KPACK_FUZZ_ITERS`), and 16 threads sharing one cache.
//!
//! Every cache is created through [`c_cache`], which holds a lock while it
//! sets the `ROCM_KPACK_*` variables, so tests in this binary never see each
//! other's environment.

use std::ffi::{c_char, c_void, CStr, CString};
use std::fs;
use std::path::Path;
use std::ptr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::*;
use rocm_kpack_format::archive::CompressionScheme::{None as Plain, ZstdPerKernel as Zstd};
use rocm_kpack_format::ErrorCode::{self, *};
use rocm_kpack_testkit::layout::*;

const ENV_VARS: [&str; 5] = [
    "ROCM_KPACK_PATH",
    "ROCM_KPACK_PATH_PREFIX",
    "ROCM_KPACK_DISABLE",
    "ROCM_KPACK_DEBUG",
    "ROCM_KPACK_ARCH_OVERRIDE",
];

static ENV_LOCK: Mutex<()> = Mutex::new(());

/// A C cache handle, destroyed on drop.
struct CCache(kpack_cache_t);

impl Drop for CCache {
    fn drop(&mut self) {
        // SAFETY: created by kpack_cache_create, destroyed once.
        unsafe { kpack_cache_destroy(self.0) }
    }
}

// SAFETY: the C API documents the cache as thread-safe.
unsafe impl Send for CCache {}
unsafe impl Sync for CCache {}

/// `kpack_cache_create` with exactly `vars` set among the ROCM_KPACK_* ones.
fn c_cache(vars: &[(&str, &str)]) -> CCache {
    let _guard = ENV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let saved: Vec<_> = ENV_VARS.iter().map(|v| (*v, std::env::var_os(v))).collect();
    for v in ENV_VARS {
        std::env::remove_var(v);
    }
    for (k, v) in vars {
        std::env::set_var(k, v);
    }
    let mut handle: kpack_cache_t = ptr::null_mut();
    // SAFETY: valid out pointer.
    let rc = unsafe { kpack_cache_create(&mut handle) };
    for (k, v) in saved {
        match v {
            Some(v) => std::env::set_var(k, v),
            None => std::env::remove_var(k),
        }
    }
    assert_eq!(rc, Success);
    assert!(!handle.is_null());
    CCache(handle)
}

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

fn path_cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_encoded_bytes()).expect("no NUL")
}

/// kpack_load_code_object with Rust arguments; the buffer is copied out and
/// freed with kpack_free_code_object.
fn c_load(
    cache: &CCache,
    marker: &[u8],
    binary: &Path,
    co: u32,
    arches: &[&str],
) -> Result<Vec<u8>, ErrorCode> {
    let arch_c: Vec<CString> = arches.iter().map(|a| cstr(a)).collect();
    let arch_p: Vec<*const c_char> = arch_c.iter().map(|a| a.as_ptr()).collect();
    let bin = path_cstr(binary);
    let mut out: *mut c_void = ptr::dangling_mut();
    let mut size: usize = 12345;
    // SAFETY: all pointers valid for the call.
    let rc = unsafe {
        kpack_load_code_object(
            cache.0,
            marker.as_ptr().cast(),
            bin.as_ptr(),
            co,
            arch_p.as_ptr(),
            arch_p.len(),
            &mut out,
            &mut size,
        )
    };
    if rc != Success {
        assert!(
            out.is_null() && size == 0,
            "outputs must be cleared on error"
        );
        return Err(rc);
    }
    assert!(!out.is_null());
    // SAFETY: the library returned `size` bytes at `out`.
    let bytes = unsafe { std::slice::from_raw_parts(out.cast::<u8>(), size) }.to_vec();
    // SAFETY: returned by kpack_load_code_object, freed once.
    unsafe { kpack_free_code_object(out) };
    Ok(bytes)
}

fn layout_marker(l: &Layout) -> Vec<u8> {
    l.marker().to_msgpack().expect("encode")
}

/// gfx110X family archive + manifest, as in loader.rs.
fn family_layout() -> Layout {
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
    l
}

// ---------------------------------------------------------------------------
// Argument checks

#[test]
fn null_arguments_are_invalid_argument() {
    let l = family_layout();
    let cache = c_cache(&[]);
    let marker = layout_marker(&l);
    let bin = path_cstr(&l.binary());
    let arch = cstr("gfx1100");
    let arches = [arch.as_ptr()];
    let mut out: *mut c_void = ptr::null_mut();
    let mut size = 0usize;
    let m: *const c_void = marker.as_ptr().cast();
    // SAFETY: every call passes valid pointers except the NULL under test.
    unsafe {
        type Args = (
            kpack_cache_t,
            *const c_void,
            *const c_char,
            *const *const c_char,
            usize,
            bool,
            bool,
        );
        let cases: [(&str, Args); 7] = [
            (
                "cache",
                (
                    ptr::null_mut(),
                    m,
                    bin.as_ptr(),
                    arches.as_ptr(),
                    1,
                    true,
                    true,
                ),
            ),
            (
                "metadata",
                (
                    cache.0,
                    ptr::null(),
                    bin.as_ptr(),
                    arches.as_ptr(),
                    1,
                    true,
                    true,
                ),
            ),
            (
                "binary_path",
                (cache.0, m, ptr::null(), arches.as_ptr(), 1, true, true),
            ),
            (
                "arch_list",
                (cache.0, m, bin.as_ptr(), ptr::null(), 1, true, true),
            ),
            (
                "arch_count 0",
                (cache.0, m, bin.as_ptr(), arches.as_ptr(), 0, true, true),
            ),
            (
                "code_object_out",
                (cache.0, m, bin.as_ptr(), arches.as_ptr(), 1, false, true),
            ),
            (
                "size_out",
                (cache.0, m, bin.as_ptr(), arches.as_ptr(), 1, true, false),
            ),
        ];
        for (what, (c, md, b, al, n, with_out, with_size)) in cases {
            let o = if with_out {
                &mut out as *mut _
            } else {
                ptr::null_mut()
            };
            let s = if with_size {
                &mut size as *mut _
            } else {
                ptr::null_mut()
            };
            assert_eq!(
                kpack_load_code_object(c, md, b, 0, al, n, o, s),
                InvalidArgument,
                "{what}"
            );
        }
        // A list of only NULL entries names no arch.
        let nulls = [ptr::null::<c_char>()];
        assert_eq!(
            kpack_load_code_object(
                cache.0,
                m,
                bin.as_ptr(),
                0,
                nulls.as_ptr(),
                1,
                &mut out,
                &mut size
            ),
            InvalidArgument
        );

        assert_eq!(kpack_cache_create(ptr::null_mut()), InvalidArgument);
        let mut a: kpack_archive_t = ptr::null_mut();
        assert_eq!(kpack_open(ptr::null(), &mut a), InvalidArgument);
        assert_eq!(
            kpack_open(cstr("x").as_ptr(), ptr::null_mut()),
            InvalidArgument
        );
        let mut n = 0usize;
        let mut s: *const c_char = ptr::null();
        assert_eq!(
            kpack_get_architecture_count(ptr::null_mut(), &mut n),
            InvalidArgument
        );
        assert_eq!(
            kpack_get_binary_count(ptr::null_mut(), &mut n),
            InvalidArgument
        );
        assert_eq!(
            kpack_get_architecture(ptr::null_mut(), 0, &mut s),
            InvalidArgument
        );
        assert_eq!(
            kpack_get_binary(ptr::null_mut(), 0, &mut s),
            InvalidArgument
        );
        let mut d: *mut c_void = ptr::null_mut();
        assert_eq!(
            kpack_get_kernel(
                ptr::null_mut(),
                cstr("b").as_ptr(),
                arch.as_ptr(),
                &mut d,
                &mut n
            ),
            InvalidArgument
        );
        let mut buf = [0 as c_char; 64];
        assert_eq!(
            kpack_discover_binary_path(ptr::null(), buf.as_mut_ptr(), 64, ptr::null_mut()),
            InvalidArgument
        );
        let here = buf.as_ptr().cast::<c_void>();
        assert_eq!(
            kpack_discover_binary_path(here, ptr::null_mut(), 64, ptr::null_mut()),
            InvalidArgument
        );
        assert_eq!(
            kpack_discover_binary_path(here, buf.as_mut_ptr(), 0, ptr::null_mut()),
            InvalidArgument
        );
        assert_eq!(
            kpack_enumerate_architectures(ptr::null(), Some(count_arch), ptr::null_mut()),
            InvalidArgument
        );
        assert_eq!(
            kpack_enumerate_architectures(cstr("x").as_ptr(), None, ptr::null_mut()),
            InvalidArgument
        );
        // NULL is a no-op for every release function.
        kpack_close(ptr::null_mut());
        kpack_cache_destroy(ptr::null_mut());
        kpack_free_kernel(ptr::null_mut());
        kpack_free_code_object(ptr::null_mut());
    }
}

unsafe extern "C" fn count_arch(_arch: *const c_char, user: *mut c_void) -> bool {
    // SAFETY: tests pass a *mut Vec<String>.
    if let Some(v) = unsafe { user.cast::<Vec<String>>().as_mut() } {
        // SAFETY: the library passes a NUL-terminated string.
        v.push(
            unsafe { CStr::from_ptr(_arch) }
                .to_string_lossy()
                .into_owned(),
        );
        return v.len() < 100;
    }
    true
}

unsafe extern "C" fn stop_after_first(_arch: *const c_char, user: *mut c_void) -> bool {
    // SAFETY: tests pass a *mut usize.
    unsafe { *user.cast::<usize>() += 1 };
    false
}

#[test]
fn vectors_through_the_c_abi() {
    let zstd = path_cstr(&testdata().join("test_zstd.kpack"));
    let mut a: kpack_archive_t = ptr::null_mut();
    // SAFETY: valid pointers throughout; handle closed once.
    unsafe {
        assert_eq!(kpack_open(zstd.as_ptr(), &mut a), Success);
        let mut n = 0usize;
        assert_eq!(kpack_get_binary_count(a, &mut n), Success);
        assert_eq!(n, 2);
        let mut s: *const c_char = ptr::null();
        assert_eq!(kpack_get_binary(a, 0, &mut s), Success);
        assert_eq!(CStr::from_ptr(s).to_str(), Ok("bin/hiptest#0"));
        assert_eq!(kpack_get_binary(a, 2, &mut s), InvalidArgument);
        let mut d: *mut c_void = ptr::null_mut();
        assert_eq!(
            kpack_get_kernel(
                a,
                cstr("bin/hiptest#0").as_ptr(),
                cstr("gfx1100").as_ptr(),
                &mut d,
                &mut n
            ),
            Success
        );
        let mut want = b"TEST_APP_KERNEL___".to_vec();
        want.extend([0x42u8; 1000]);
        assert_eq!(std::slice::from_raw_parts(d.cast::<u8>(), n), &want[..]);
        kpack_free_kernel(d);
        // Not UTF-8: cannot name a kernel.
        let bad = [0xffu8 as c_char, 0];
        assert_eq!(
            kpack_get_kernel(a, bad.as_ptr(), cstr("gfx1100").as_ptr(), &mut d, &mut n),
            KernelNotFound
        );
        assert!(d.is_null() && n == 0);
        kpack_close(a);

        let mut seen: Vec<String> = Vec::new();
        let user = (&mut seen as *mut Vec<String>).cast::<c_void>();
        assert_eq!(
            kpack_enumerate_architectures(zstd.as_ptr(), Some(count_arch), user),
            Success
        );
        assert_eq!(seen, ["gfx1100", "gfx1101"]);
        let mut calls = 0usize;
        let user = (&mut calls as *mut usize).cast::<c_void>();
        assert_eq!(
            kpack_enumerate_architectures(zstd.as_ptr(), Some(stop_after_first), user),
            Success
        );
        assert_eq!(calls, 1);
        assert_eq!(
            kpack_enumerate_architectures(
                cstr("/nonexistent.kpack").as_ptr(),
                Some(stop_after_first),
                user
            ),
            FileNotFound
        );
    }
}

#[test]
fn discover_binary_path_reports_file_and_offset() {
    static ANCHOR: [u8; 8] = *b"anchor!!";
    let mut buf = vec![0 as c_char; 4096];
    let mut off = 0usize;
    // SAFETY: valid buffers.
    let rc = unsafe {
        kpack_discover_binary_path(
            ANCHOR.as_ptr().cast(),
            buf.as_mut_ptr(),
            buf.len(),
            &mut off,
        )
    };
    assert_eq!(rc, Success);
    // SAFETY: NUL-terminated on success.
    let found = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let exe = std::env::current_exe().expect("exe");
    assert_eq!(fs::canonicalize(found).ok(), fs::canonicalize(exe).ok());
    // The offset is where the anchor's bytes are in the file.
    let file = fs::read(std::env::current_exe().expect("exe")).expect("read self");
    assert_eq!(file.get(off..off + 8), Some(&ANCHOR[..]));
    // Too small a buffer: INVALID_ARGUMENT, like the reference.
    // SAFETY: valid buffer of 4 bytes.
    let rc = unsafe {
        kpack_discover_binary_path(ANCHOR.as_ptr().cast(), buf.as_mut_ptr(), 4, ptr::null_mut())
    };
    assert_eq!(rc, InvalidArgument);
    let heap = Box::new([0u8; 16]);
    // SAFETY: valid buffer; the address is only compared.
    let rc = unsafe {
        kpack_discover_binary_path(
            heap.as_ptr().cast(),
            buf.as_mut_ptr(),
            buf.len(),
            ptr::null_mut(),
        )
    };
    assert_eq!(rc, PathDiscoveryFailed);
}

// ---------------------------------------------------------------------------
// Environment (read once, at cache creation)

#[test]
fn rocm_kpack_disable_truthiness() {
    let l = family_layout();
    let m = layout_marker(&l);
    for (value, disabled) in [
        ("1", true),
        ("yes", true),
        ("0", false),
        ("", false),
        ("0off", false),
    ] {
        let cache = c_cache(&[("ROCM_KPACK_DISABLE", value)]);
        let got = c_load(&cache, &m, &l.binary(), 0, &["gfx1100"]);
        if disabled {
            assert_eq!(got, Err(NotImplemented), "ROCM_KPACK_DISABLE={value:?}");
        } else {
            assert_eq!(
                got.as_deref(),
                Ok(&b"co0 gfx1100"[..]),
                "ROCM_KPACK_DISABLE={value:?}"
            );
        }
    }
    // Disabled wins over a bad marker, but not over argument errors.
    let cache = c_cache(&[("ROCM_KPACK_DISABLE", "1")]);
    assert_eq!(
        c_load(&cache, b"junk", &l.binary(), 0, &["gfx1100"]),
        Err(NotImplemented)
    );
    assert_eq!(
        c_load(&cache, &m, &l.binary(), 0, &[]),
        Err(InvalidArgument)
    );
}

#[test]
fn environment_is_read_once_at_creation() {
    let l = family_layout();
    let m = layout_marker(&l);
    let cache = c_cache(&[]);
    // Changing the environment after creation changes nothing.
    {
        let _guard = ENV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        std::env::set_var("ROCM_KPACK_DISABLE", "1");
        let got = c_load(&cache, &m, &l.binary(), 0, &["gfx1100"]);
        std::env::remove_var("ROCM_KPACK_DISABLE");
        assert_eq!(got.as_deref(), Ok(&b"co0 gfx1100"[..]));
    }
}

#[test]
fn rocm_kpack_path_and_prefix() {
    let l = family_layout();
    let m = layout_marker(&l);
    let other = tempfile::tempdir().expect("tmp");
    let x = other.path().join("x.kpack");
    write_archive(
        &x,
        "x",
        "gfx1100",
        Plain,
        &[kernel(&key(0), "gfx1100", b"from env".to_vec())],
    );
    // ':' separates the list, ';' on Windows.
    let sep = char::from(rocm_kpack_loader::loader::config::PATH_LIST_SEPARATOR);
    let list = format!("/nonexistent/a.kpack{sep}{sep}{}{sep}", x.display());
    // PATH replaces everything: gfx1101 (only in the marker's archive) is gone.
    let cache = c_cache(&[("ROCM_KPACK_PATH", &list)]);
    assert_eq!(
        c_load(&cache, &m, &l.binary(), 0, &["gfx1100"]).as_deref(),
        Ok(&b"from env"[..])
    );
    assert_eq!(
        c_load(&cache, &m, &l.binary(), 0, &["gfx1101"]),
        Err(ArchNotFound)
    );
    // An empty PATH is unset.
    let cache = c_cache(&[("ROCM_KPACK_PATH", "")]);
    assert_eq!(
        c_load(&cache, &m, &l.binary(), 0, &["gfx1100"]).as_deref(),
        Ok(&b"co0 gfx1100"[..])
    );
    // PREFIX comes first, the marker's paths after it.
    let cache = c_cache(&[("ROCM_KPACK_PATH_PREFIX", &list)]);
    assert_eq!(
        c_load(&cache, &m, &l.binary(), 0, &["gfx1100"]).as_deref(),
        Ok(&b"from env"[..])
    );
    assert_eq!(
        c_load(&cache, &m, &l.binary(), 0, &["gfx1101"]).as_deref(),
        Ok(&b"co0 gfx1101"[..])
    );
    // PATH wins over PREFIX.
    let only_marker_archive = l.kpack("foo_gfx110X.kpack").display().to_string();
    let cache = c_cache(&[
        ("ROCM_KPACK_PATH", &only_marker_archive),
        ("ROCM_KPACK_PATH_PREFIX", &list),
    ]);
    assert_eq!(
        c_load(&cache, &m, &l.binary(), 0, &["gfx1100"]).as_deref(),
        Ok(&b"co0 gfx1100"[..])
    );
}

#[test]
fn rocm_kpack_arch_override_replaces_the_list() {
    let l = family_layout();
    let m = layout_marker(&l);
    let cache = c_cache(&[("ROCM_KPACK_ARCH_OVERRIDE", "gfx90a, gfx1101")]);
    assert_eq!(
        c_load(&cache, &m, &l.binary(), 0, &["gfx1100"]).as_deref(),
        Ok(&b"co0 gfx1101"[..])
    );
    // Blank override is unset.
    let cache = c_cache(&[("ROCM_KPACK_ARCH_OVERRIDE", " ")]);
    assert_eq!(
        c_load(&cache, &m, &l.binary(), 0, &["gfx1100"]).as_deref(),
        Ok(&b"co0 gfx1100"[..])
    );
}

// ROCM_KPACK_DEBUG writes to this process's stderr, which a test cannot read
// back; capi_programs.rs checks its lines through the C test program.

// ---------------------------------------------------------------------------
// Loader behaviour table through the C ABI (mirrors loader.rs)

#[test]
fn behaviour_table() {
    let cache = c_cache(&[]);
    let f = family_layout();
    let fm = layout_marker(&f);
    // (layout, marker, co_index, arch list, expected)
    assert_eq!(
        c_load(&cache, &fm, &f.binary(), 1, &["gfx1100"]).as_deref(),
        Ok(&b"co1 gfx1100"[..])
    );
    assert_eq!(
        c_load(&cache, &fm, &f.binary(), 0, &["amdgcn-amd-amdhsa--gfx1101"]).as_deref(),
        Ok(&b"co0 gfx1101"[..])
    );
    assert_eq!(
        c_load(&cache, &fm, &f.binary(), 0, &["gfx90a"]),
        Err(ArchNotFound)
    );
    assert_eq!(
        c_load(&cache, &fm, &f.binary(), 9, &["gfx1100"]),
        Err(KernelNotFound)
    );
    assert_eq!(
        c_load(&cache, b"\x93\x01\x02\x03", &f.binary(), 0, &["gfx1100"]),
        Err(InvalidMetadata)
    );

    // .kpm missing -> pattern.
    let p = Layout::new();
    p.archive(
        "gfx90a",
        Plain,
        &[kernel(&key(0), "gfx90a", b"plain 90a".to_vec())],
    );
    let pm = layout_marker(&p);
    assert_eq!(
        c_load(&cache, &pm, &p.binary(), 0, &["gfx90a:xnack+"]).as_deref(),
        Ok(&b"plain 90a"[..])
    );
    // .kpm stale (names an archive that does not exist) -> pattern.
    p.manifest(&[(&p.kpack("foo_gfx90X.kpack"), "gfx90X", &["gfx90a"])]);
    assert_eq!(
        c_load(&cache, &pm, &p.binary(), 0, &["gfx90a"]).as_deref(),
        Ok(&b"plain 90a"[..])
    );

    // Feature-flag code object vs the opposite device setting.
    let x = Layout::new();
    x.archive(
        "gfx90a",
        Plain,
        &[kernel(&key(0), "gfx90a:xnack+", b"xnack+".to_vec())],
    );
    let xm = layout_marker(&x);
    assert_eq!(
        c_load(&cache, &xm, &x.binary(), 0, &["gfx90a:xnack+"]).as_deref(),
        Ok(&b"xnack+"[..])
    );
    assert_eq!(
        c_load(&cache, &xm, &x.binary(), 0, &["gfx90a:xnack-"]),
        Err(ArchNotFound)
    );

    // Nothing on disk.
    let e = Layout::new();
    assert_eq!(
        c_load(&cache, &layout_marker(&e), &e.binary(), 0, &["gfx1100"]),
        Err(ArchiveNotFound)
    );
}

// ---------------------------------------------------------------------------
// Robustness: malformed inputs give error codes, never a crash

/// Open an archive file through the C ABI and exercise every query on it.
/// Returns the open result.
fn exercise_archive(path: &Path) -> ErrorCode {
    let p = path_cstr(path);
    let mut a: kpack_archive_t = ptr::null_mut();
    // SAFETY: valid pointers; the handle is closed once.
    unsafe {
        let rc = kpack_open(p.as_ptr(), &mut a);
        if rc != Success {
            assert!(a.is_null());
            return rc;
        }
        let (mut na, mut nb) = (0usize, 0usize);
        assert_eq!(kpack_get_architecture_count(a, &mut na), Success);
        assert_eq!(kpack_get_binary_count(a, &mut nb), Success);
        let mut arches = Vec::new();
        for i in 0..na {
            let mut s: *const c_char = ptr::null();
            assert_eq!(kpack_get_architecture(a, i, &mut s), Success);
            arches.push(CStr::from_ptr(s).to_owned());
        }
        for i in 0..nb {
            let mut s: *const c_char = ptr::null();
            assert_eq!(kpack_get_binary(a, i, &mut s), Success);
            let bin = CStr::from_ptr(s).to_owned();
            for arch in &arches {
                let mut d: *mut c_void = ptr::null_mut();
                let mut n = 0usize;
                let rc = kpack_get_kernel(a, bin.as_ptr(), arch.as_ptr(), &mut d, &mut n);
                assert!(rc == Success || d.is_null(), "error with a buffer");
                kpack_free_kernel(d);
            }
        }
        kpack_close(a);
        let mut seen: Vec<String> = Vec::new();
        let rc = kpack_enumerate_architectures(
            p.as_ptr(),
            Some(count_arch),
            (&mut seen as *mut Vec<String>).cast(),
        );
        assert_eq!(rc, Success);
        assert_eq!(seen.len(), na);
        Success
    }
}

fn malformed_archives() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for name in ["test_noop.kpack", "test_zstd.kpack"] {
        let good = fs::read(testdata().join(name)).expect("vector");
        for cut in 0..good.len() {
            out.push((format!("{name} cut at {cut}"), good[..cut].to_vec()));
        }
        let mut v = good.clone();
        v[0] = b'X';
        out.push((format!("{name} bad magic"), v));
        let mut v = good.clone();
        v[4] = 2;
        out.push((format!("{name} version 2"), v));
        for toc in [0u64, 8, 63, good.len() as u64, u64::MAX, u64::MAX / 2] {
            let mut v = good.clone();
            v[8..16].copy_from_slice(&toc.to_le_bytes());
            out.push((format!("{name} toc_offset {toc}"), v));
        }
        let mut v = good.clone();
        v.extend_from_slice(b"trailing");
        out.push((format!("{name} trailing bytes"), v));
        for i in 0..good.len() {
            let mut v = good.clone();
            v[i] ^= 0x5a;
            out.push((format!("{name} byte {i} flipped"), v));
        }
    }
    out
}

#[test]
fn malformed_archive_corpus_returns_errors() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("corpus.kpack");
    let mut failures = 0;
    for (what, bytes) in malformed_archives() {
        fs::write(&path, &bytes).expect("write");
        let rc = exercise_archive(&path);
        if rc != Success {
            failures += 1;
            assert!(
                matches!(
                    rc,
                    InvalidFormat | UnsupportedVersion | MsgpackParseFailed | IoError
                ),
                "{what}: unexpected code {rc:?}"
            );
        }
    }
    // Truncations alone fail for every cut.
    assert!(failures > 900, "only {failures} rejected");
}

fn malformed_markers() -> Vec<Vec<u8>> {
    let good = marker("lib/libfoo.so", &["../.kpack/foo.kpm"])
        .to_msgpack()
        .expect("encode");
    let mut out: Vec<Vec<u8>> = vec![
        vec![],
        vec![0xc1],
        vec![0x80],
        vec![0x81, 0xa0, 0xc0],
        vec![0xdf, 0xff, 0xff, 0xff, 0xff],
        vec![0xdb, 0xff, 0xff, 0xff, 0xff],
        vec![0x91; 200],
        b"\x82\xb2kpack_search_paths\x91\x01\xabkernel_name\xa1x".to_vec(),
    ];
    for cut in 0..good.len() {
        out.push(good[..cut].to_vec());
    }
    for i in 0..good.len() {
        let mut v = good.clone();
        v[i] = 0xc1;
        out.push(v);
    }
    out
}

#[test]
fn malformed_markers_are_invalid_metadata() {
    let cache = c_cache(&[]);
    let l = family_layout();
    let mut rejected = 0;
    for (i, bytes) in malformed_markers().into_iter().enumerate() {
        // Padded with zeros past the value, like section padding; the
        // reader stops where the value ends.
        let mut buf = bytes.clone();
        buf.resize(bytes.len() + 64, 0);
        let got = c_load(&cache, &buf, &l.binary(), 0, &["gfx1100"]);
        // A cut inside the last string can be completed by the padding
        // into a valid (if useless) marker; the Rust parser is the oracle.
        if rocm_kpack_loader::loader::parse_marker(&buf).is_ok() {
            assert_ne!(got, Err(InvalidMetadata), "marker {i}");
            continue;
        }
        assert_eq!(got, Err(InvalidMetadata), "marker {i}: {bytes:02x?}");
        rejected += 1;
    }
    assert!(rejected > 100, "only {rejected} rejected");
}

#[test]
fn malformed_manifests_fall_through() {
    let cache = c_cache(&[]);
    let l = Layout::new();
    l.archive(
        "gfx1100",
        Plain,
        &[kernel(&key(0), "gfx1100", b"pattern".to_vec())],
    );
    let m = layout_marker(&l);
    let good = rocm_kpack_format::manifest::Manifest {
        component: "foo".into(),
        kpack_files: vec![manifest_file(
            &l.kpack("foo_gfx1100.kpack"),
            "gfx1100",
            &["gfx1100"],
        )],
        database_files: Vec::new(),
        prefix_path: None,
    }
    .to_msgpack()
    .expect("encode");
    let hostile = b"\x83\xaeformat_version\x01\xa9component\xa3foo\xabkpack_files\x91\x85\xa8filename\xaa../../x.kp\xa6family\xa1f\xadarchitectures\x91\xa7gfx1100\xa4size\x00\xa6sha256\xc4\x20".to_vec();
    let mut cases = vec![hostile, vec![], vec![0xc1]];
    for cut in 0..good.len() {
        cases.push(good[..cut].to_vec());
    }
    for i in 0..good.len() {
        let mut v = good.clone();
        v[i] ^= 0xff;
        cases.push(v);
    }
    for bytes in cases {
        fs::write(l.kpack("foo.kpm"), &bytes).expect("write");
        assert_eq!(
            c_load(&cache, &m, &l.binary(), 0, &["gfx1100"]).as_deref(),
            Ok(&b"pattern"[..]),
            "{bytes:02x?}"
        );
    }
}

/// Seeded mutations of archives, markers and manifests through the C entry
/// points. `KPACK_FUZZ_ITERS` sets the iteration count (default 3000).
#[test]
fn seeded_mutation_fuzz() {
    let iters: usize = std::env::var("KPACK_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let seed: u64 = std::env::var("KPACK_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x006b_7061_636b);
    let mut cache = c_cache(&[]);
    let l = family_layout();
    let archive_path = l.kpack("foo_gfx110X.kpack");
    let seeds: Vec<Vec<u8>> = vec![
        fs::read(&archive_path).expect("archive"),
        fs::read(testdata().join("test_noop.kpack")).expect("noop"),
        fs::read(testdata().join("test_zstd.kpack")).expect("zstd"),
    ];
    let manifest_seed = fs::read(l.kpack("foo.kpm")).expect("manifest");
    let marker_seed = layout_marker(&l);
    let mut rng = Rng::new(seed);
    let mutate = |rng: &mut Rng, input: &[u8]| -> Vec<u8> {
        let mut v = input.to_vec();
        for _ in 0..1 + rng.below(4) {
            match rng.below(5) {
                0 if !v.is_empty() => {
                    let i = rng.below(v.len());
                    v[i] ^= 1 << rng.below(8);
                }
                1 if !v.is_empty() => {
                    let i = rng.below(v.len());
                    v[i] = [0x00, 0xff, 0x7f, 0x80, 0xc1, 0xdd, 0xdf][rng.below(7)];
                }
                2 => {
                    let cut = rng.below(v.len() + 1);
                    v.truncate(cut);
                }
                3 if v.len() >= 8 => {
                    let i = rng.below(v.len() - 7);
                    v[i..i + 8].copy_from_slice(&rng.next_u64().to_le_bytes());
                }
                _ => {
                    let i = rng.below(v.len() + 1);
                    v.insert(i, rng.next_u64() as u8);
                }
            }
        }
        v
    };
    for iter in 0..iters {
        let which = rng.below(3);
        match which {
            0 => {
                let s = &seeds[rng.below(seeds.len())];
                let bytes = mutate(&mut rng, s);
                // The shared cache may hold the archive mapped: a fresh
                // cache closes it (Windows refuses to write a mapped file,
                // Linux would change the pages under it).
                cache = c_cache(&[]);
                fs::write(&archive_path, &bytes).expect("write");
                exercise_archive(&archive_path);
                // Also through the loader (the manifest still points here).
                let fresh = c_cache(&[]);
                let _ = c_load(&fresh, &marker_seed, &l.binary(), 0, &["gfx1100"]);
                // Close the archive first: Windows refuses to write a mapped file.
                drop(fresh);
                fs::write(&archive_path, &seeds[0]).expect("restore");
            }
            1 => {
                let mut bytes = mutate(&mut rng, &marker_seed);
                bytes.resize(bytes.len() + 16, 0);
                let _ = c_load(
                    &cache,
                    &bytes,
                    &l.binary(),
                    rng.below(3) as u32,
                    &["gfx1100", "gfx1101"],
                );
            }
            _ => {
                let bytes = mutate(&mut rng, &manifest_seed);
                fs::write(l.kpack("foo.kpm"), &bytes).expect("write");
                let got = c_load(&cache, &marker_seed, &l.binary(), 0, &["gfx1100"]);
                // Whatever the manifest says, the archive itself is intact:
                // either it is found through the manifest or nothing is.
                assert!(
                    matches!(
                        got.as_deref(),
                        Ok(b"co0 gfx1100") | Err(ArchiveNotFound | ArchNotFound)
                    ),
                    "iteration {iter}: {got:?}"
                );
                fs::write(l.kpack("foo.kpm"), &manifest_seed).expect("restore");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Concurrency

#[test]
fn sixteen_threads_through_the_c_abi() {
    let l = Layout::new();
    let mut rng = Rng::new(99);
    let mut kernels = Vec::new();
    let mut expected = Vec::new();
    for co in 0..32u32 {
        let len = 10_000 + rng.below(90_000);
        let data = rng.code_object(len, &format!("co{co}"));
        kernels.push(kernel(&key(co), "gfx942:sramecc+:xnack-", data.clone()));
        expected.push((co, data));
    }
    let a = l.archive("gfx94X", Zstd, &kernels);
    l.manifest(&[(&a, "gfx94X", &["gfx942:sramecc+:xnack-"])]);
    let cache = Arc::new(c_cache(&[]));
    let marker = Arc::new(layout_marker(&l));
    let binary = Arc::new(l.binary());
    let expected = Arc::new(expected);
    let deadline = Instant::now() + Duration::from_secs(2);
    let handles: Vec<_> = (0..16u64)
        .map(|t| {
            let (cache, marker, binary, expected) = (
                cache.clone(),
                marker.clone(),
                binary.clone(),
                expected.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = Rng::new(t + 1);
                let mut n = 0u64;
                while Instant::now() < deadline || n < 30 {
                    let i = if t < 4 { 7 } else { rng.below(expected.len()) };
                    let (co, data) = &expected[i];
                    let got = c_load(&cache, &marker, &binary, *co, &["gfx942:sramecc+:xnack-"]);
                    assert!(
                        got.as_deref() == Ok(&data[..]),
                        "thread {t} co {co}: wrong result"
                    );
                    n += 1;
                }
                n
            })
        })
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().expect("thread")).sum();
    assert!(total >= 16 * 30);
}

#[test]
fn marker_ending_at_an_unmapped_page_is_read_safely() {
    // The marker is the last thing before a PROT_NONE page: reading one byte
    // past its end would crash the test.
    let l = family_layout();
    let marker = layout_marker(&l);
    // SAFETY: a private read-write page followed by an inaccessible one,
    // released at the end of the test.
    unsafe {
        let (base, page) = guarded_page();
        let start = base.cast::<u8>().add(page - marker.len());
        ptr::copy_nonoverlapping(marker.as_ptr(), start, marker.len());
        let at_edge = std::slice::from_raw_parts(start, marker.len());
        let cache = c_cache(&[]);
        assert_eq!(
            c_load(&cache, at_edge, &l.binary(), 0, &["gfx1100"]).as_deref(),
            Ok(&b"co0 gfx1100"[..])
        );
        // A truncated marker at the edge (its last string runs into the
        // guard page) is rejected without touching that page.
        let cut = &marker[..marker.len() - 3];
        let start = base.cast::<u8>().add(page - cut.len());
        ptr::copy_nonoverlapping(cut.as_ptr(), start, cut.len());
        let at_edge = std::slice::from_raw_parts(start, cut.len());
        assert_eq!(
            c_load(&cache, at_edge, &l.binary(), 0, &["gfx1100"]),
            Err(InvalidMetadata)
        );
        // A marker pointer into the guard page itself.
        let guard = std::slice::from_raw_parts(base.cast::<u8>().add(page), 0);
        assert_eq!(
            c_load(&cache, guard, &l.binary(), 0, &["gfx1100"]),
            Err(InvalidMetadata)
        );
        release_guarded_page(base, page);
    }
}

/// Two pages: read-write, then inaccessible. Returns the base and page size.
#[cfg(unix)]
unsafe fn guarded_page() -> (*mut c_void, usize) {
    // SAFETY: plain anonymous mapping.
    unsafe {
        let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
        let base = libc::mmap(
            ptr::null_mut(),
            2 * page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(base, libc::MAP_FAILED);
        assert_eq!(
            libc::mprotect(base.cast::<u8>().add(page).cast(), page, libc::PROT_NONE),
            0
        );
        (base, page)
    }
}

#[cfg(unix)]
unsafe fn release_guarded_page(base: *mut c_void, page: usize) {
    // SAFETY: mapped by guarded_page.
    unsafe { libc::munmap(base, 2 * page) };
}

#[cfg(windows)]
#[link(name = "kernel32")]
extern "system" {
    fn VirtualAlloc(addr: *mut c_void, size: usize, kind: u32, protect: u32) -> *mut c_void;
    fn VirtualProtect(addr: *mut c_void, size: usize, protect: u32, old: *mut u32) -> i32;
    fn VirtualFree(addr: *mut c_void, size: usize, kind: u32) -> i32;
}

#[cfg(windows)]
unsafe fn guarded_page() -> (*mut c_void, usize) {
    const MEM_COMMIT_RESERVE: u32 = 0x3000;
    const PAGE_READWRITE: u32 = 0x04;
    const PAGE_NOACCESS: u32 = 0x01;
    let page = 4096;
    // SAFETY: fresh allocation of two pages.
    unsafe {
        let base = VirtualAlloc(
            ptr::null_mut(),
            2 * page,
            MEM_COMMIT_RESERVE,
            PAGE_READWRITE,
        );
        assert!(!base.is_null());
        let mut old = 0u32;
        assert_ne!(
            VirtualProtect(
                base.cast::<u8>().add(page).cast(),
                page,
                PAGE_NOACCESS,
                &mut old
            ),
            0
        );
        (base, page)
    }
}

#[cfg(windows)]
unsafe fn release_guarded_page(base: *mut c_void, _page: usize) {
    const MEM_RELEASE: u32 = 0x8000;
    // SAFETY: allocated by guarded_page.
    unsafe { VirtualFree(base, 0, MEM_RELEASE) };
}

// FIFOs, /dev/zero and sparse files are Unix notions (the Windows build
// runs the rest of this module under Wine).
#[cfg(unix)]
use rocm_kpack_testkit::toc as toc_gen;

#[cfg(unix)]
#[test]
fn kpack_open_refuses_fifos_devices_and_sparse_files_and_opens_a_million_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("fifo.kpack");
    let c = path_cstr(&fifo);
    // SAFETY: valid C strings and out-pointers; handles closed once.
    unsafe {
        assert_eq!(libc::mkfifo(c.as_ptr(), 0o600), 0);
        let mut a: kpack_archive_t = ptr::null_mut();
        // Would block forever if the FIFO were opened for reading.
        assert_eq!(kpack_open(c.as_ptr(), &mut a), IoError);
        assert!(a.is_null());
        assert_eq!(kpack_open(cstr("/dev/zero").as_ptr(), &mut a), IoError);
        let sparse = dir.path().join("sparse.kpack");
        fs::write(&sparse, toc_gen::many_entries(1)).expect("write");
        fs::OpenOptions::new()
            .write(true)
            .open(&sparse)
            .and_then(|f| f.set_len(2 << 30))
            .expect("grow");
        assert_eq!(
            kpack_open(path_cstr(&sparse).as_ptr(), &mut a),
            InvalidFormat
        );

        let n = 1_000_000;
        let many = dir.path().join("many.kpack");
        fs::write(&many, toc_gen::many_entries(n)).expect("write");
        assert_eq!(kpack_open(path_cstr(&many).as_ptr(), &mut a), Success);
        let mut count = 0usize;
        assert_eq!(kpack_get_binary_count(a, &mut count), Success);
        assert_eq!(count, n);
        let mut s: *const c_char = ptr::null();
        assert_eq!(kpack_get_binary(a, n - 1, &mut s), Success);
        assert_eq!(
            CStr::from_ptr(s).to_str(),
            Ok(toc_gen::binary_key(n - 1).as_str())
        );
        let mut d: *mut c_void = ptr::null_mut();
        let key = cstr(&toc_gen::binary_key(n / 3));
        assert_eq!(
            kpack_get_kernel(a, key.as_ptr(), cstr("gfx90a").as_ptr(), &mut d, &mut count),
            Success
        );
        assert_eq!(
            std::slice::from_raw_parts(d.cast::<u8>(), count),
            toc_gen::BLOB
        );
        kpack_free_kernel(d);
        kpack_close(a);
    }
}

#[cfg(unix)]
use rocm_kpack_testkit::bomb;

/// Set in the child [`kpack_get_kernel_refuses_a_zstd_bomb_in_little_memory`]
/// runs itself as: the bomb's path.
#[cfg(unix)]
const BOMB_CHILD: &str = "ROCM_KPACK_TEST_BOMB_ARCHIVE";

/// A 140 KiB archive whose kernel decodes to 4 GiB of zeros, TOC and frame
/// agreeing: refused with a corrupt-data code, and the process's peak RSS
/// stays far below the kernel's size. Runs in a child (this test binary,
/// this test alone) so the peak is that of the C calls, not of whatever
/// other tests did in this process.
#[cfg(unix)]
#[test]
fn kpack_get_kernel_refuses_a_zstd_bomb_in_little_memory() {
    if let Some(path) = std::env::var_os(BOMB_CHILD) {
        let p = path_cstr(Path::new(&path));
        let binary = cstr(bomb::BOMB_BINARY);
        let arch = cstr(bomb::BOMB_ARCH);
        // SAFETY: valid C strings and out-pointers; handles closed once.
        let rc = unsafe {
            let mut a: kpack_archive_t = ptr::null_mut();
            match kpack_open(p.as_ptr(), &mut a) {
                Success => {
                    let (mut d, mut n): (*mut c_void, usize) = (ptr::null_mut(), 0);
                    let rc = kpack_get_kernel(a, binary.as_ptr(), arch.as_ptr(), &mut d, &mut n);
                    kpack_free_kernel(d);
                    kpack_close(a);
                    rc
                }
                rc => rc,
            }
        };
        // SAFETY: getrusage writes the struct it is given.
        let max_rss_kib = unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut ru), 0);
            ru.ru_maxrss
        };
        println!("bomb-result {rc:?} {max_rss_kib}");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bomb.kpack");
    let bytes = bomb::zstd_bomb_archive(4 << 30);
    assert!(bytes.len() < 200 << 10, "{} bytes", bytes.len());
    fs::write(&path, bytes).expect("write bomb");
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "tests::kpack_get_kernel_refuses_a_zstd_bomb_in_little_memory",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(BOMB_CHILD, &path)
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result = stdout
        .lines()
        .find_map(|l| l.split_once("bomb-result ").map(|(_, r)| r))
        .unwrap_or_else(|| {
            panic!(
                "child reported nothing: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let (code, kib) = result.split_once(' ').expect("code and KiB");
    assert_eq!(code, format!("{InvalidFormat:?}"), "{result}");
    let kib: u64 = kib.parse().expect("KiB");
    assert!(kib < 256 << 10, "peak RSS {kib} KiB");
}
