//! Windows (PE/COFF) fat binaries end to end, on the committed fixtures of
//! tests/fixtures/windows (clang-19 + lld-link DLL and EXE, plain bundles and
//! CCOB; 32-bit and ARM64 DLLs the splitter refuses). The original side of
//! each check is read independently of the splitter (`object`'s PE reader,
//! clang-offload-bundler); the split side the way a runtime would: wrapper
//! -> `.kpackrf` marker -> `.kpm` -> archive. Under Wine, the split EXE runs
//! with the split DLL against the stand-in amdhip64.dll, which records the
//! HIPK wrappers it receives, and the C ABI (rocm_kpack.dll, built for
//! x86_64-pc-windows-gnu) loads the original code objects given the
//! recorded marker.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use object::read::pe::{ImageNtHeaders, PeFile64};
use object::{Object, ObjectSection};
use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::bundle::{self, Bundle};
use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_format::marker::Marker;
use rocm_kpack_format::wrapper::{FatbinWrapper, HIPF_MAGIC, HIPK_MAGIC, WRAPPER_SIZE};
use rocm_kpack_splitter::inspect::{inspect, Report};
use rocm_kpack_splitter::split::binary::{
    split_binary, SplitBinaryOptions, SplitBinaryReport, SplitError, SplitOutcome,
};
use rocm_kpack_test_support::clang::{bundler_list, bundler_unbundle};
use rocm_kpack_test_support::fixtures::{self, PayloadKind};
use rocm_kpack_test_support::tree::chain;

const FAT: [&str; 4] = [
    "clang19/kpfix.dll",
    "clang19/kpapp.exe",
    "clang19-compressed/kpfix.dll",
    "clang19-compressed/kpapp.exe",
];
const ARCHES: [&str; 4] = ["gfx1030", "gfx1100", "gfx90a:xnack+", "gfx90a:xnack-"];

fn windows_dir() -> PathBuf {
    fixtures::fixtures_dir().join("windows")
}

fn fixture(rel: &str) -> PathBuf {
    windows_dir().join(rel)
}

fn split(input: &Path, out: &Path) -> SplitBinaryReport {
    fs::create_dir_all(out).unwrap();
    split_binary(input, out, &SplitBinaryOptions::default())
        .unwrap_or_else(|e| panic!("split {}: {}", input.display(), chain(&e)))
}

/// A PE image as `object` sees it: sections by name, image base, base
/// relocations (RVA -> type).
struct PeView {
    bytes: Vec<u8>,
    image_base: u64,
    sections: BTreeMap<String, (u32, u32, Vec<u8>)>,
    raw_sizes: BTreeMap<String, u32>,
    relocs: BTreeMap<u32, u16>,
    size_of_image: u32,
    size_of_initialized_data: u32,
    security_dir: (u32, u32),
}

impl PeView {
    fn read(path: &Path) -> PeView {
        let bytes = fs::read(path).unwrap();
        let file = PeFile64::parse(&*bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut sections = BTreeMap::new();
        let mut raw_sizes = BTreeMap::new();
        for s in file.sections() {
            raw_sizes.insert(
                s.name().unwrap().to_string(),
                s.pe_section().size_of_raw_data.get(object::LittleEndian),
            );
            let (rva, vsize) = s.pe_section().pe_address_range();
            sections.insert(
                s.name().unwrap().to_string(),
                (rva, vsize, s.data().unwrap().to_vec()),
            );
        }
        let mut relocs = BTreeMap::new();
        if let Some(mut blocks) = file
            .data_directories()
            .relocation_blocks(&*bytes, &file.section_table())
            .unwrap()
        {
            while let Some(block) = blocks.next().unwrap() {
                for r in block {
                    if r.typ.0 != 0 {
                        relocs.insert(r.virtual_address, r.typ.0);
                    }
                }
            }
        }
        let opt = file.nt_headers().optional_header();
        use object::read::pe::ImageOptionalHeader;
        let sec = file.data_directory(object::pe::IMAGE_DIRECTORY_ENTRY_SECURITY);
        PeView {
            image_base: file.relative_address_base(),
            size_of_image: opt.size_of_image(),
            size_of_initialized_data: opt.size_of_initialized_data(),
            security_dir: sec.map_or((0, 0), |d| {
                (
                    d.virtual_address.get(object::LittleEndian),
                    d.size.get(object::LittleEndian),
                )
            }),
            sections,
            raw_sizes,
            relocs,
            bytes: bytes.clone(),
        }
    }

    fn section(&self, name: &str) -> &(u32, u32, Vec<u8>) {
        self.sections
            .get(name)
            .unwrap_or_else(|| panic!("no {name} section"))
    }

    /// The wrappers of `.hipFatB` (linker padding dropped) with their RVAs.
    fn wrappers(&self) -> Vec<(u32, FatbinWrapper)> {
        let (rva, vsize, data) = self.section(".hipFatB");
        data[..*vsize as usize]
            .chunks_exact(WRAPPER_SIZE)
            .enumerate()
            .filter(|(_, c)| c.iter().any(|&b| b != 0))
            .map(|(i, c)| {
                (
                    rva + (i * WRAPPER_SIZE) as u32,
                    FatbinWrapper::parse(c).unwrap(),
                )
            })
            .collect()
    }

    fn fat_bytes(&self) -> &[u8] {
        let (_, vsize, data) = self.section(".hip_fat");
        &data[..(*vsize as usize).min(data.len())]
    }
}

#[test]
fn windows_fixtures_match_clang_offload_bundler() {
    let dir = tempfile::tempdir().unwrap();
    for rel in FAT {
        let pe = PeView::read(&fixture(rel));
        let section = pe.fat_bytes();
        let bundles = bundle::parse_fatbin(section).unwrap();
        let (fat_rva, _, _) = *pe.section(".hip_fat");
        let wrappers = pe.wrappers();
        assert_eq!(
            wrappers.len(),
            bundles.len(),
            "{rel}: one wrapper per bundle"
        );
        for (rva, w) in &wrappers {
            assert_eq!(w.magic, HIPF_MAGIC, "{rel}");
            let off = w.binary - pe.image_base - u64::from(fat_rva);
            assert!(
                bundles.iter().any(|b| b.offset == off),
                "{rel}: wrapper at {rva:#x} -> {off:#x}"
            );
            assert_eq!(
                pe.relocs.get(&(rva + 8)),
                Some(&10),
                "{rel}: DIR64 base relocation on the pointer"
            );
        }
        for (i, b) in bundles.iter().enumerate() {
            assert_eq!(b.is_compressed(), rel.contains("compressed"), "{rel}");
            let file = dir.path().join(format!("b{i}"));
            fs::write(
                &file,
                &section[b.offset as usize..(b.offset + b.len) as usize],
            )
            .unwrap();
            let mut ours: Vec<String> = b.entries.iter().map(|e| e.triple.clone()).collect();
            ours.sort();
            assert_eq!(ours, bundler_list(&file), "{rel} bundle {i}");
            let device: Vec<_> = b.entries.iter().filter(|e| !e.is_host()).collect();
            let triples: Vec<&str> = device.iter().map(|e| e.triple.as_str()).collect();
            let theirs = bundler_unbundle(&file, &triples, dir.path());
            for (e, bytes) in device.iter().zip(&theirs) {
                assert!(
                    b.entry_data(e).unwrap() == &bytes[..],
                    "{rel} bundle {i} {}",
                    e.triple
                );
            }
            let mut targets: Vec<&str> = b.code_objects().map(|(t, _)| t).collect();
            targets.sort();
            assert_eq!(targets, ARCHES, "{rel}");
        }
    }
}

/// Every code object of the original, by (co_index of its wrapper, target).
fn original_code_objects(pe: &PeView) -> BTreeMap<(u32, String), Vec<u8>> {
    let section = pe.fat_bytes();
    let bundles = bundle::parse_fatbin(section).unwrap();
    let (fat_rva, _, _) = *pe.section(".hip_fat");
    let mut out = BTreeMap::new();
    for (_, w) in pe.wrappers() {
        let off = w.binary - pe.image_base - u64::from(fat_rva);
        let co = bundles.iter().position(|b| b.offset == off).unwrap() as u32;
        let b: &Bundle = &bundles[co as usize];
        for (t, d) in b.code_objects() {
            out.insert((co, t.to_string()), d.to_vec());
        }
    }
    out
}

/// The code object through marker -> `.kpm` -> archive.
fn read_back(host: &Path, marker: &Marker, co: u32, target: &str) -> Vec<u8> {
    let base = host.parent().unwrap();
    let kpm = base.join(&marker.kpack_search_paths[0]);
    let manifest = Manifest::read(&kpm).unwrap();
    let f = manifest
        .file_for_arch(target)
        .unwrap_or_else(|| panic!("no archive for {target}"));
    let a = Archive::open(&kpm.parent().unwrap().join(&f.filename)).unwrap();
    a.kernel(&format!("{}#{co}", marker.kernel_name), target)
        .unwrap()
}

/// Runs a command that must succeed.
fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a tool; it must succeed and print no warning or error.
fn tool_clean(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{cmd:?}: {stderr}");
    for text in [&*stderr, &*stdout] {
        let lower = text.to_lowercase();
        assert!(
            !lower.contains("warning") && !lower.contains("error"),
            "{cmd:?}:\n{text}"
        );
    }
    stdout
}

/// The stored and the computed PE checksum, from imagehlp's
/// `MapFileAndCheckSumA` (Wine's implementation) through the probe.
fn checksums(path: &Path) -> (String, String) {
    let dir = path.parent().unwrap();
    let o = run_wine(
        &[
            fixture("kpack_probe.exe").as_os_str(),
            "-".as_ref(),
            "checksum".as_ref(),
            wine_path(path).as_ref(),
        ],
        &[],
        dir,
    );
    assert!(
        o.status.success(),
        "checksum {}: {}",
        path.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut words = text.split_whitespace().map(str::to_owned);
    (words.next().unwrap(), words.next().unwrap())
}

#[test]
fn windows_split_round_trips_and_passes_the_tools() {
    let tmp = tempfile::tempdir().unwrap();
    for rel in FAT {
        let input = fixture(rel);
        let out = tmp.path().join(rel.replace('/', "_"));
        let before = fs::read(&input).unwrap();
        let r = split(&input, &out);
        assert_eq!(fs::read(&input).unwrap(), before, "input untouched");
        assert_eq!(r.outcome, SplitOutcome::Split, "{rel}");
        assert_eq!(r.note, None, "{rel}: unsigned input, no note");
        let orig = PeView::read(&input);
        let host = PeView::read(&r.output);

        // .hip_fat reclaimed: the file shrinks by its raw size, less the
        // marker's (FileAlignment-padded) raw data.
        let fat_raw = u64::from(orig.raw_sizes[".hip_fat"]);
        let (mrva, mvsize, mdata) = host.section(".kpackrf").clone();
        let marker_raw = u64::from(host.raw_sizes[".kpackrf"]);
        assert_eq!(
            marker_raw,
            u64::from(mvsize).div_ceil(0x200) * 0x200,
            "FileAlignment-padded"
        );
        assert_eq!(
            host.raw_sizes[".hip_fat"], 0,
            "{rel}: .hip_fat has no file bytes"
        );
        assert_eq!(host.section(".hip_fat").0, orig.section(".hip_fat").0);
        assert_eq!(
            host.section(".hip_fat").1,
            orig.section(".hip_fat").1,
            "VirtualSize kept"
        );
        assert_eq!(r.input_size - r.output_size, fat_raw - marker_raw, "{rel}");
        assert_eq!(r.fatbin_size, fat_raw);

        // Header fields.
        assert_eq!(
            host.size_of_image,
            (mrva + mvsize).div_ceil(0x1000) * 0x1000,
            "{rel}: SizeOfImage"
        );
        assert_eq!(
            host.size_of_initialized_data,
            orig.size_of_initialized_data - fat_raw as u32 + marker_raw as u32,
            "{rel}: SizeOfInitializedData"
        );
        let (stored, computed) = checksums(&r.output);
        assert_eq!(stored, computed, "{rel}: PE checksum");
        assert_ne!(stored, "00000000");

        // Base relocations unchanged; none patches .hip_fat.
        assert_eq!(host.relocs, orig.relocs, "{rel}");
        let (frva, fvsize, _) = *host.section(".hip_fat");
        assert!(
            host.relocs.keys().all(|&r| r < frva || r >= frva + fvsize),
            "{rel}"
        );

        // Every other section unchanged (.rdata: only the debug entries'
        // file offsets move).
        for (name, (rva, vsize, data)) in &orig.sections {
            if [".hip_fat", ".hipFatB", ".rdata"].contains(&name.as_str()) {
                continue;
            }
            assert_eq!(
                host.section(name),
                &(*rva, *vsize, data.clone()),
                "{rel}: {name}"
            );
        }

        // Wrappers: HIPK -> the marker, co_index of the bundle they pointed at.
        let marker = Marker::parse(&mdata[..mvsize as usize]).unwrap();
        assert_eq!(
            marker.kernel_name,
            input.file_name().unwrap().to_str().unwrap()
        );
        let stem = input.file_stem().unwrap().to_str().unwrap();
        assert_eq!(
            marker.kpack_search_paths,
            [
                format!(".kpack/{stem}.kpm"),
                format!(".kpack/{stem}_@GFXARCH@.kpack")
            ]
        );
        let originals = original_code_objects(&orig);
        let (fat_rva, _, _) = *orig.section(".hip_fat");
        let bundles = bundle::parse_fatbin(orig.fat_bytes()).unwrap();
        for ((rva, before), (rva2, after)) in orig.wrappers().iter().zip(host.wrappers()) {
            assert_eq!(*rva, rva2);
            assert_eq!(after.magic, HIPK_MAGIC);
            assert_eq!(
                after.binary,
                host.image_base + u64::from(mrva),
                "{rel}: points at .kpackrf"
            );
            let off = before.binary - orig.image_base - u64::from(fat_rva);
            let co = bundles.iter().position(|b| b.offset == off).unwrap() as u32;
            assert_eq!(after.co_index(), co, "{rel}");
        }
        assert_eq!(r.code_objects, originals.len());
        for ((co, target), bytes) in &originals {
            assert!(
                read_back(&r.output, &marker, *co, target) == *bytes,
                "{rel} #{co} {target}"
            );
        }

        // The ecosystem's readers parse the output cleanly.
        tool_clean(Command::new("objdump").arg("-x").arg(&r.output));
        tool_clean(
            Command::new("llvm-objdump-19")
                .args(["-x", "-d"])
                .arg(&r.output),
        );
        let readobj = tool_clean(
            Command::new("llvm-readobj-19")
                .args([
                    "--file-headers",
                    "--sections",
                    "--coff-basereloc",
                    "--coff-debug-directory",
                ])
                .args(["--coff-imports", "--coff-exports", "--coff-load-config"])
                .arg(&r.output),
        );
        assert!(readobj.contains(".kpackrf"), "{rel}");
        // Inspect reports the split image and its marker.
        match inspect(&r.output).unwrap() {
            Report::Pe(p) => {
                assert_eq!(p.state, "split (host-only, kpack marker)");
                assert_eq!(p.machine, "x86-64");
                assert!(p.wrappers.iter().all(|w| w.magic == "HIPK"));
                assert_eq!(p.marker.unwrap().kernel_name, marker.kernel_name);
            }
            other => panic!("{rel}: {other:?}"),
        }
        // Splitting the output again copies it unchanged.
        let again = split(
            &r.output,
            &tmp.path().join("again").join(rel.replace('/', "_")),
        );
        assert_eq!(again.outcome, SplitOutcome::AlreadySplit);
    }
}

#[test]
fn windows_inspect_lists_bundles_wrappers_and_host_only_images() {
    for rel in FAT {
        let Report::Pe(p) = inspect(&fixture(rel)).unwrap() else {
            panic!("{rel}: not reported as PE")
        };
        assert_eq!(p.state, "fat binary");
        assert_eq!(
            p.image_type,
            if rel.ends_with(".dll") {
                "PE32+ DLL"
            } else {
                "PE32+ EXE"
            }
        );
        let bundles = p.hip_fat.unwrap().bundles;
        assert_eq!(bundles.len(), p.wrappers.len());
        let mut cos: Vec<u32> = p.wrappers.iter().map(|w| w.co_index.unwrap()).collect();
        cos.sort();
        assert_eq!(cos, (0..bundles.len() as u32).collect::<Vec<_>>());
        for b in &bundles {
            assert_eq!(b.compressed, rel.contains("compressed"));
            assert_eq!(b.ccob_version.is_some(), rel.contains("compressed"));
        }
    }
    // Not fat: the stand-in runtime (a mingw DLL) and the probe EXE.
    for rel in ["amdhip64.dll", "kpack_probe.exe"] {
        let Report::Pe(p) = inspect(&fixture(rel)).unwrap() else {
            panic!("{rel}")
        };
        assert_eq!(p.state, "host-only (no device code)", "{rel}");
        assert!(p.wrappers.is_empty() && p.hip_fat.is_none());
    }
    // 32-bit and ARM64 images are still described.
    let Report::Pe(p) = inspect(&fixture("errors/pe32.dll")).unwrap() else {
        panic!()
    };
    assert_eq!(
        (p.image_type.as_str(), p.machine.as_str()),
        ("PE32 DLL", "i386")
    );
    let Report::Pe(p) = inspect(&fixture("errors/arm64.dll")).unwrap() else {
        panic!()
    };
    assert_eq!(
        (p.image_type.as_str(), p.machine.as_str(), p.state.as_str()),
        ("PE32+ DLL", "ARM64", "fat binary")
    );
    // A host-only image is copied unchanged by split-binary.
    let tmp = tempfile::tempdir().unwrap();
    let r = split(&fixture("amdhip64.dll"), tmp.path());
    assert_eq!(r.outcome, SplitOutcome::HostOnly);
    assert_eq!(
        fs::read(&r.output).unwrap(),
        fs::read(fixture("amdhip64.dll")).unwrap()
    );
}

// ------------------------------------------------------------- errors

fn set_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// File offset of the optional header and of section `name`'s header.
fn header_offsets(bytes: &[u8], name: &str) -> (usize, usize) {
    let nt = u32_at(bytes, 0x3c) as usize;
    let nsec = u16::from_le_bytes([bytes[nt + 6], bytes[nt + 7]]) as usize;
    let opt_size = u16::from_le_bytes([bytes[nt + 20], bytes[nt + 21]]) as usize;
    let table = nt + 24 + opt_size;
    let sec = (0..nsec)
        .map(|i| table + 40 * i)
        .find(|&at| bytes[at..at + 8].starts_with(name.as_bytes()))
        .unwrap();
    (nt + 24, sec)
}

/// Splitting `input` fails, mentioning `expect`; the input is unchanged and
/// the output directory stays empty.
fn assert_refused(input: &Path, expect: &str) {
    let before = fs::read(input).unwrap();
    let out = tempfile::tempdir().unwrap();
    let e: SplitError = split_binary(input, out.path(), &SplitBinaryOptions::default())
        .expect_err(&format!("{} was split", input.display()));
    let msg = chain(&e);
    assert!(msg.contains(expect), "{}: {msg}", input.display());
    assert!(
        msg.contains(input.file_name().unwrap().to_str().unwrap()),
        "names the file: {msg}"
    );
    assert_eq!(fs::read(input).unwrap(), before, "input modified");
    assert_eq!(
        fs::read_dir(out.path()).unwrap().count(),
        0,
        "{}: output left behind",
        input.display()
    );
}

#[test]
fn windows_error_cases_fail_clearly_and_leave_the_input_untouched() {
    assert_refused(
        &fixture("errors/pe32.dll"),
        "PE32 (32-bit) DLL for i386 with device code",
    );
    assert_refused(
        &fixture("errors/arm64.dll"),
        "ARM64 DLL with device code; only x86-64 images can be split",
    );

    let tmp = tempfile::tempdir().unwrap();
    let orig = fs::read(fixture("clang19/kpfix.dll")).unwrap();
    let (opt, fat_hdr) = header_offsets(&orig, ".hip_fat");
    let fat_raw = u32_at(&orig, fat_hdr + 20) as usize;

    // A bundle entry whose offset runs past .hip_fat.
    let mut lying = orig.clone();
    assert_eq!(&lying[fat_raw..fat_raw + 24], b"__CLANG_OFFLOAD_BUNDLE__");
    lying[fat_raw + 32..fat_raw + 40].copy_from_slice(&0x7fff_0000u64.to_le_bytes());
    let p = tmp.path().join("lying.dll");
    fs::write(&p, &lying).unwrap();
    assert_refused(&p, "corrupted offload bundle in .hip_fat");

    // .hip_fat's raw size claiming bytes past the end of the file.
    let mut past = orig.clone();
    set_u32(&mut past, fat_hdr + 16, 0x0100_0000);
    let p = tmp.path().join("past.dll");
    fs::write(&p, &past).unwrap();
    assert_refused(&p, "runs past the end of the file");

    // No .reloc directory although the image is relocatable: the wrappers'
    // pointers could not be fixed up.
    let mut noreloc = orig.clone();
    set_u32(&mut noreloc, opt + 112 + 8 * 5, 0);
    set_u32(&mut noreloc, opt + 112 + 8 * 5 + 4, 0);
    let p = tmp.path().join("noreloc.dll");
    fs::write(&p, &noreloc).unwrap();
    assert_refused(
        &p,
        "has no DIR64 base relocation, but the image is relocatable",
    );

    // A base relocation inside .hip_fat: its bytes would be reclaimed.
    let mut inside = orig.clone();
    let pe = PeView::read(&fixture("clang19/kpfix.dll"));
    let (reloc_rva, _, _) = *pe.section(".reloc");
    let (_, reloc_hdr) = header_offsets(&orig, ".reloc");
    let reloc_raw = u32_at(&orig, reloc_hdr + 20) as usize;
    let (fat_rva, _, _) = *pe.section(".hip_fat");
    assert_eq!(u32_at(&orig, opt + 112 + 8 * 5), reloc_rva);
    set_u32(&mut inside, reloc_raw, fat_rva); // first block's page -> .hip_fat
    let p = tmp.path().join("inside.dll");
    fs::write(&p, &inside).unwrap();
    assert_refused(&p, "inside .hip_fat, whose bytes are reclaimed");
}

/// Signs a copy of the DLL with a throw-away self-signed certificate.
fn signed_copy(dir: &Path) -> PathBuf {
    let key = dir.join("key.pem");
    let cert = dir.join("cert.pem");
    run_ok(
        Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=rocm-kpack test",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert),
    );
    let signed = dir.join("kpfix.dll");
    run_ok(
        Command::new("osslsigncode")
            .arg("sign")
            .arg("-certs")
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .arg("-in")
            .arg(fixture("clang19/kpfix.dll"))
            .arg("-out")
            .arg(&signed),
    );
    signed
}

#[test]
fn windows_signed_input_is_split_and_the_report_says_the_signature_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    let signed = signed_copy(&src);
    let before = fs::read(&signed).unwrap();
    let view = PeView::read(&signed);
    assert_ne!(
        view.security_dir,
        (0, 0),
        "osslsigncode wrote a certificate table"
    );
    let r = split(&signed, &tmp.path().join("out"));
    assert_eq!(fs::read(&signed).unwrap(), before);
    assert_eq!(r.outcome, SplitOutcome::Split);
    let note = r.note.expect("a note about the signature");
    assert!(
        note.contains("Authenticode-signed") && note.contains("removed"),
        "{note}"
    );
    let host = PeView::read(&r.output);
    assert_eq!(host.security_dir, (0, 0));
    // No certificate bytes are left behind: the unsigned original splits to
    // the same bytes.
    let unsigned = split(&fixture("clang19/kpfix.dll"), &tmp.path().join("plain"));
    assert_eq!(host.bytes, fs::read(&unsigned.output).unwrap());
    let (stored, computed) = checksums(&r.output);
    assert_eq!(stored, computed);
    match inspect(&signed).unwrap() {
        Report::Pe(p) => assert!(p.signed),
        other => panic!("{other:?}"),
    }
    // A tree split says it in its text report too.
    let tree = tmp.path().join("tree/bin");
    fs::create_dir_all(&tree).unwrap();
    fs::copy(&signed, tree.join("kpfix.dll")).unwrap();
    let out = rocm_kpack_test_support::bins::command("rocm-kpack")
        .arg("split")
        .arg(tmp.path().join("tree"))
        .arg("--out")
        .arg(tmp.path().join("tree-split"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("note: bin/kpfix.dll: ") && text.contains("Authenticode-signed"),
        "{text}"
    );
}

// ------------------------------------------------------------- Wine

fn wine() -> PathBuf {
    ["/usr/bin/wine64", "/usr/bin/wine", "/usr/lib/wine/wine64"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("wine64 (apt-get install wine64)")
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace().join("target"), PathBuf::from)
}

/// Z: is Wine's view of `/`.
fn wine_path(p: &Path) -> String {
    format!("Z:{}", p.display()).replace('/', "\\")
}

/// The Wine prefix the tests share (target/wine/prefix, as
/// tests/scripts/windows-tests.sh uses), created on first use, with the
/// ProcessPrng shim Wine 8 needs for Rust-built DLLs.
fn wine_prefix() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let prefix = target_dir().join("wine/prefix");
        let system32 = prefix.join("drive_c/windows/system32");
        if !system32.is_dir() {
            fs::create_dir_all(&prefix).unwrap();
            let st = Command::new(wine())
                .args(["wineboot", "--init"])
                .env("WINEPREFIX", &prefix)
                .env("WINEDEBUG", "-all")
                .output()
                .unwrap();
            assert!(
                system32.is_dir(),
                "wineboot: {}",
                String::from_utf8_lossy(&st.stderr)
            );
        }
        let builtin =
            Path::new("/usr/lib/x86_64-linux-gnu/wine/x86_64-windows/bcryptprimitives.dll");
        if !builtin.exists() {
            fs::copy(
                fixture("wine/bcryptprimitives.dll"),
                system32.join("bcryptprimitives.dll"),
            )
            .unwrap();
        }
        prefix
    })
}

fn run_wine(args: &[&std::ffi::OsStr], envs: &[(&str, String)], cwd: &Path) -> Output {
    let prefix = wine_prefix();
    let mut cmd = Command::new(wine());
    cmd.args(args)
        .current_dir(cwd)
        .env("WINEPREFIX", prefix)
        .env("WINEDEBUG", "-all");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// rocm_kpack.dll for x86_64-pc-windows-gnu (built once per test process).
/// The packages and targets are tests/scripts/windows-tests.sh's: cargo
/// unifies features over what a build selects, so the same selection finds
/// that script's build (scripts/test.sh runs it first) instead of building
/// the crates again with other features.
fn capi_dll() -> &'static Path {
    static DLL: OnceLock<PathBuf> = OnceLock::new();
    DLL.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "--target", "x86_64-pc-windows-gnu"])
            .args(["-p", "rocm-kpack-format", "-p", "rocm-kpack-loader", "-p", "rocm-kpack-capi"])
            .args(["--lib", "--tests"])
            .current_dir(workspace())
            .env("CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER", "x86_64-w64-mingw32-gcc")
            .status()
            .unwrap();
        assert!(st.success(), "cargo build --target x86_64-pc-windows-gnu (rustup target add x86_64-pc-windows-gnu; apt-get install mingw-w64)");
        target_dir().join("x86_64-pc-windows-gnu/debug/rocm_kpack.dll")
    })
}

/// Runs `exe` under Wine with the stand-in recording into a fresh
/// directory `record` (extra variables in `envs`); it must exit 0 and log
/// its 9 launches, none of an unregistered kernel, and one unregister per
/// registration. Returns the registrations.
fn run_app(exe: &Path, record: &Path, envs: &[(&str, String)]) -> Vec<fixtures::Registration> {
    fs::create_dir(record).unwrap();
    let mut all = vec![("HIPSTUB_RECORD", wine_path(record))];
    all.extend(envs.iter().cloned());
    let o = run_wine(&[exe.as_os_str()], &all, exe.parent().unwrap());
    assert!(
        o.status.success(),
        "{}: {} {}",
        exe.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let regs = fixtures::read_registrations(record).unwrap();
    let log = fixtures::read_call_log(record).unwrap();
    assert_eq!(
        log.iter().filter(|l| l.starts_with("launch ")).count(),
        9,
        "{log:?}"
    );
    assert!(log.iter().all(|l| !l.starts_with("launch ?")), "{log:?}");
    assert_eq!(
        log.iter().filter(|l| l.starts_with("unregister ")).count(),
        regs.len()
    );
    regs
}

#[test]
fn windows_split_exe_runs_with_split_dll_and_the_c_abi_loads_the_originals() {
    let tmp = tempfile::tempdir().unwrap();
    for set in ["clang19", "clang19-compressed"] {
        let out = tmp.path().join(set);
        let dll = split(&fixture(&format!("{set}/kpfix.dll")), &out);
        let exe = split(&fixture(&format!("{set}/kpapp.exe")), &out);
        fs::copy(fixture("amdhip64.dll"), out.join("amdhip64.dll")).unwrap();

        // Fat originals first: the stand-in receives HIPF bundles.
        let fat_dir = fixture(set);
        let fat_run = tmp.path().join(format!("{set}-fat"));
        fs::create_dir(&fat_run).unwrap();
        for f in ["kpfix.dll", "kpapp.exe"] {
            fs::copy(fat_dir.join(f), fat_run.join(f)).unwrap();
        }
        fs::copy(fixture("amdhip64.dll"), fat_run.join("amdhip64.dll")).unwrap();
        let regs = run_app(
            &fat_run.join("kpapp.exe"),
            &tmp.path().join(format!("{set}-fat-record")),
            &[("HIPSTUB_STRICT", "1".into())],
        );
        assert_eq!(regs.len(), 4, "{set}: 3 DLL bundles + 1 EXE bundle");
        let kind = if set.contains("compressed") {
            PayloadKind::Ccob
        } else {
            PayloadKind::Bundle
        };
        assert!(regs
            .iter()
            .all(|r| r.magic == HIPF_MAGIC && r.kind == kind && !r.truncated));

        // Split: the EXE loads the split DLL; every registration is HIPK
        // with the marker of its own image and its co_index.
        let regs = run_app(&exe.output, &tmp.path().join(format!("{set}-record")), &[]);
        assert_eq!(regs.len(), 4);
        let marker_of = |p: &Path| {
            let v = PeView::read(p);
            let (_, vsize, data) = v.section(".kpackrf").clone();
            data[..vsize as usize].to_vec()
        };
        let (dll_marker, exe_marker) = (marker_of(&dll.output), marker_of(&exe.output));
        let mut seen = BTreeSet::new();
        for r in &regs {
            assert_eq!(
                (r.magic, r.kind, r.truncated),
                (HIPK_MAGIC, PayloadKind::Marker, false)
            );
            let image = if r.payload == dll_marker {
                "dll"
            } else {
                assert_eq!(
                    r.payload, exe_marker,
                    "{set}: recorded marker is neither image's"
                );
                "exe"
            };
            assert!(
                seen.insert((image, r.reserved1)),
                "{set}: duplicate {image} #{}",
                r.reserved1
            );
        }
        assert_eq!(
            seen,
            BTreeSet::from([("dll", 0), ("dll", 1), ("dll", 2), ("exe", 0)]),
            "{set}: co_index per wrapper"
        );

        // The C ABI under Wine, given a recorded marker and the DLL's path,
        // returns each original code object.
        let originals = original_code_objects(&PeView::read(&fixture(&format!("{set}/kpfix.dll"))));
        let marker_file = tmp.path().join(format!("{set}-marker.bin"));
        fs::write(
            &marker_file,
            regs.iter()
                .find(|r| r.payload == dll_marker)
                .unwrap()
                .payload
                .clone(),
        )
        .unwrap();
        let probe = fixture("kpack_probe.exe");
        let mut args: Vec<std::ffi::OsString> = vec![
            probe.clone().into(),
            wine_path(capi_dll()).into(),
            "load".into(),
            wine_path(&dll.output).into(),
            wine_path(&marker_file).into(),
        ];
        let got = |i: usize| tmp.path().join(format!("{set}-co{i}.bin"));
        for (i, (co, target)) in originals.keys().enumerate() {
            args.extend([
                co.to_string().into(),
                target.into(),
                wine_path(&got(i)).into(),
            ]);
        }
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let o = run_wine(&refs, &[], &out);
        assert!(
            o.status.success(),
            "{set}: {} {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        for (i, ((co, target), bytes)) in originals.iter().enumerate() {
            assert!(
                fs::read(got(i)).unwrap() == *bytes,
                "{set} #{co} {target}: bytes differ"
            );
        }

        // kpack_discover_binary_path of the marker's address in the loaded
        // DLL: the DLL's own path and the marker's file offset.
        let view = PeView::read(&dll.output);
        let (mrva, _, _) = *view.section(".kpackrf");
        let o = run_wine(
            &[
                probe.as_os_str(),
                wine_path(capi_dll()).as_ref(),
                "discover".as_ref(),
                wine_path(&dll.output).as_ref(),
                format!("{mrva:x}").as_ref(),
            ],
            &[],
            &out,
        );
        assert!(
            o.status.success(),
            "discover: {} {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        let text = String::from_utf8_lossy(&o.stdout);
        let mut lines = text.lines();
        let path = lines.next().unwrap();
        assert!(
            path.eq_ignore_ascii_case(&wine_path(&dll.output)),
            "{path} vs {}",
            wine_path(&dll.output)
        );
        let offset: usize = lines.next().unwrap().trim().parse().unwrap();
        let file = fs::read(&dll.output).unwrap();
        assert_eq!(
            &file[offset..offset + dll_marker.len()],
            &dll_marker[..],
            "offset of the marker in the file"
        );
    }
}

// ------------------------------------------------------------- wheels

/// A Windows wheel (tag py3-none-win_amd64) written with python's zipfile:
/// the fat DLL and EXE, the stand-in runtime (no device code) and a module.
fn write_windows_wheel(path: &Path) {
    let stage = tempfile::tempdir().unwrap();
    let init = stage.path().join("init.py");
    fs::write(&init, "").unwrap();
    let mut members = vec![
        ("kpwin/__init__.py".to_string(), init),
        ("kpwin/kpfix.dll".to_string(), fixture("clang19/kpfix.dll")),
        (
            "kpwin/bin/kpapp.exe".to_string(),
            fixture("clang19/kpapp.exe"),
        ),
        ("kpwin/amdhip64.dll".to_string(), fixture("amdhip64.dll")),
    ];
    let di = "kpwin-1.0.dist-info";
    for (name, text) in [
        ("METADATA", "Metadata-Version: 2.1\nName: kpwin\nVersion: 1.0\nSummary: Windows HIP fixtures\n"),
        ("WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-win_amd64\n"),
    ] {
        let f = stage.path().join(name);
        fs::write(&f, text).unwrap();
        members.push((format!("{di}/{name}"), f));
    }
    let list: String = members
        .iter()
        .map(|(n, p)| format!("{n}\t{}\n", p.display()))
        .collect();
    fs::write(stage.path().join("list"), list).unwrap();
    let script = r#"
import base64, hashlib, sys, zipfile
out, listing, di = sys.argv[1], sys.argv[2], sys.argv[3]
rows = []
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for line in open(listing):
        name, src = line.rstrip("\n").split("\t")
        data = open(src, "rb").read()
        z.writestr(zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
        h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={h},{len(data)}")
    rows.append(f"{di}/RECORD,,")
    z.writestr(zipfile.ZipInfo(f"{di}/RECORD", (2024, 1, 1, 0, 0, 0)), "\n".join(rows) + "\n")
"#;
    run_ok(
        Command::new("python3")
            .args(["-c", script])
            .arg(path)
            .arg(stage.path().join("list"))
            .arg(di),
    );
}

#[test]
fn windows_wheel_splits_into_base_and_device_wheels_that_pip_installs_and_run() {
    use rocm_kpack_package::wheel::WheelReader;
    use rocm_kpack_splitter::split_package::{split_package, SplitPackageOptions};

    let tmp = tempfile::tempdir().unwrap();
    let whl = tmp.path().join("kpwin-1.0-py3-none-win_amd64.whl");
    write_windows_wheel(&whl);
    let out = tmp.path().join("out");
    let r = split_package(&whl, &out, &SplitPackageOptions::default())
        .unwrap_or_else(|e| panic!("split-package: {}", chain(&e)));
    let mut names: Vec<&str> = r.packages.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "kpwin",
            "kpwin-device-gfx1030",
            "kpwin-device-gfx1100",
            "kpwin-device-gfx90a"
        ]
    );
    for p in &r.packages {
        let w = WheelReader::open(&p.path).unwrap();
        w.verify_record().unwrap();
        let file = p.path.file_name().unwrap().to_str().unwrap();
        assert!(file.ends_with("-py3-none-win_amd64.whl"), "{file}");
    }
    let base = r.packages.iter().find(|p| p.name == "kpwin").unwrap();
    let members = WheelReader::open(&base.path).unwrap().members;
    for m in [
        "kpwin/kpfix.dll",
        "kpwin/bin/kpapp.exe",
        "kpwin/amdhip64.dll",
        "kpwin/.kpack/kpfix.kpm",
        "kpwin/.kpack/kpapp.kpm",
    ] {
        assert!(members.iter().any(|x| x == m), "{m} not in {members:?}");
    }
    assert!(
        !members.iter().any(|m| m.ends_with(".kpack")),
        "{members:?}"
    );

    // pip installs the base and one processor's wheel for Windows.
    let venv = tmp.path().join("venv");
    run_ok(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    let site = tmp.path().join("site");
    let dev = r
        .packages
        .iter()
        .find(|p| p.name == "kpwin-device-gfx1100")
        .unwrap();
    run_ok(
        Command::new(venv.join("bin/pip"))
            .args([
                "install",
                "--disable-pip-version-check",
                "--no-index",
                "--no-deps",
                "--platform",
                "win_amd64",
            ])
            .args(["--only-binary=:all:", "--target"])
            .arg(&site)
            .arg(&base.path)
            .arg(&dev.path)
            .env("PIP_CONFIG_FILE", "/dev/null"),
    );
    let kp = site.join("kpwin");
    assert_eq!(
        fs::read(kp.join("amdhip64.dll")).unwrap(),
        fs::read(fixture("amdhip64.dll")).unwrap()
    );
    assert!(
        kp.join(".kpack/kpfix_gfx1100.kpack").is_file()
            && kp.join(".kpack/kpapp_gfx1100.kpack").is_file()
    );
    // The EXE one directory down finds the package's .kpack/.
    let exe = PeView::read(&kp.join("bin/kpapp.exe"));
    let (_, vsize, data) = exe.section(".kpackrf").clone();
    let m = Marker::parse(&data[..vsize as usize]).unwrap();
    assert_eq!(m.kpack_search_paths[0], "../.kpack/kpapp.kpm");
    assert!(!kp.join(".kpack/kpfix_gfx1030.kpack").exists());

    // The installed split EXE runs with the installed split DLL.
    for f in ["kpfix.dll", "amdhip64.dll"] {
        fs::copy(kp.join(f), kp.join("bin").join(f)).unwrap();
    }
    let regs = run_app(&kp.join("bin/kpapp.exe"), &tmp.path().join("record"), &[]);
    assert_eq!(regs.len(), 4);
    assert!(regs
        .iter()
        .all(|r| r.magic == HIPK_MAGIC && r.kind == PayloadKind::Marker));

    // The loader finds the gfx1100 code object of the DLL's wrapper 1 in
    // the device wheel's archive, through the installed DLL's marker.
    let view = PeView::read(&kp.join("kpfix.dll"));
    let (_, vsize, data) = view.section(".kpackrf").clone();
    let marker_file = tmp.path().join("marker.bin");
    fs::write(&marker_file, &data[..vsize as usize]).unwrap();
    let got = tmp.path().join("co.bin");
    let o = run_wine(
        &[
            fixture("kpack_probe.exe").as_os_str(),
            wine_path(capi_dll()).as_ref(),
            "load".as_ref(),
            wine_path(&kp.join("kpfix.dll")).as_ref(),
            wine_path(&marker_file).as_ref(),
            "1".as_ref(),
            "gfx1100".as_ref(),
            wine_path(&got).as_ref(),
        ],
        &[],
        &kp,
    );
    assert!(
        o.status.success(),
        "{} {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let originals = original_code_objects(&PeView::read(&fixture("clang19/kpfix.dll")));
    assert!(fs::read(&got).unwrap() == originals[&(1, "gfx1100".to_string())]);
}

#[test]
fn windows_fixtures_rebuild_byte_identical() {
    let st = Command::new("sh")
        .arg(windows_dir().join("build.sh"))
        .arg("--check")
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "tests/fixtures/windows/build.sh --check: {}{}",
        String::from_utf8_lossy(&st.stdout),
        String::from_utf8_lossy(&st.stderr)
    );
}

/// Seeded mutations of the fixtures (header and table bytes, section data,
/// truncations): splitting and inspecting never panic, and whatever splits
/// passed verification.
#[test]
fn windows_corrupted_images_never_panic() {
    use rocm_kpack_splitter::split::binary::{split_fat_elf, ElfSplit};
    let iters: usize = std::env::var("KPACK_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let paths = || {
        vec![
            ".kpack/k.kpm".to_string(),
            ".kpack/k_@GFXARCH@.kpack".to_string(),
        ]
    };
    let seeds: Vec<Vec<u8>> = FAT.iter().map(|r| fs::read(fixture(r)).unwrap()).collect();
    let mut split_ok = 0usize;
    for i in 0..iters {
        let seed = &seeds[i % seeds.len()];
        let mut bytes = seed.clone();
        for _ in 0..1 + next() % 4 {
            // Mostly the first 1 KiB (headers, section table), sometimes anywhere.
            let range = if next() % 4 == 0 {
                bytes.len()
            } else {
                1024.min(bytes.len())
            };
            let at = (next() as usize) % range;
            bytes[at] = next() as u8;
        }
        if next() % 8 == 0 {
            let cut = (next() as usize) % bytes.len();
            bytes.truncate(cut);
        }
        if let Ok(ElfSplit::Split(_)) = split_fat_elf(&bytes, "k", paths()) {
            split_ok += 1;
        }
        let _ = rocm_kpack_splitter::coff::inspect::inspect_pe(&bytes);
    }
    assert!(split_ok > 0, "some mutations keep the image splittable");
}

/// The fixture with its NT headers moved down so the section table ends
/// exactly at SizeOfHeaders: no room for another header without growing
/// the headers (and moving every section's raw data).
fn with_full_header_area(bytes: &[u8]) -> Vec<u8> {
    let nt = u32_at(bytes, 0x3c) as usize;
    let nsec = u16::from_le_bytes([bytes[nt + 6], bytes[nt + 7]]) as usize;
    let opt_size = u16::from_le_bytes([bytes[nt + 20], bytes[nt + 21]]) as usize;
    let end = nt + 24 + opt_size + 40 * nsec;
    let headers = u32_at(bytes, nt + 24 + 60) as usize;
    let shift = headers - end;
    let mut out = bytes.to_vec();
    out[nt..headers].fill(0);
    out[nt + shift..headers].copy_from_slice(&bytes[nt..end]);
    set_u32(&mut out, 0x3c, (nt + shift) as u32);
    out
}

#[test]
fn windows_headers_grow_when_the_section_table_is_full() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let out = tmp.path().join("out");
    fs::create_dir(&src).unwrap();
    for f in ["kpfix.dll", "kpapp.exe"] {
        fs::write(
            src.join(f),
            with_full_header_area(&fs::read(fixture(&format!("clang19/{f}"))).unwrap()),
        )
        .unwrap();
        let before = PeView::read(&src.join(f));
        let r = split(&src.join(f), &out);
        assert_eq!(r.outcome, SplitOutcome::Split);
        let after = PeView::read(&r.output);
        let bytes = &after.bytes;
        let nt = u32_at(bytes, 0x3c) as usize;
        assert_eq!(
            u32_at(bytes, nt + 24 + 60),
            0x600,
            "{f}: SizeOfHeaders grew by FileAlignment"
        );
        let fat_raw = u64::from(before.raw_sizes[".hip_fat"]);
        assert_eq!(
            r.input_size + 0x200 + u64::from(after.raw_sizes[".kpackrf"]) - fat_raw,
            r.output_size
        );
        for (name, data) in &before.sections {
            if ![".hip_fat", ".hipFatB", ".rdata"].contains(&name.as_str()) {
                assert_eq!(after.section(name), data, "{f}: {name}");
            }
        }
        tool_clean(
            Command::new("llvm-readobj-19")
                .args(["--file-headers", "--sections", "--coff-debug-directory"])
                .arg(&r.output),
        );
        let (stored, computed) = checksums(&r.output);
        assert_eq!(stored, computed);
    }
    fs::copy(fixture("amdhip64.dll"), out.join("amdhip64.dll")).unwrap();
    let regs = run_app(&out.join("kpapp.exe"), &tmp.path().join("record"), &[]);
    assert_eq!(regs.len(), 4);
    assert!(regs
        .iter()
        .all(|r| r.magic == HIPK_MAGIC && r.kind == PayloadKind::Marker));
}
