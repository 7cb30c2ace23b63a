//! `split_binary` end to end on real inputs: every committed fixture,
//! Debian's librocrand and librocsparse. The original side of each check is
//! read independently of the splitter (the `object` crate's ELF reader, the
//! stand-in HIP runtime's records); the split side is read the way a runtime
//! would: wrapper -> marker -> `.kpm` -> archive -> code object.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use object::read::elf::ElfFile64;
use object::{LittleEndian, Object, ObjectSection, ObjectSymbol, RelocationTarget};
use rocm_kpack_format::archive::{transport, Archive, CompressionScheme};
use rocm_kpack_format::bundle;
use rocm_kpack_format::manifest::{ArchiveTransport, Manifest, ManifestFile};
use rocm_kpack_format::marker::Marker;
use rocm_kpack_format::wrapper::{FatbinWrapper, HIPK_MAGIC, WRAPPER_SIZE};
use rocm_kpack_pkgspec::Spec;
use rocm_kpack_splitter::split::binary::{
    split_binary, SplitBinaryOptions, SplitBinaryReport, SplitError, SplitOutcome,
};
use rocm_kpack_splitter::split::output::ArchiveOutput;
use rocm_kpack_test_support::layouts::check_pattern_finds;
use rocm_kpack_test_support::phdr::assert_table_findable;
use rocm_kpack_test_support::{debian, fixtures};

/// The full error chain, as the CLI prints it.
fn chain(e: &SplitError) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

fn split(input: &Path, out: &Path) -> SplitBinaryReport {
    split_with(input, out, &SplitBinaryOptions::default())
}

fn split_with(input: &Path, out: &Path, opts: &SplitBinaryOptions) -> SplitBinaryReport {
    fs::create_dir_all(out).unwrap();
    match split_binary(input, out, opts) {
        Ok(r) => r,
        Err(e) => panic!("split {}: {}", input.display(), chain(&e)),
    }
}

/// The value the loader stores in an 8-byte slot: its dynamic relocation
/// (RELA addend, symbol + addend, or implicit addend) or the file content.
fn slot_value(file: &ElfFile64<LittleEndian>, slot: u64) -> u64 {
    let in_file = || -> u64 {
        for s in file.sections() {
            let (addr, size) = (s.address(), s.size());
            if slot >= addr && slot + 8 <= addr + size {
                if let Ok(d) = s.data() {
                    let o = (slot - addr) as usize;
                    if let Some(b) = d.get(o..o + 8) {
                        return u64::from_le_bytes(b.try_into().unwrap());
                    }
                }
            }
        }
        panic!("slot {slot:#x} is not in the file");
    };
    let mut found = Vec::new();
    if let Some(relocs) = file.dynamic_relocations() {
        for (off, r) in relocs {
            if off == slot {
                let base = match r.target() {
                    RelocationTarget::Symbol(i) => file.symbol_by_index(i).unwrap().address(),
                    _ => 0,
                };
                let addend = if r.has_implicit_addend() {
                    in_file()
                } else {
                    r.addend() as u64
                };
                found.push(base.wrapping_add(addend));
            }
        }
    }
    assert!(found.len() <= 1, "several relocations at {slot:#x}");
    found.pop().unwrap_or_else(in_file)
}

/// A wrapper as seen in a file: its pointer (relocation applied) and fields.
struct Wrapper {
    raw: FatbinWrapper,
    pointer: u64,
}

fn wrappers(file: &ElfFile64<LittleEndian>) -> Vec<Wrapper> {
    let sec = file
        .section_by_name(".hipFatBinSegment")
        .expect(".hipFatBinSegment");
    let data = sec.data().unwrap();
    FatbinWrapper::parse_all(data)
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(i, raw)| Wrapper {
            raw,
            pointer: slot_value(file, sec.address() + (i * WRAPPER_SIZE) as u64 + 8),
        })
        .collect()
}

/// Read-only map of a (possibly 1.3 GB) input.
fn map(path: &Path) -> memmap2::Mmap {
    let f = fs::File::open(path).unwrap();
    // SAFETY: test inputs are not modified while mapped.
    unsafe { memmap2::Mmap::map(&f).unwrap() }
}

/// The split side as a runtime sees it: marker, wrappers' co_index, and the
/// archives the `.kpm` lists.
struct ReadBack {
    marker: Marker,
    marker_bytes: Vec<u8>,
    co_indices: Vec<u32>,
    kpm: PathBuf,
    manifest: Manifest,
    archives: BTreeMap<String, Archive>,
}

impl ReadBack {
    /// Reads the host-only binary's marker and wrappers (each wrapper must
    /// be HIPK and reach the marker, through its relocation and in the file).
    fn open(host: &Path) -> ReadBack {
        let data = fs::read(host).unwrap();
        let file = ElfFile64::<LittleEndian>::parse(&*data).unwrap();
        let msec = file
            .section_by_name(".rocm_kpack_ref")
            .expect("marker section");
        let marker_bytes = msec.data().unwrap().to_vec();
        let marker = Marker::parse(&marker_bytes).unwrap();
        let mut co_indices = Vec::new();
        for w in wrappers(&file) {
            assert_eq!(w.raw.magic, HIPK_MAGIC);
            assert_eq!(
                w.pointer,
                msec.address(),
                "wrapper pointer (through its relocation) = marker"
            );
            assert_eq!(w.raw.binary, msec.address(), "in-file pointer = marker");
            co_indices.push(w.raw.co_index());
        }
        let kpm = host.parent().unwrap().join(&marker.kpack_search_paths[0]);
        let manifest = Manifest::read(&kpm).unwrap();
        ReadBack {
            marker,
            marker_bytes,
            co_indices,
            kpm,
            manifest,
            archives: BTreeMap::new(),
        }
    }

    /// The code object for `co_index` and `target`: `.kpm` -> archive -> TOC.
    fn kernel(&mut self, co_index: u32, target: &str) -> Vec<u8> {
        let f = self
            .manifest
            .file_for_arch(target)
            .unwrap_or_else(|| panic!("{}: no archive for {target}", self.kpm.display()));
        let dir = self.kpm.parent().unwrap().to_path_buf();
        let a = self
            .archives
            .entry(f.filename.clone())
            .or_insert_with(|| Archive::open(&dir.join(&f.filename)).unwrap());
        a.kernel(&format!("{}#{co_index}", self.marker.kernel_name), target)
            .unwrap_or_else(|e| panic!("{target} #{co_index}: {e}"))
    }
}

/// Round trip: for every wrapper of the original (its pointer read with
/// the `object` crate) and every target of the bundle it points at, the
/// code object read back through the split binary's wrapper, marker, `.kpm`
/// and archive is byte-identical; counts match; the `.kpm` sizes and hashes
/// match the files.
fn check_round_trip(input: &Path, report: &SplitBinaryReport) -> ReadBack {
    let data = map(input);
    let file = ElfFile64::<LittleEndian>::parse(&*data).unwrap();
    let fatbin = file.section_by_name(".hip_fatbin").expect(".hip_fatbin");
    let bundles = bundle::parse_fatbin(fatbin.data().unwrap()).unwrap();
    assert_eq!(report.bundles, bundles.len());
    let mut back = ReadBack::open(&report.output);
    let orig = wrappers(&file);
    assert_eq!(orig.len(), back.co_indices.len(), "wrapper count");
    let mut checked = BTreeSet::new();
    for (i, w) in orig.iter().enumerate() {
        assert!(w.raw.is_hipf());
        let off = w.pointer - fatbin.address();
        let b = bundles
            .iter()
            .find(|b| b.offset == off)
            .unwrap_or_else(|| panic!("wrapper {i} points at {off:#x}, not a bundle"));
        let co = back.co_indices[i];
        for (t, d) in b.code_objects() {
            if checked.insert((co, t.to_string())) {
                assert!(
                    back.kernel(co, t) == d,
                    "{}: wrapper {i} {t}: bytes differ",
                    input.display()
                );
            }
        }
    }
    let total: usize = bundles.iter().map(|b| b.code_objects().count()).sum();
    assert_eq!(report.code_objects, total);
    assert_eq!(
        checked.len(),
        total,
        "every code object is reachable from some wrapper"
    );

    // The manifest describes the archives exactly.
    let kpm = report.manifest.as_ref().expect("manifest");
    assert_eq!(
        kpm, &back.kpm,
        "the marker's first search path is the .kpm written"
    );
    assert_eq!(back.manifest.component, report.component);
    let mut entries = 0;
    for f in &back.manifest.kpack_files {
        assert!(!f.filename.contains(':'), "{}", f.filename);
        let path = kpm.parent().unwrap().join(&f.filename);
        let bytes = fs::read(&path).unwrap();
        assert_eq!(f.size, bytes.len() as u64);
        let sha: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(&bytes).into();
        assert_eq!(f.sha256, Some(sha));
        let a = Archive::from_bytes(bytes.clone()).unwrap();
        assert_eq!(a.group_name(), report.component);
        assert_eq!(a.gfx_arch_family(), f.family);
        assert_eq!(a.gfx_arches(), f.architectures.as_slice());
        entries += a.entries().count();
        check_transport(f, &a, &bytes);
    }
    let expected: usize = report.archives.iter().map(|a| a.entries).sum();
    assert_eq!(entries, expected);
    back
}

/// The manifest's `transport` is the archive's transport form, and (for a
/// small archive) rebuilding from that form at the level the manifest
/// gives is the archive byte for byte.
fn check_transport(f: &ManifestFile, a: &Archive, bytes: &[u8]) {
    let mut flat = Vec::new();
    let summary = transport::write_transport(a, &mut flat).unwrap();
    let Some(ArchiveTransport::Solid {
        size,
        sha256,
        level,
    }) = f.transport
    else {
        panic!("{}: no transport in the manifest", f.filename)
    };
    assert_eq!(
        (size, sha256),
        (summary.size, summary.sha256),
        "{}",
        f.filename
    );
    let level = match (a.scheme(), level) {
        (CompressionScheme::ZstdPerKernel, Some(level)) => level,
        (CompressionScheme::None, None) => return,
        other => panic!("{}: scheme and level {other:?}", f.filename),
    };
    if bytes.len() > 4 << 20 {
        return;
    }
    let opts = transport::RebuildOptions {
        level,
        in_flight_bytes: rocm_kpack_format::archive::DEFAULT_IN_FLIGHT_BYTES,
        pool: None,
    };
    let (out, read) = transport::rebuild_archive(
        &mut flat.as_slice(),
        std::io::Cursor::new(Vec::new()),
        &opts,
    )
    .unwrap();
    assert_eq!(read, summary);
    assert!(
        out.into_inner() == bytes,
        "{}: the rebuild differs",
        f.filename
    );
}

/// `readelf -a -W` prints no warnings or errors.
fn assert_readelf_clean(path: &Path) {
    let out = Command::new("readelf")
        .args(["-a", "-W"])
        .arg(path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "readelf failed on {}: {stderr}",
        path.display()
    );
    assert!(
        stderr.trim().is_empty(),
        "readelf on {}: {stderr}",
        path.display()
    );
    for line in stdout.lines() {
        assert!(
            !line.starts_with("readelf:") && !line.contains("Warning:") && !line.contains("Error:"),
            "readelf on {}: {line}",
            path.display()
        );
    }
}

fn elflint(path: &Path) -> BTreeSet<String> {
    let out = Command::new("eu-elflint")
        .arg("--gnu-ld")
        .arg(path)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // Program header numbers shift when the split adds segments, so a
    // finding the input had is the same finding under another number.
    text.lines()
        .map(|l| {
            let l = l.trim();
            match l.find(" of program header entry ") {
                Some(at) => l[..at].to_string(),
                None => l.to_string(),
            }
        })
        .filter(|l| !l.is_empty() && l != "No errors")
        .collect()
}

/// `eu-elflint --gnu-ld` reports nothing the input did not already have.
fn assert_elflint_nothing_new(input: &Path, output: &Path) {
    let before = elflint(input);
    let after = elflint(output);
    let new: Vec<&String> = after.difference(&before).collect();
    assert!(
        new.is_empty(),
        "eu-elflint on {}: new findings {new:#?}",
        output.display()
    );
}

fn marker_of(path: &Path) -> Vec<u8> {
    let data = fs::read(path).unwrap();
    let file = ElfFile64::<LittleEndian>::parse(&*data).unwrap();
    file.section_by_name(".rocm_kpack_ref")
        .unwrap_or_else(|| panic!("{}: no .rocm_kpack_ref", path.display()))
        .data()
        .unwrap()
        .to_vec()
}

/// `strip` and `objcopy` process the host-only binary and keep the marker.
/// binutils `strip` and `objcopy`, and elfutils `eu-strip`, keep the marker
/// and the program header table where every kernel finds it.
fn assert_binutils_keep_marker(host: &Path, marker: &[u8], scratch: &Path) -> (PathBuf, PathBuf) {
    assert_table_findable(host);
    let eu = scratch.join("eu-stripped");
    fs::copy(host, &eu).unwrap();
    let st = Command::new("eu-strip")
        .arg("-f")
        .arg(scratch.join("eu-stripped.debug"))
        .arg(&eu)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "eu-strip: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert_eq!(marker_of(&eu), marker, "marker after eu-strip");
    assert_table_findable(&eu);
    let stripped = scratch.join("stripped");
    let st = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(host)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "strip {}: {}",
        host.display(),
        String::from_utf8_lossy(&st.stderr)
    );
    assert_eq!(marker_of(&stripped), marker, "marker after strip");
    let copied = scratch.join("objcopied");
    let st = Command::new("objcopy")
        .arg(host)
        .arg(&copied)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "objcopy {}: {}",
        host.display(),
        String::from_utf8_lossy(&st.stderr)
    );
    assert_eq!(marker_of(&copied), marker, "marker after objcopy");
    assert_table_findable(&stripped);
    assert_table_findable(&copied);
    (stripped, copied)
}

/// Compiles the C program `source` to `out`, linked with `-ldl`.
fn compile_c(source: &str, out: &Path) {
    let src = out.with_extension("c");
    fs::write(&src, source).unwrap();
    let cc = Command::new("cc")
        .arg("-o")
        .arg(out)
        .arg(&src)
        .arg("-ldl")
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
}

/// `dlopen(lib, RTLD_NOW)` succeeds (with `lib_path` on LD_LIBRARY_PATH)
/// and `dlsym` finds `symbol`.
fn assert_dlopen_finds(lib: &Path, symbol: &str, lib_path: &Path, scratch: &Path) {
    let prog = scratch.join("dlopen_sym");
    if !prog.exists() {
        compile_c(
            r#"#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
  if (!dlsym(h, argv[2])) { fprintf(stderr, "dlsym: %s\n", dlerror()); return 3; }
  return 0;
}
"#,
            &prog,
        );
    }
    run_with_libs(&prog, &[lib.as_os_str(), symbol.as_ref()], lib_path);
}

/// Runs `prog ARGS` with `lib_path` on LD_LIBRARY_PATH, failing the test
/// unless it succeeds; its stdout.
fn run_with_libs(prog: &Path, args: &[&std::ffi::OsStr], lib_path: &Path) -> String {
    let o = Command::new(prog)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_path)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{} {args:?}: {} {}",
        prog.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `ldd` resolves every dependency (with `lib_path` on LD_LIBRARY_PATH).
fn assert_ldd_resolves(path: &Path, lib_path: &Path) {
    let out = Command::new("ldd")
        .arg(path)
        .env("LD_LIBRARY_PATH", lib_path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ldd {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains("not found"),
        "ldd {}: unresolved dependency (Debian's libamdhip64 needs libhsa-runtime64-1: apt-get install libhsa-runtime64-1):\n{text}",
        path.display()
    );
}

fn dir_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for sub in [dir.to_path_buf(), dir.join(".kpack")] {
        let Ok(rd) = fs::read_dir(&sub) else { continue };
        for e in rd {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                let name = e.path().strip_prefix(dir).unwrap().display().to_string();
                out.insert(name, fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Runs a fixture (original or split) against the stand-in HIP runtime and
/// returns its registrations.
fn run_recorded(fx: &fixtures::Fixture, path: &Path, record: &Path) -> Vec<fixtures::Registration> {
    fs::create_dir_all(record).unwrap();
    let f = fixtures::Fixture {
        path: path.to_path_buf(),
        ..fx.clone()
    };
    let out = fixtures::command(&f, Some(record)).output().unwrap();
    assert!(
        out.status.success(),
        "{} exited with {}: {}",
        path.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    fixtures::read_registrations(record).unwrap()
}

#[test]
fn fixtures_split_round_trip_run_and_pass_binutils() {
    let all = fixtures::all_fat();
    assert_eq!(all.len(), 15);
    for fx in all {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let report = split(&fx.path, &out);
        let what = format!("{}/{}", fx.set, fx.binary.name);
        assert_eq!(report.outcome, SplitOutcome::Split, "{what}");
        assert_eq!(report.bundles, fx.binary.bundles, "{what}");
        assert_eq!(report.wrappers.len(), fx.binary.wrappers, "{what}");
        assert_eq!(report.output, out.join(fx.binary.name));
        assert_eq!(mode(&report.output), mode(&fx.path), "{what}: mode bits");
        let co_total: usize = fx.binary.bundles * fx.arches().len();
        assert_eq!(report.code_objects, co_total, "{what}");

        let mut back = check_round_trip(&fx.path, &report);
        assert_eq!(back.marker.kernel_name, fx.binary.name);
        let component = fx.binary.name.split('.').next().unwrap();
        assert_eq!(
            back.marker.kpack_search_paths,
            [
                format!(".kpack/{component}.kpm"),
                format!(".kpack/{component}_@GFXARCH@.kpack")
            ]
        );

        // One archive per processor, named after it, in its group's tree;
        // a generic ISA has one archive of its own.
        let units: Vec<(&str, &str)> = report
            .archives
            .iter()
            .map(|a| (a.unit.as_str(), a.group.as_str()))
            .collect();
        let mut want = vec![
            ("gfx1030", "gfx1030"),
            ("gfx1100", "gfx1100"),
            ("gfx1101", "gfx1101"),
            ("gfx90a", "gfx90a"),
        ];
        if fx.set != "clang15" {
            want.insert(1, ("gfx11-generic", "gfx11-generic"));
            want.push(("gfx942", "gfx942"));
        }
        assert_eq!(units, want, "{what}");
        for a in &report.archives {
            assert_eq!(
                a.path.file_name().unwrap().to_string_lossy(),
                format!("{component}_{}.kpack", a.unit),
                "{what}"
            );
            let processors: BTreeSet<&str> = a
                .architectures
                .iter()
                .map(|t| t.split(':').next().unwrap())
                .collect();
            assert_eq!(processors, BTreeSet::from([a.unit.as_str()]), "{what}");
        }
        let a90 = report.archives.iter().find(|a| a.unit == "gfx90a").unwrap();
        assert_eq!(
            a90.architectures,
            ["gfx90a:xnack+", "gfx90a:xnack-"],
            "{what}"
        );
        // AMD's loader, expanding @GFXARCH@ with the target id and then its
        // processor, finds every code object without the .kpm.
        let found = check_pattern_finds(&report.output, &fx.path, fx.arches()).unwrap();
        assert_eq!(found, co_total, "{what}");

        // The device code left the file.
        assert!(
            report.output_size + report.fatbin_size - 8192 < report.input_size,
            "{what}: {} -> {} bytes with a {}-byte .hip_fatbin",
            report.input_size,
            report.output_size,
            report.fatbin_size
        );

        assert_readelf_clean(&report.output);
        assert_elflint_nothing_new(&fx.path, &report.output);
        let (stripped, _) =
            assert_binutils_keep_marker(&report.output, &back.marker_bytes, tmp.path());
        assert_ldd_resolves(&report.output, &fixtures::stub_lib_dir());

        // It runs, and the stand-in runtime receives HIPK wrappers whose
        // pointer reaches the marker; the original run's bundles are what
        // the archives hold for the same registration.
        let orig_regs = run_recorded(&fx, &fx.path, &tmp.path().join("rec-orig"));
        let regs = run_recorded(&fx, &report.output, &tmp.path().join("rec-split"));
        assert!(!regs.is_empty(), "{what}: no registration");
        assert_eq!(regs.len(), orig_regs.len(), "{what}");
        for (o, r) in orig_regs.iter().zip(&regs) {
            assert_eq!(r.magic, HIPK_MAGIC, "{what}");
            assert_eq!(r.kind, fixtures::PayloadKind::Marker, "{what}");
            assert_eq!(
                r.payload, back.marker_bytes,
                "{what}: marker bytes at the pointer"
            );
            let co = (r.reserved1 & 0xffff_ffff) as u32;
            // A bundle or CCOB, as the original wrapper handed it over.
            let b = bundle::parse_bundle_at(&o.payload, 0).unwrap();
            assert!(back.co_indices.contains(&co), "{what}: co_index {co}");
            for (t, d) in b.code_objects() {
                assert!(
                    back.kernel(co, t) == d,
                    "{what} {t}: registered bundle vs archive"
                );
            }
        }
        // The stripped binary still runs too.
        let regs = run_recorded(&fx, &stripped, &tmp.path().join("rec-stripped"));
        assert!(regs
            .iter()
            .all(|r| r.magic == HIPK_MAGIC && r.payload == back.marker_bytes));
    }
}

#[test]
fn deterministic_idempotent_and_unchanged_copies() {
    let fx = fixtures::fixture("clang15/libmulti.so");
    let tmp = tempfile::tempdir().unwrap();
    let a = split(&fx, &tmp.path().join("a"));
    let b = split(&fx, &tmp.path().join("b"));
    assert_eq!(a.outcome, SplitOutcome::Split);
    let (fa, fb) = (
        dir_files(&tmp.path().join("a")),
        dir_files(&tmp.path().join("b")),
    );
    assert_eq!(fa.keys().collect::<Vec<_>>(), fb.keys().collect::<Vec<_>>());
    assert_eq!(fa, fb, "same input, byte-identical outputs");
    assert!(fa.contains_key(".kpack/libmulti.kpm"));
    assert!(fa.contains_key(".kpack/libmulti_gfx90a.kpack"));
    assert_eq!(
        b.wrappers.iter().map(|w| w.co_index).collect::<Vec<_>>(),
        [0, 1, 2]
    );

    // Splitting the split binary: reported, copied unchanged, no archives.
    let again = split(&a.output, &tmp.path().join("c"));
    assert_eq!(again.outcome, SplitOutcome::AlreadySplit);
    assert!(again
        .note
        .as_deref()
        .unwrap_or("")
        .contains(".rocm_kpack_ref"));
    assert_eq!(
        fs::read(&again.output).unwrap(),
        fs::read(&a.output).unwrap()
    );
    assert!(!tmp.path().join("c/.kpack").exists());

    // A host-only binary is copied unchanged, mode kept.
    let host = fixtures::run_lib();
    let r = split(&host, &tmp.path().join("d"));
    assert_eq!(r.outcome, SplitOutcome::HostOnly);
    assert_eq!(fs::read(&r.output).unwrap(), fs::read(&host).unwrap());
    assert_eq!(mode(&r.output), mode(&host));
    assert!(!tmp.path().join("d/.kpack").exists());
}

#[test]
fn per_target_spec_component_and_uncompressed_archives() {
    let fx = fixtures::fixture("clang19/libfixture.so");
    let tmp = tempfile::tempdir().unwrap();
    let spec = Spec::per_target(&fixtures::ARCHES_CLANG19).unwrap();
    let opts = SplitBinaryOptions {
        component: Some("fixture_lib".into()),
        spec,
        output: ArchiveOutput {
            compression: Some(CompressionScheme::None),
            ..ArchiveOutput::fast()
        },
    };
    let r = split_with(&fx, &tmp.path().join("o"), &opts);
    let names: Vec<String> = r
        .archives
        .iter()
        .map(|a| a.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    // Feature variants share their processor's archive; no ':' in names;
    // gfx11-generic has its own group and archive, and is not copied into
    // gfx1100/gfx1101 (a runtime falls back to it by name).
    assert_eq!(
        names,
        [
            "fixture_lib_gfx1030.kpack",
            "fixture_lib_gfx11-generic.kpack",
            "fixture_lib_gfx1100.kpack",
            "fixture_lib_gfx1101.kpack",
            "fixture_lib_gfx90a.kpack",
            "fixture_lib_gfx942.kpack",
        ]
    );
    let a90 = r.archives.iter().find(|a| a.group == "gfx90a").unwrap();
    assert_eq!(a90.architectures, ["gfx90a:xnack+", "gfx90a:xnack-"]);
    let a1100 = Archive::open(
        &r.archives
            .iter()
            .find(|a| a.group == "gfx1100")
            .unwrap()
            .path,
    )
    .unwrap();
    assert_eq!(a1100.scheme(), CompressionScheme::None);
    assert!(!a1100.has_arch("gfx11-generic") && a1100.has_arch("gfx1100"));
    assert_eq!(
        r.manifest.as_deref(),
        Some(tmp.path().join("o/.kpack/fixture_lib.kpm").as_path())
    );
    check_round_trip(&fx, &r);

    // A target the spec does not cover is an error naming it, with no output.
    let narrow = SplitBinaryOptions {
        spec: Spec::per_target(&["gfx1100"]).unwrap(),
        ..SplitBinaryOptions::default()
    };
    let out = tmp.path().join("narrow");
    fs::create_dir(&out).unwrap();
    let e = chain(&split_binary(&fx, &out, &narrow).unwrap_err());
    assert!(
        e.contains("gfx1030, gfx1101, gfx90a:xnack+, gfx90a:xnack-, gfx942:sramecc+")
            && e.contains("not covered"),
        "{e}"
    );
    assert_eq!(fs::read_dir(&out).unwrap().count(), 0);
}

#[test]
fn librocrand_round_trip_dlopen_and_binutils() {
    let input = debian::librocrand_so().unwrap();
    let hip = debian::libamdhip64_so().unwrap();
    let hip_dir = hip.parent().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let r = split(&input, &out);
    assert_eq!(r.outcome, SplitOutcome::Split);
    assert_eq!((r.bundles, r.code_objects, r.wrappers.len()), (1, 7, 1));
    let units: Vec<(&str, &str)> = r
        .archives
        .iter()
        .map(|a| (a.unit.as_str(), a.group.as_str()))
        .collect();
    assert_eq!(
        units,
        [
            ("gfx1030", "gfx1030"),
            ("gfx803", "gfx803"),
            ("gfx900", "gfx900"),
            ("gfx906", "gfx906"),
            ("gfx908", "gfx908"),
            ("gfx90a", "gfx90a")
        ]
    );
    let back = check_round_trip(&input, &r);
    let arches: Vec<&str> = r
        .archives
        .iter()
        .flat_map(|a| a.architectures.iter().map(String::as_str))
        .collect();
    assert_eq!(check_pattern_finds(&r.output, &input, &arches), Ok(7));
    assert_eq!(back.marker.kernel_name, "librocrand.so.1.1");
    assert_eq!(back.marker.kpack_search_paths[0], ".kpack/librocrand.kpm");
    assert!(r.input_size - r.output_size >= r.fatbin_size - 8192);

    assert_readelf_clean(&r.output);
    assert_elflint_nothing_new(&input, &r.output);
    // Debian's package ships the libamdhip64.so.5 SONAME link beside it.
    assert!(hip_dir.join("libamdhip64.so.5").exists());
    assert_ldd_resolves(&r.output, hip_dir);

    // dlopen + dlsym of a public host function, original and split.
    let prog = tmp.path().join("dlopen_rocrand");
    compile_c(
        r#"#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
  int (*get_version)(int *) = (int (*)(int *))dlsym(h, "rocrand_get_version");
  if (!get_version) { fprintf(stderr, "dlsym: %s\n", dlerror()); return 3; }
  int v = 0;
  int status = get_version(&v);
  printf("%d %d\n", status, v);
  return status;
}
"#,
        &prog,
    );
    let run = |lib: &Path| run_with_libs(&prog, &[lib.as_os_str()], hip_dir);
    let orig = run(&input);
    assert_eq!(orig.trim(), "0 201009");
    assert_eq!(run(&r.output), orig);
    // And after strip (what packagers ship).
    let (stripped, _) = assert_binutils_keep_marker(&r.output, &back.marker_bytes, tmp.path());
    assert_eq!(run(&stripped), orig);
}

#[test]
fn librocsparse_counts_size_and_compression() {
    let input = debian::librocsparse_so().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let r = split(&input, &out);
    assert_eq!(
        (r.bundles, r.code_objects, r.wrappers.len()),
        (111, 777, 111)
    );
    let arches: BTreeSet<&str> = r
        .archives
        .iter()
        .flat_map(|a| a.architectures.iter().map(String::as_str))
        .collect();
    assert_eq!(arches.len(), 7, "{arches:?}");
    assert_eq!(r.archives.iter().map(|a| a.entries).sum::<usize>(), 777);
    // co_index follows the bundle each wrapper pointed at.
    let mut seen: Vec<u32> = r.wrappers.iter().map(|w| w.co_index).collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..111).collect::<Vec<u32>>());
    let back = check_round_trip(&input, &r);

    // Host-only size: within 64 KiB of (original - .hip_fatbin).
    let bound = r.input_size - r.fatbin_size;
    assert!(
        r.output_size.abs_diff(bound) <= 64 * 1024,
        "host-only {} bytes vs input - .hip_fatbin = {bound}",
        r.output_size
    );
    assert_readelf_clean(&r.output);
    assert_elflint_nothing_new(&input, &r.output);
    let (stripped, _) = assert_binutils_keep_marker(&r.output, &back.marker_bytes, tmp.path());
    // dlopen (every symbol bound, constructors run) against Debian's HIP
    // runtime, before and after strip.
    let hip_dir = debian::libamdhip64_so()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    for lib in [&input, &r.output, &stripped] {
        assert_dlopen_finds(lib, "rocsparse_create_handle", &hip_dir, tmp.path());
    }

    // The gfx9 archives (zstd 3) <= per-kernel `zstd -3` of the same code
    // objects.
    let family: Vec<_> = r
        .archives
        .iter()
        .filter(|a| a.unit.starts_with("gfx90"))
        .collect();
    assert_eq!(family.len(), 4, "gfx900 gfx906 gfx908 gfx90a");
    let kdir = tmp.path().join("kernels");
    fs::create_dir(&kdir).unwrap();
    let mut files = Vec::new();
    for g in &family {
        let archive = Archive::open(&g.path).unwrap();
        for (binary, arch, _) in archive.entries() {
            let p = kdir.join(format!("{}.co", files.len()));
            fs::write(&p, archive.kernel(binary, arch).unwrap()).unwrap();
            files.push(p);
        }
    }
    assert_eq!(files.len(), 555);
    let st = Command::new("zstd")
        .args(["-3", "-q", "-f"])
        .args(&files)
        .status()
        .unwrap();
    assert!(st.success());
    let per_kernel: u64 = files
        .iter()
        .map(|p| fs::metadata(p.with_extension("co.zst")).unwrap().len())
        .sum();
    let size: u64 = family.iter().map(|a| a.size).sum();
    assert!(
        size <= per_kernel,
        "gfx9 archives {size} bytes > per-kernel zstd -3 {per_kernel}"
    );
}

/// Every error: a clear message, the input untouched, no output left.
#[test]
fn errors_leave_input_untouched_and_no_output() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = fs::read(fixtures::fixture("clang15/libfixture.so")).unwrap();
    let nopie = fs::read(fixtures::fixture("clang15/app_nopie")).unwrap();
    let file = ElfFile64::<LittleEndian>::parse(&*lib).unwrap();
    let fatbin = file.section_by_name(".hip_fatbin").unwrap();
    let (fat_off, _) = fatbin.file_range().unwrap();
    let wseg = file.section_by_name(".hipFatBinSegment").unwrap();
    let slot = wseg.address() + 8;
    let text = file.section_by_name(".text").unwrap().address();
    // RELA entries (r_offset, r_info, r_addend) of .rela.dyn.
    let rela = file.section_by_name(".rela.dyn").unwrap();
    let (rela_off, _) = rela.file_range().unwrap();
    let entries: Vec<(usize, u64, u64)> = rela
        .data()
        .unwrap()
        .chunks_exact(24)
        .enumerate()
        .map(|(i, e)| {
            (
                rela_off as usize + i * 24,
                u64::from_le_bytes(e[0..8].try_into().unwrap()),
                u64::from_le_bytes(e[8..16].try_into().unwrap()),
            )
        })
        .collect();
    let patch_addend = |data: &mut Vec<u8>, pick: &dyn Fn(u64) -> bool, value: u64| {
        let (at, _, _) = entries
            .iter()
            .find(|(_, off, info)| pick(*off) && info & 0xffff_ffff == 8)
            .expect("a RELATIVE relocation to patch");
        data[at + 16..at + 24].copy_from_slice(&value.to_le_bytes());
    };

    let mut cases: Vec<(&str, Vec<u8>, &str)> = Vec::new();
    cases.push((
        "not-elf",
        b"#!/bin/sh\necho not a binary\n".to_vec(),
        "not an ELF file",
    ));
    cases.push(("truncated", lib[..40].to_vec(), "truncated"));
    cases.push(("truncated-tables", lib[..4096].to_vec(), "truncated"));
    let mut elf32 = lib.clone();
    elf32[4] = 1;
    cases.push(("elf32", elf32, "32-bit"));
    let mut arm = lib.clone();
    arm[18..20].copy_from_slice(&183u16.to_le_bytes());
    cases.push(("aarch64", arm, "x86-64"));
    let mut no_seg = lib.clone();
    let name = b".hipFatBinSegment\0";
    let mut n = 0;
    for i in 0..no_seg.len() - name.len() {
        if &no_seg[i..i + name.len()] == name {
            no_seg[i + 16] = b'X';
            n += 1;
        }
    }
    assert!(n > 0);
    cases.push(("no-wrapper-section", no_seg, "no .hipFatBinSegment"));
    let mut outside = lib.clone();
    patch_addend(&mut outside, &|off| off == slot, text);
    cases.push(("wrapper-outside", outside, "outside .hip_fatbin"));
    let mut outside_exec = nopie.clone();
    {
        let f = ElfFile64::<LittleEndian>::parse(&*nopie).unwrap();
        let w = f.section_by_name(".hipFatBinSegment").unwrap();
        let (woff, _) = w.file_range().unwrap();
        let t = f.section_by_name(".text").unwrap().address();
        outside_exec[woff as usize + 8..woff as usize + 16].copy_from_slice(&t.to_le_bytes());
    }
    cases.push(("wrapper-outside-nopie", outside_exec, "outside .hip_fatbin"));
    let mut corrupt = lib.clone();
    corrupt[fat_off as usize..fat_off as usize + 8].copy_from_slice(b"GARBAGE!");
    cases.push(("corrupt-bundle", corrupt, "corrupted offload bundle"));
    let mut dangling = lib.clone();
    patch_addend(&mut dangling, &|off| off != slot, fatbin.address() + 16);
    cases.push(("other-pointer-into-fatbin", dangling, "refusing"));

    for (name, bytes, expect) in cases {
        let input = tmp.path().join(name);
        fs::write(&input, &bytes).unwrap();
        let before = fs::metadata(&input).unwrap().modified().unwrap();
        let out = tmp.path().join(format!("out-{name}"));
        fs::create_dir(&out).unwrap();
        let err = split_binary(&input, &out, &SplitBinaryOptions::default())
            .err()
            .unwrap_or_else(|| panic!("{name}: split succeeded"));
        let msg = chain(&err);
        assert!(msg.contains(expect), "{name}: {msg:?} lacks {expect:?}");
        assert!(
            msg.contains(name),
            "{name}: message does not name the file: {msg}"
        );
        assert_eq!(fs::read(&input).unwrap(), bytes, "{name}: input modified");
        assert_eq!(fs::metadata(&input).unwrap().modified().unwrap(), before);
        let left: Vec<_> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(left.is_empty(), "{name}: left behind {left:?}");
    }

    // Output directory not writable: permission bits, or (as root, who
    // ignores them) a read-only file system.
    let input = fixtures::fixture("clang15/libfixture.so");
    let ro = tmp.path().join("ro");
    fs::create_dir(&ro).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
    let privileged = fs::write(ro.join("probe"), b"").is_ok();
    let _ = fs::remove_file(ro.join("probe"));
    let target = if privileged {
        PathBuf::from("/sys")
    } else {
        ro.clone()
    };
    let before: BTreeSet<_> = fs::read_dir(&target)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let err = split_binary(&input, &target, &SplitBinaryOptions::default()).unwrap_err();
    let msg = chain(&err);
    assert!(msg.contains("cannot create"), "{msg}");
    let after: BTreeSet<_> = fs::read_dir(&target)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before, after, "left behind in {}", target.display());
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o755)).unwrap();

    // The output directory holding the input itself is refused.
    let dir = tmp.path().join("same");
    fs::create_dir(&dir).unwrap();
    fs::copy(&input, dir.join("libfixture.so")).unwrap();
    let msg = chain(
        &split_binary(
            &dir.join("libfixture.so"),
            &dir,
            &SplitBinaryOptions::default(),
        )
        .unwrap_err(),
    );
    assert!(msg.contains("is the input itself"), "{msg}");
    assert_eq!(
        fs::read(dir.join("libfixture.so")).unwrap(),
        fs::read(&input).unwrap()
    );
}

/// Corrupting header, table, relocation, wrapper and bundle bytes of a
/// fat binary, or truncating it anywhere, gives an error or a verified
/// split, never a panic.
#[test]
fn corrupted_inputs_never_panic() {
    use rocm_kpack_splitter::split::binary::{split_fat_elf, ElfSplit};
    let orig = fs::read(fixtures::fixture("clang19-compressed/libfixture.so")).unwrap();
    let paths = || vec![".kpack/x.kpm".to_string()];
    let file = ElfFile64::<LittleEndian>::parse(&*orig).unwrap();
    let mut regions: Vec<(usize, usize)> = vec![(0, 64)];
    let h = |o: usize, n: usize| {
        u64::from_le_bytes(orig[o..o + n].try_into().unwrap_or([0; 8])) as usize
    };
    let (phoff, shoff) = (h(32, 8), h(40, 8));
    regions.push((phoff, 56 * 16));
    regions.push((shoff, orig.len() - shoff));
    for name in [
        ".dynamic",
        ".rela.dyn",
        ".hipFatBinSegment",
        ".hip_fatbin",
        ".shstrtab",
        ".dynsym",
    ] {
        if let Some((off, size)) = file.section_by_name(name).and_then(|s| s.file_range()) {
            regions.push((off as usize, (size as usize).min(256)));
        }
    }
    let mut splits = 0;
    for &(start, len) in &regions {
        for i in start..(start + len).min(orig.len()) {
            for v in [0x00u8, 0xff, 0x80, 0x01] {
                if orig[i] == v {
                    continue;
                }
                let mut bytes = orig.clone();
                bytes[i] = v;
                if let Ok(ElfSplit::Split(_)) = split_fat_elf(&bytes, "k", paths()) {
                    splits += 1;
                }
            }
        }
    }
    assert!(
        splits > 0,
        "some corruptions (e.g. of unused bytes) still split"
    );
    for cut in (0..orig.len()).step_by(7) {
        assert!(
            split_fat_elf(&orig[..cut], "k", paths()).is_err(),
            "truncated at {cut}"
        );
    }
}

/// `--jobs 20000` with a budget that affords 20000 compression contexts
/// (no compression, 30 GiB) starts no more threads than the cores can use
/// (`budget::max_threads`), and says so. The thread count is sampled from
/// `/proc/<pid>/task` while the command runs.
#[test]
fn jobs_beyond_the_cores_are_capped_with_a_warning() {
    use rocm_kpack_splitter::budget::max_threads;
    use rocm_kpack_test_support::bins;
    let dir = tempfile::tempdir().unwrap();
    let input = fixtures::fixture("clang19/libmulti.so");
    let mut child = bins::command("rocm-kpack")
        .args(["split-binary", "--jobs", "20000", "--compression", "none"])
        .args(["--memory", "30G", "--out"])
        .arg(dir.path().join("out"))
        .arg(&input)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let task = PathBuf::from(format!("/proc/{}/task", child.id()));
    let mut most = 0;
    while child.try_wait().unwrap().is_none() {
        if let Ok(entries) = fs::read_dir(&task) {
            most = most.max(entries.count());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cap = max_threads(cores);
    assert!(
        stderr.contains(&format!("--jobs 20000: running {cap} threads")),
        "{stderr}"
    );
    // The pool, the main thread and a few helpers.
    assert!(most <= cap + 8, "{most} threads (cap {cap})");
}
