//! Split binaries start where ROCm users run them. Linux before 5.18 (RHEL
//! 8 and 9, Ubuntu 22.04, Debian 11) and qemu-user hand ld.so `AT_PHDR =
//! first PT_LOAD's bias + e_phoff` (docs/formats.md, "Where the program
//! header table lives"), so `qemu-x86_64` (Debian's qemu-user 7.2) runs
//! each binary here the way those kernels would. Every fixture executable
//! and library and trixie's `hipfft-test` (a real Debian package's fat
//! executable, GNU ld) is split, then put through what packagers run on
//! split trees (binutils `strip` and `strip --strip-debug`, `objcopy
//! --only-keep-debug` plus `--add-gnu-debuglink`, elfutils `eu-strip`,
//! debhelper's `dh_strip`, rpm's `find-debuginfo` and `brp-strip`), and
//! each result must start under qemu, and natively, exactly as its fat
//! original does. Binaries split before the rule are named by `verify` and
//! rewritten by `rocm-kpack repair-phdr`.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use object::read::elf::{ElfFile64, ProgramHeader};
use object::{elf, LittleEndian as LE, Object, ObjectSection};
use rocm_kpack_splitter::split::binary::{split_binary, SplitBinaryOptions};
use rocm_kpack_test_support::fixtures::{self, Kind};
use rocm_kpack_test_support::phdr::assert_table_findable;
use rocm_kpack_test_support::{bins, debian};

/// What ld.so did: the exit status and stderr, with the program's path
/// replaced by `PROG` (the fat original and its split twin have other
/// paths).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    code: Option<i32>,
    stderr: String,
}

/// Runs `path` (an executable, or a library through `run_lib`) natively or
/// under `qemu-x86_64`, with the stand-in HIP runtime on the library path.
fn run(path: &Path, kind: Kind, qemu: bool) -> Outcome {
    let mut argv: Vec<PathBuf> = Vec::new();
    if qemu {
        argv.push("qemu-x86_64".into());
    }
    match kind {
        Kind::Executable => argv.push(path.to_path_buf()),
        Kind::SharedLibrary => {
            argv.push(fixtures::run_lib());
            argv.push(path.to_path_buf());
        }
    }
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .env("LD_LIBRARY_PATH", fixtures::stub_lib_dir())
        .env_remove("HIPSTUB_RECORD")
        .env_remove("HIPSTUB_STRICT")
        .output()
        .unwrap();
    Outcome {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).replace(&path.display().to_string(), "PROG"),
    }
}

/// `rocm-kpack repair-phdr PATH` finds nothing to repair.
fn assert_nothing_to_repair(path: &Path) {
    let out = bins::command("rocm-kpack")
        .args(["repair-phdr", "--json"])
        .arg(path)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        out.status.success() && report["files"].as_array().is_some_and(|f| f.is_empty()),
        "{}: {report}",
        path.display()
    );
}

fn sh(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What packagers run on a split tree, each on a copy of every file in
/// `split` (a directory of split binaries): variant name -> directory of
/// results, same file names.
fn packaged_variants(split: &Path, work: &Path) -> BTreeMap<&'static str, PathBuf> {
    let names: Vec<String> = fs::read_dir(split)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut out = BTreeMap::new();
    let each = |name: &'static str, f: &dyn Fn(&Path, &Path, &Path)| {
        let dir = work.join(name);
        fs::create_dir_all(&dir).unwrap();
        for n in &names {
            f(
                &split.join(n),
                &dir.join(n),
                &dir.join(format!("{n}.debug")),
            );
        }
        (name, dir)
    };
    let (k, v) = each("as-split", &|i, o, _| {
        fs::copy(i, o).unwrap();
    });
    out.insert(k, v);
    let (k, v) = each("strip", &|i, o, _| {
        sh(Command::new("strip").arg("-o").arg(o).arg(i))
    });
    out.insert(k, v);
    let (k, v) = each("strip-debug", &|i, o, _| {
        sh(Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(o)
            .arg(i))
    });
    out.insert(k, v);
    let (k, v) = each("debuglink", &|i, o, d| {
        sh(Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(i)
            .arg(d));
        sh(Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(o)
            .arg(i));
        sh(Command::new("objcopy")
            .arg(format!("--add-gnu-debuglink={}", d.display()))
            .arg(o));
    });
    out.insert(k, v);
    let (k, v) = each("eu-strip", &|i, o, d| {
        fs::copy(i, o).unwrap();
        sh(Command::new("eu-strip")
            .arg("--remove-comment")
            .arg("-f")
            .arg(d)
            .arg(o));
    });
    out.insert(k, v);

    // debhelper's own dh_strip, on a package directory of a minimal source
    // tree.
    let src = work.join("dh");
    let pkg = src.join("debian/kx/usr/bin");
    fs::create_dir_all(&pkg).unwrap();
    fs::write(
        src.join("debian/control"),
        "Source: kx\nMaintainer: T <t@example.org>\n\nPackage: kx\nArchitecture: amd64\nDescription: x\n x\n",
    )
    .unwrap();
    fs::write(
        src.join("debian/changelog"),
        "kx (1.0) unstable; urgency=low\n\n  * x\n\n -- T <t@example.org>  Mon, 01 Jan 2024 00:00:00 +0000\n",
    )
    .unwrap();
    fs::write(src.join("debian/compat"), "13\n").unwrap();
    for n in &names {
        fs::copy(split.join(n), pkg.join(n)).unwrap();
    }
    sh(Command::new("dh_strip").current_dir(&src));
    out.insert("dh_strip", pkg);

    // rpm's find-debuginfo (eu-strip and debugedit) then brp-strip and
    // brp-strip-comment-note (binutils), in rpmbuild's order, on a build root.
    let root = work.join("rpm-root");
    let bin = root.join("usr/bin");
    fs::create_dir_all(&bin).unwrap();
    fs::create_dir_all(work.join("rpm-build")).unwrap();
    for n in &names {
        fs::copy(split.join(n), bin.join(n)).unwrap();
    }
    let rpm_env = |c: &mut Command| {
        c.env("RPM_BUILD_ROOT", &root)
            .env("RPM_BUILD_DIR", work.join("rpm-build"))
            .env("RPM_PACKAGE_NAME", "kx")
            .env("RPM_PACKAGE_VERSION", "1")
            .env("RPM_PACKAGE_RELEASE", "1")
            .env("RPM_ARCH", "x86_64")
            .current_dir(work.join("rpm-build"));
    };
    let mut c = Command::new("find-debuginfo");
    rpm_env(&mut c);
    sh(c.arg("-o")
        .arg(work.join("debugfiles.list"))
        .arg(work.join("rpm-build")));
    let mut c = Command::new("/usr/lib/rpm/brp-strip");
    rpm_env(&mut c);
    sh(c.arg("/usr/bin/strip"));
    let mut c = Command::new("/usr/lib/rpm/brp-strip-comment-note");
    rpm_env(&mut c);
    sh(c.args(["/usr/bin/strip", "/usr/bin/objdump"]));
    out.insert("find-debuginfo+brp-strip", bin);
    out
}

/// Every fixture binary (three sets: clang-15 with GNU ld, clang-19 with
/// lld, compressed bundles; PIE, non-PIE, rdc, libraries) split, packaged
/// every way, started under qemu and natively.
#[test]
fn split_fixtures_start_under_qemu_as_their_fat_originals_do() {
    let tmp = tempfile::tempdir().unwrap();
    let split_dir = tmp.path().join("split");
    let mut kinds = BTreeMap::new();
    let mut fat = BTreeMap::new();
    for f in fixtures::all_fat() {
        let name = format!("{}-{}", f.set, f.binary.name);
        let out = tmp.path().join("one").join(&name);
        fs::create_dir_all(&out).unwrap();
        split_binary(&f.path, &out, &SplitBinaryOptions::default()).unwrap();
        fs::create_dir_all(&split_dir).unwrap();
        fs::copy(out.join(f.binary.name), split_dir.join(&name)).unwrap();
        kinds.insert(name.clone(), f.binary.kind);
        fat.insert(name, f.path.clone());
    }
    let variants = packaged_variants(&split_dir, &tmp.path().join("packaged"));
    let mut checked = 0;
    for (name, fat_path) in &fat {
        let kind = kinds[name];
        let expected = run(fat_path, kind, true);
        assert_eq!(
            expected.code,
            Some(0),
            "{name}: the fat original under qemu: {expected:?}"
        );
        assert_eq!(run(fat_path, kind, false), expected, "{name}: natively");
        for (variant, dir) in &variants {
            let path = dir.join(name);
            assert_table_findable(&path);
            assert_eq!(
                run(&path, kind, true),
                expected,
                "{name} ({variant}) under qemu"
            );
            assert_eq!(
                run(&path, kind, false),
                expected,
                "{name} ({variant}) natively"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 15 * 7, "every fixture, every variant");
    assert_nothing_to_repair(tmp.path());
}

/// trixie's `hipfft-test` from `libhipfft0-tests`: without its libraries
/// (hipFFT, hipRAND, Boost) ld.so stops at the first missing one, and the
/// split and packaged binaries must stop at the very same place.
#[test]
fn debian_hipfft_test_starts_under_qemu_as_its_fat_original_does() {
    let fat = debian::hipfft_test().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let one = tmp.path().join("one");
    fs::create_dir_all(&one).unwrap();
    let report = split_binary(&fat, &one, &SplitBinaryOptions::default()).unwrap();
    assert!(
        !report.archives.is_empty(),
        "hipfft-test carries device code"
    );
    let split_dir = tmp.path().join("split");
    fs::create_dir_all(&split_dir).unwrap();
    fs::copy(one.join("hipfft-test"), split_dir.join("hipfft-test")).unwrap();
    let expected = run(&fat, Kind::Executable, true);
    assert!(
        expected
            .stderr
            .contains("error while loading shared libraries")
            && expected.stderr.contains("cannot open shared object file"),
        "the fat original under qemu: {expected:?}"
    );
    assert_eq!(run(&fat, Kind::Executable, false), expected);
    for (variant, dir) in packaged_variants(&split_dir, &tmp.path().join("packaged")) {
        let path = dir.join("hipfft-test");
        assert_table_findable(&path);
        assert_eq!(
            run(&path, Kind::Executable, true),
            expected,
            "{variant} under qemu"
        );
        assert_eq!(
            run(&path, Kind::Executable, false),
            expected,
            "{variant} natively"
        );
    }
}

/// The bytes a split binary's runtime reads: the marker section and the
/// HIPK wrappers.
fn split_parts(path: &Path) -> (Vec<u8>, Vec<u8>) {
    let data = fs::read(path).unwrap();
    let file = ElfFile64::<LE>::parse(&*data).unwrap();
    let section = |name: &str| {
        let s = file.section_by_name(name).unwrap();
        (s.address(), s.data().unwrap().to_vec())
    };
    let (marker_at, marker) = section(".rocm_kpack_ref");
    let (_, wrappers) = section(".hipFatBinSegment");
    let mut marker_with_address = marker_at.to_le_bytes().to_vec();
    marker_with_address.extend(marker);
    (marker_with_address, wrappers)
}

/// A legacy fixture (tests/fixtures/legacy-phdr/) with its pinned sha256.
fn legacy(name: &str, sha256: &str) -> PathBuf {
    let path = fixtures::fixture(&format!("legacy-phdr/{name}"));
    assert_eq!(debian::sha256_file(&path).unwrap(), sha256, "{name}");
    path
}

/// The program header table copied to the end of the file in a PT_LOAD
/// of its own, at the page after every segment, `e_phoff` and PT_PHDR
/// pointing at it: what tools that relocate the table write (AMD's
/// splitter before its normalisation step, or after `strip` moved the
/// table's bytes but not its address).
fn relocate_table_to_end(input: &Path, output: &Path) {
    let mut data = fs::read(input).unwrap();
    let file = ElfFile64::<LE>::parse(&*data).unwrap();
    let mut phdrs: Vec<elf::ProgramHeader64<LE>> = file.elf_program_headers().to_vec();
    let max_end = phdrs
        .iter()
        .filter(|p| p.p_type(LE) == elf::PT_LOAD)
        .map(|p| p.p_vaddr(LE) + p.p_memsz(LE))
        .max()
        .unwrap();
    let offset = data.len().div_ceil(8) as u64 * 8;
    let vaddr = max_end.div_ceil(4096) * 4096 + offset % 4096 + 0x10000;
    let len = (phdrs.len() as u64 + 1) * 56;
    let mut load = phdrs[phdrs
        .iter()
        .position(|p| p.p_type(LE) == elf::PT_LOAD)
        .unwrap()];
    load.p_flags.set(LE, elf::PF_R);
    load.p_offset.set(LE, offset);
    load.p_vaddr.set(LE, vaddr);
    load.p_paddr.set(LE, vaddr);
    load.p_filesz.set(LE, len);
    load.p_memsz.set(LE, len);
    load.p_align.set(LE, 4096);
    for p in phdrs.iter_mut().filter(|p| p.p_type(LE) == elf::PT_PHDR) {
        p.p_offset.set(LE, offset);
        p.p_vaddr.set(LE, vaddr);
        p.p_paddr.set(LE, vaddr);
        p.p_filesz.set(LE, len);
        p.p_memsz.set(LE, len);
    }
    let last = phdrs
        .iter()
        .rposition(|p| p.p_type(LE) == elf::PT_LOAD)
        .unwrap();
    phdrs.insert(last + 1, load);
    data.resize(offset as usize, 0);
    for p in &phdrs {
        data.extend_from_slice(object::pod::bytes_of(p));
    }
    data[0x20..0x28].copy_from_slice(&offset.to_le_bytes()); // e_phoff
    data[0x38..0x3a].copy_from_slice(&(phdrs.len() as u16).to_le_bytes()); // e_phnum
    fs::write(output, data).unwrap();
    fs::set_permissions(output, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A tree split by the earlier splitter (tests/fixtures/legacy-phdr/),
/// the same files stripped as packagers do, and a fat binary whose table a
/// tool moved to the end: `verify` names each, `repair-phdr` lists without
/// touching anything, and with `--yes` rewrites them in place, atomically
/// (a new inode, same mode); afterwards they start under qemu as their fat
/// originals do, keep their marker and wrappers, survive `strip` and
/// `eu-strip` again, and `verify` is clean. A symbolic link is not
/// followed.
#[test]
fn repair_phdr_rewrites_binaries_split_before_the_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("tree");
    let bin = tree.join("bin");
    // The current splitter's archives and manifests for the same inputs,
    // which the earlier one wrote identically, so the markers resolve.
    let cases = [
        (
            "clang19-app_pie",
            "b54b7935bde4081ca677b8cfafaca775fdf23ee2a38daea8a2ee0004ca5b9b7c",
            "clang19/app_pie",
            "app_pie",
        ),
        (
            "clang15-app_nopie",
            "f54b631dc58fe62dfea9c3177f7d9caa0df356fe0b15799a805efb37f57cb505",
            "clang15/app_nopie",
            "app_nopie",
        ),
    ];
    let mut expected = BTreeMap::new();
    fs::create_dir_all(&bin).unwrap();
    for (name, sha, fat, file) in cases {
        split_binary(
            &fixtures::fixture(fat),
            &bin,
            &SplitBinaryOptions::default(),
        )
        .unwrap();
        fs::copy(legacy(name, sha), bin.join(file)).unwrap();
        let stripped = format!("{file}.stripped");
        sh(Command::new("strip")
            .arg("-o")
            .arg(bin.join(&stripped))
            .arg(bin.join(file)));
        let outcome = run(&fixtures::fixture(fat), Kind::Executable, true);
        expected.insert(file.to_string(), outcome.clone());
        expected.insert(stripped, outcome);
    }
    relocate_table_to_end(
        &fixtures::fixture("clang19/app_nopie"),
        &bin.join("fat_nopie"),
    );
    expected.insert(
        "fat_nopie".into(),
        run(
            &fixtures::fixture("clang19/app_nopie"),
            Kind::Executable,
            true,
        ),
    );
    // Outside the tree, reached only through a symbolic link.
    let outside = tmp.path().join("outside");
    fs::copy(bin.join("app_pie"), &outside).unwrap();
    std::os::unix::fs::symlink(&outside, bin.join("link")).unwrap();
    fs::write(bin.join("notes.txt"), "not an ELF file").unwrap();
    fs::write(
        bin.join("truncated"),
        &fs::read(bin.join("app_pie")).unwrap()[..100],
    )
    .unwrap();
    fs::set_permissions(bin.join("app_pie"), fs::Permissions::from_mode(0o750)).unwrap();

    for (file, outcome) in &expected {
        assert_ne!(
            run(&bin.join(file), Kind::Executable, true),
            *outcome,
            "{file} starts under qemu before the repair: the test shows nothing"
        );
    }
    let verify = bins::command("rocm-kpack")
        .arg("verify")
        .arg(&tree)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(verify.status.code(), Some(4), "{text}");
    for file in expected.keys().filter(|f| *f != "fat_nopie") {
        assert!(
            text.lines()
                .any(|l| l.contains(&format!("bin/{file}:")) && l.contains("repair-phdr")),
            "verify names bin/{file}: {text}"
        );
    }

    // File -> (sha256, marker and wrappers, inode).
    type Before = BTreeMap<String, (String, (Vec<u8>, Vec<u8>), u64)>;
    let before: Before = expected
        .keys()
        .filter(|f| *f != "fat_nopie")
        .map(|f| {
            let p = bin.join(f);
            (
                f.clone(),
                (
                    debian::sha256_file(&p).unwrap(),
                    split_parts(&p),
                    fs::metadata(&p).unwrap().ino(),
                ),
            )
        })
        .collect();
    let listed = bins::command("rocm-kpack")
        .args(["repair-phdr", "--json"])
        .arg(&tree)
        .output()
        .unwrap();
    assert_eq!(listed.status.code(), Some(4));
    let report: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(
        report["files"].as_array().unwrap().len(),
        expected.len(),
        "{report}"
    );
    for (f, (sha, _, _)) in &before {
        assert_eq!(
            &debian::sha256_file(&bin.join(f)).unwrap(),
            sha,
            "{f} changed without --yes"
        );
    }

    let repaired = bins::command("rocm-kpack")
        .args(["repair-phdr", "--yes", "--json"])
        .arg(&tree)
        .output()
        .unwrap();
    assert!(
        repaired.status.success(),
        "{}",
        String::from_utf8_lossy(&repaired.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&repaired.stdout).unwrap();
    for entry in report["files"].as_array().unwrap() {
        assert_eq!(entry["repaired"], true, "{entry}");
        assert_eq!(entry["repair"], "moved", "{entry}");
        assert!(entry["grown"].as_u64().unwrap() <= 4096, "{entry}");
    }
    assert_eq!(
        fs::metadata(bin.join("app_pie")).unwrap().mode() & 0o777,
        0o750
    );
    for (f, (_, parts, ino)) in &before {
        let p = bin.join(f);
        assert_eq!(&split_parts(&p), parts, "{f}: marker or wrappers changed");
        assert_ne!(
            fs::metadata(&p).unwrap().ino(),
            *ino,
            "{f} was not replaced by rename"
        );
    }
    assert_eq!(
        debian::sha256_file(&outside).unwrap(),
        debian::sha256_file(&fixtures::fixture("legacy-phdr/clang19-app_pie")).unwrap(),
        "the file behind the symbolic link was rewritten"
    );
    for (file, outcome) in &expected {
        let p = bin.join(file);
        assert_table_findable(&p);
        assert_eq!(
            &run(&p, Kind::Executable, true),
            outcome,
            "{file} under qemu"
        );
        assert_eq!(
            &run(&p, Kind::Executable, false),
            outcome,
            "{file} natively"
        );
        let again = tmp.path().join(format!("{file}.again"));
        sh(Command::new("strip").arg("-o").arg(&again).arg(&p));
        let eu = tmp.path().join(format!("{file}.eu"));
        fs::copy(&p, &eu).unwrap();
        sh(Command::new("eu-strip")
            .arg("-f")
            .arg(tmp.path().join(format!("{file}.dbg")))
            .arg(&eu));
        for q in [&again, &eu] {
            assert_table_findable(q);
            assert_eq!(
                &run(q, Kind::Executable, true),
                outcome,
                "{} under qemu",
                q.display()
            );
        }
    }
    fs::remove_file(bin.join("link")).unwrap();
    let verify = bins::command("rocm-kpack")
        .arg("verify")
        .arg(&tree)
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    assert_nothing_to_repair(&tree);
}

/// A fat binary whose program header table cannot grow where it is (here
/// its first section is writable, so it cannot move): the split puts the
/// table after everything, at `first bias + offset`, and says so; the
/// binary still starts under qemu.
#[test]
fn a_table_that_cannot_grow_in_place_goes_after_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let fat = fixtures::fixture("clang19/app_pie");
    let mut data = fs::read(&fat).unwrap();
    {
        let file = ElfFile64::<LE>::parse(&*data).unwrap();
        let header = file.elf_header();
        let shoff = header.e_shoff.get(LE) as usize;
        let interp = file.section_by_name(".interp").unwrap().index().0;
        // sh_flags of .interp: + SHF_WRITE.
        let at = shoff + interp * 64 + 8;
        let flags = u64::from_le_bytes(data[at..at + 8].try_into().unwrap()) | 1;
        data[at..at + 8].copy_from_slice(&flags.to_le_bytes());
    }
    let input = tmp.path().join("app_pie");
    fs::write(&input, &data).unwrap();
    fs::set_permissions(&input, fs::Permissions::from_mode(0o755)).unwrap();
    let out = bins::command("rocm-kpack")
        .args(["split-binary"])
        .arg(&input)
        .arg("--out")
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot grow where it is"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let split = tmp.path().join("out/app_pie");
    assert_table_findable(&split);
    let data = fs::read(&split).unwrap();
    let phoff = ElfFile64::<LE>::parse(&*data)
        .unwrap()
        .elf_header()
        .e_phoff
        .get(LE);
    assert!(phoff > 4096, "the table is at {phoff:#x}");
    assert_eq!(
        run(&split, Kind::Executable, true),
        run(&fat, Kind::Executable, true)
    );
}
