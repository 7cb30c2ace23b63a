//! The committed fat-binary fixtures and Debian's librocrand, checked against
//! the real tools: every bundle our parser finds lists the same entries as
//! `clang-offload-bundler --list`, and every code object is byte-identical to
//! what `clang-offload-bundler --unbundle` extracts. Also: wrappers point at
//! bundle starts (through dynamic relocations where PIC), CCOB fixtures hold
//! the same code objects as their uncompressed twins, and the fixtures run
//! against the stand-in HIP runtime, which records the bundles it is given.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use object::{Object, ObjectSection, ObjectSymbol, RelocationFlags};
use rocm_kpack_format::bundle::{compress_ccob, parse_fatbin, Bundle, CcobMethod};
use rocm_kpack_format::wrapper::{FatbinWrapper, WRAPPER_SIZE};
use rocm_kpack_test_support::clang::{bundler_list, bundler_unbundle};
use rocm_kpack_test_support::debian;
use rocm_kpack_test_support::fixtures::{self, Fixture, PayloadKind};

/// A fat binary's sections of interest.
struct FatElf {
    fatbin: Vec<u8>,
    fatbin_addr: u64,
    /// Each wrapper and the address its `binary` pointer resolves to.
    wrappers: Vec<(FatbinWrapper, u64)>,
}

fn read_fat_elf(path: &Path) -> FatElf {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = object::File::parse(&*bytes).expect("ELF");
    let fb = file.section_by_name(".hip_fatbin").expect(".hip_fatbin");
    let seg = file
        .section_by_name(".hipFatBinSegment")
        .expect(".hipFatBinSegment");
    let seg_data = seg.data().expect("segment data");
    let wrappers = FatbinWrapper::parse_all(seg_data).expect("wrappers");
    // Resolve each wrapper's pointer: the dynamic relocation at the field if
    // there is one (PIE, shared object), else the in-file value.
    let mut relocs = BTreeMap::new();
    if let Some(iter) = file.dynamic_relocations() {
        for (at, r) in iter {
            relocs.insert(at, r);
        }
    }
    let dynsyms: Vec<u64> = file.dynamic_symbols().map(|s| s.address()).collect();
    let resolved = wrappers
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            let field = seg.address() + (i * WRAPPER_SIZE) as u64 + 8;
            let target = match relocs.get(&field) {
                None => w.binary,
                Some(r) => match r.flags() {
                    RelocationFlags::Elf {
                        r_type: object::elf::R_X86_64_RELATIVE,
                    } => r.addend() as u64,
                    RelocationFlags::Elf {
                        r_type: object::elf::R_X86_64_64,
                    } => {
                        let sym = match r.target() {
                            object::RelocationTarget::Symbol(idx) => idx.0,
                            other => panic!("R_X86_64_64 against {other:?}"),
                        };
                        // Dynamic symbol indices count the null symbol.
                        let base = dynsyms.get(sym.wrapping_sub(1)).copied().unwrap_or(0);
                        base.wrapping_add(r.addend() as u64)
                    }
                    other => panic!("{}: unexpected relocation {other:?}", path.display()),
                },
            };
            (w, target)
        })
        .collect();
    FatElf {
        fatbin: fb.data().expect("fatbin data").to_vec(),
        fatbin_addr: fb.address(),
        wrappers: resolved,
    }
}

/// Compares every bundle of `section` with clang-offload-bundler's view.
/// Returns (target, size) per bundle.
fn check_against_bundler(label: &str, section: &[u8]) -> Vec<Vec<(String, usize)>> {
    let dir = tempfile::tempdir().expect("tempdir");
    let bundles = parse_fatbin(section).unwrap_or_else(|e| panic!("{label}: {e}"));
    let mut summary = Vec::new();
    for (i, b) in bundles.iter().enumerate() {
        let raw = &section[b.offset as usize..(b.offset + b.len) as usize];
        let file = dir.path().join(format!("bundle{i}"));
        std::fs::write(&file, raw).expect("write bundle");
        let mut ours: Vec<String> = b.entries.iter().map(|e| e.triple.clone()).collect();
        ours.sort();
        assert_eq!(ours, bundler_list(&file), "{label} bundle {i}: entry list");
        let device: Vec<_> = b.entries.iter().filter(|e| !e.is_host()).collect();
        let triples: Vec<&str> = device.iter().map(|e| e.triple.as_str()).collect();
        let theirs = bundler_unbundle(&file, &triples, dir.path());
        let mut s = Vec::new();
        for (e, bytes) in device.iter().zip(&theirs) {
            let mine = b.entry_data(e).expect("entry data");
            assert!(
                mine == &bytes[..],
                "{label} bundle {i} {}: bytes differ",
                e.triple
            );
            assert_eq!(e.size as usize, bytes.len());
            s.push((e.target_id().expect("target id").to_string(), bytes.len()));
        }
        summary.push(s);
    }
    summary
}

#[test]
fn fixtures_match_clang_offload_bundler() {
    for fx in fixtures::all_fat() {
        let label = format!("{}/{}", fx.set, fx.binary.name);
        let elf = read_fat_elf(&fx.path);
        let summary = check_against_bundler(&label, &elf.fatbin);
        assert_eq!(summary.len(), fx.binary.bundles, "{label}: bundles");
        for targets in &summary {
            let mut t: Vec<&str> = targets.iter().map(|(t, _)| t.as_str()).collect();
            t.sort();
            assert_eq!(t, fx.arches(), "{label}");
        }
    }
}

#[test]
fn wrappers_point_at_bundle_starts() {
    for fx in fixtures::all_fat() {
        let label = format!("{}/{}", fx.set, fx.binary.name);
        let elf = read_fat_elf(&fx.path);
        let bundles = parse_fatbin(&elf.fatbin).expect("parse");
        assert_eq!(elf.wrappers.len(), fx.binary.wrappers, "{label}: wrappers");
        let starts: Vec<u64> = bundles.iter().map(|b| elf.fatbin_addr + b.offset).collect();
        let mut hit = vec![false; starts.len()];
        for (w, target) in &elf.wrappers {
            assert!(
                w.is_hipf() && w.version == 1 && w.reserved1 == 0,
                "{label}: {w:?}"
            );
            let idx = starts.iter().position(|s| s == target).unwrap_or_else(|| {
                panic!("{label}: wrapper points at {target:#x}, not a bundle start")
            });
            hit[idx] = true;
        }
        assert!(
            hit.iter().all(|&h| h),
            "{label}: a bundle without a wrapper"
        );
    }
}

/// Code objects by target of every bundle of a fixture.
fn code_objects(path: &Path) -> Vec<BTreeMap<String, Vec<u8>>> {
    let elf = read_fat_elf(path);
    parse_fatbin(&elf.fatbin)
        .expect("parse")
        .iter()
        .map(|b: &Bundle| {
            b.code_objects()
                .map(|(t, d)| (t.to_string(), d.to_vec()))
                .collect()
        })
        .collect()
}

#[test]
fn ccob_fixtures_hold_the_code_objects_of_their_twins() {
    for fx in fixtures::all_fat().into_iter().filter(|f| f.compressed) {
        let twin = fx.uncompressed_twin();
        let ours = code_objects(&fx.path);
        assert!(!ours.is_empty());
        assert!(
            ours == code_objects(&twin),
            "{}: differs from {}",
            fx.path.display(),
            twin.display()
        );
    }
}

#[test]
fn compress_ccob_variants_of_fixtures_parse_back_identically() {
    for fx in fixtures::all_fat().into_iter().filter(|f| !f.compressed) {
        let elf = read_fat_elf(&fx.path);
        let plain = parse_fatbin(&elf.fatbin).expect("parse");
        for version in [1u16, 2, 3] {
            for method in [CcobMethod::Zlib, CcobMethod::Zstd] {
                let mut section = Vec::new();
                for b in &plain {
                    section.resize(section.len().next_multiple_of(4096), 0);
                    section.extend(compress_ccob(&b.data, version, method).expect("compress"));
                }
                let back = parse_fatbin(&section).expect("parse ccob");
                assert_eq!(back.len(), plain.len());
                for (a, b) in back.iter().zip(&plain) {
                    assert!(
                        a.data == b.data,
                        "{} v{version} {method}",
                        fx.path.display()
                    );
                    assert_eq!(a.entries, b.entries);
                }
            }
        }
    }
}

#[test]
fn fixtures_run_against_the_stand_in_runtime() {
    for fx in fixtures::all_fat() {
        let label = format!("{}/{}", fx.set, fx.binary.name);
        let record = tempfile::tempdir().expect("tempdir");
        let out = fixtures::command(&fx, Some(record.path()))
            .env("HIPSTUB_STRICT", "1")
            .output()
            .expect("run fixture");
        assert!(
            out.status.success(),
            "{label}: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        check_registrations(&fx, record.path(), &label);
    }
}

fn check_registrations(fx: &Fixture, record: &Path, label: &str) {
    let elf = read_fat_elf(&fx.path);
    let bundles = parse_fatbin(&elf.fatbin).expect("parse");
    let mut expected: Vec<&[u8]> = bundles
        .iter()
        .map(|b| &elf.fatbin[b.offset as usize..(b.offset + b.len) as usize])
        .collect();
    let regs = fixtures::read_registrations(record).expect("records");
    // One registration per bundle (with -fgpu-rdc the TUs share one handle).
    assert_eq!(regs.len(), fx.binary.bundles, "{label}: registrations");
    for r in &regs {
        assert_eq!(
            (r.magic, r.version),
            (rocm_kpack_format::wrapper::HIPF_MAGIC, 1),
            "{label}"
        );
        let kind = if fx.compressed {
            PayloadKind::Ccob
        } else {
            PayloadKind::Bundle
        };
        assert_eq!(r.kind, kind, "{label}");
        assert!(!r.truncated, "{label}");
        let pos = expected
            .iter()
            .position(|e| *e == &r.payload[..])
            .unwrap_or_else(|| panic!("{label}: recorded payload is not one of the bundles"));
        expected.remove(pos);
    }
    let log = fixtures::read_call_log(record).expect("log");
    let launches: Vec<&String> = log.iter().filter(|l| l.starts_with("launch ")).collect();
    assert!(!launches.is_empty(), "{label}: no launches logged");
    assert!(
        launches.iter().all(|l| !l.starts_with("launch ? ")),
        "{label}: launch of an unregistered kernel: {launches:?}"
    );
    let unregisters = log.iter().filter(|l| l.starts_with("unregister ")).count();
    assert_eq!(unregisters, regs.len(), "{label}: {log:?}");
}

#[test]
fn stand_in_records_markers_and_exact_bundle_extents() {
    let run = |mode: &str, strict: bool| {
        let record = tempfile::tempdir().expect("tempdir");
        let mut cmd = Command::new(fixtures::stub_probe());
        cmd.arg(mode)
            .env("LD_LIBRARY_PATH", fixtures::stub_lib_dir())
            .env("HIPSTUB_RECORD", record.path());
        if strict {
            cmd.env("HIPSTUB_STRICT", "1");
        }
        let status = cmd.status().expect("run stub_probe");
        let regs = fixtures::read_registrations(record.path()).expect("records");
        (status.code(), regs)
    };
    // HIPK: exactly the MessagePack marker, not the bytes after it.
    let (code, regs) = run("hipk", false);
    assert_eq!(code, Some(0));
    assert_eq!(regs.len(), 1);
    let r = &regs[0];
    assert_eq!(
        (r.magic, r.version, r.reserved1),
        (rocm_kpack_format::wrapper::HIPK_MAGIC, 1, 5)
    );
    assert_eq!(r.kind, PayloadKind::Marker);
    let mut marker = vec![0x82, 0xb2];
    marker.extend_from_slice(b"kpack_search_paths");
    marker.extend_from_slice(&[0x91, 0xaf]);
    marker.extend_from_slice(b"../.kpack/x.kpm");
    marker.push(0xab);
    marker.extend_from_slice(b"kernel_name");
    marker.push(0xab);
    marker.extend_from_slice(b"lib/libx.so");
    assert_eq!(r.payload, marker);
    // HIPF on the heap: the bundle up to its last entry's end, no filler.
    let (code, regs) = run("hipf", false);
    assert_eq!(code, Some(0));
    assert_eq!(regs[0].kind, PayloadKind::Bundle);
    assert_eq!(regs[0].payload.len(), 104);
    let b = parse_fatbin(&regs[0].payload).expect("recorded bundle");
    assert_eq!(b[0].code_object("gfx1100"), Some(&b"\x7fELFdata"[..]));
    // Unknown magic: recorded without payload; strict mode rejects it and
    // HIPK like a stock runtime would.
    let (code, regs) = run("bad", false);
    assert_eq!(
        (code, regs[0].kind, regs[0].payload.len()),
        (Some(0), PayloadKind::None, 0)
    );
    assert_eq!(run("bad", true).0, Some(86));
    assert_eq!(run("hipk", true).0, Some(86));
    assert_eq!(run("hipf", true).0, Some(0));
}

#[test]
fn debian_librocrand_matches_clang_offload_bundler() {
    let so = debian::librocrand_so().expect("librocrand (apt-get download librocrand1)");
    let elf = read_fat_elf(&so);
    let summary = check_against_bundler("librocrand.so.1.1", &elf.fatbin);
    assert_eq!(summary.len(), 1, "librocrand: one bundle");
    let mut targets: Vec<&str> = summary[0].iter().map(|(t, _)| t.as_str()).collect();
    targets.sort();
    assert_eq!(targets, debian::LIBROCRAND_TARGETS);
    let bundles = parse_fatbin(&elf.fatbin).expect("parse");
    assert_eq!(elf.wrappers.len(), 1);
    assert_eq!(elf.wrappers[0].1, elf.fatbin_addr + bundles[0].offset);
}

#[test]
fn debian_packages_are_verified() {
    for p in debian::PACKAGES {
        if p.name == "librocsparse0" {
            continue; // 94 MB: benchmarks fetch it.
        }
        let deb = debian::package(p.name).expect("package");
        assert_eq!(debian::sha256_file(&deb).expect("sha256"), p.sha256);
    }
    // A tampered copy is rejected.
    let dir = tempfile::tempdir().expect("tempdir");
    let p = debian::pinned("librocrand1").expect("pinned");
    let mut bytes = std::fs::read(debian::package(p.name).expect("package")).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    let tampered = dir.path().join(p.file_name());
    std::fs::write(&tampered, &bytes).expect("write");
    let err = debian::verify_deb(&p, &tampered).expect_err("tampered accepted");
    assert!(err.to_string().contains("sha256"), "{err}");
    assert!(debian::pinned("libfoo").is_err());
}

/// The demo ships copies of fixtures (splitter/demo/binaries, the crate
/// cannot reach tests/): its generator's check says each equals the
/// fixture it was copied from, and every binary there is one it checks.
#[test]
fn demo_binaries_are_the_fixtures() {
    let dir = fixtures::fixtures_dir().join("../../splitter/demo/binaries");
    let script = dir.join("generate.sh");
    let out = Command::new("sh")
        .arg(&script)
        .arg("--check")
        .output()
        .expect("run generate.sh --check");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = std::fs::read_to_string(&script).expect("read generate.sh");
    for entry in std::fs::read_dir(&dir).expect("list the demo's binaries") {
        let name = entry.expect("entry").file_name();
        let name = name.to_string_lossy();
        assert!(
            name == "generate.sh"
                || listed
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(&*name)),
            "splitter/demo/binaries/{name} is not one generate.sh copies and checks"
        );
    }
}
