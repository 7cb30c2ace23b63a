//! The preload shim end to end, against the stand-in HIP runtime
//! (`tests/fixtures/stub-hip`, which records every `__hipRegisterFatBinary`):
//! HIPF wrappers pass through byte for byte; a HIPK wrapper is replaced by a
//! HIPF wrapper whose bundle holds the code objects the loader found; when
//! nothing can be loaded the shim says which paths it searched and the
//! runtime gets the original HIPK wrapper.

use std::fs;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rocm_kpack_format::archive::{ArchiveWriter, CompressionScheme};
use rocm_kpack_format::bundle::parse_bundle_at;
use rocm_kpack_format::wrapper::{HIPF_MAGIC, HIPK_MAGIC};
use rocm_kpack_test_support::bins;
use rocm_kpack_test_support::fixtures::{self, PayloadKind, Registration};

/// `librocm_kpack_preload.so`, built with the profile of this test binary.
fn preload() -> PathBuf {
    bins::lib("librocm_kpack_preload.so")
}

/// Everything that steers the loader or the shim's detection; cleared so
/// the caller's environment (or GPU) cannot change a test's outcome.
const LOADER_ENV: [&str; 8] = [
    "ROCM_KPACK_PATH",
    "ROCM_KPACK_PATH_PREFIX",
    "ROCM_KPACK_DISABLE",
    "ROCM_KPACK_DEBUG",
    "ROCM_KPACK_ARCH_OVERRIDE",
    "ROCM_KPACK_SYSFS_ROOT",
    "HSA_XNACK",
    "HSA_OVERRIDE_GFX_VERSION",
];

/// A command against the stand-in runtime, recording into `record`, with or
/// without the shim preloaded, and a clean loader environment.
fn with_stub(mut cmd: Command, record: &Path, shim: bool) -> Command {
    cmd.env("LD_LIBRARY_PATH", fixtures::stub_lib_dir())
        .env("HIPSTUB_RECORD", record)
        .env_remove("HIPSTUB_STRICT");
    for v in LOADER_ENV {
        cmd.env_remove(v);
    }
    if shim {
        cmd.env("LD_PRELOAD", preload());
    } else {
        cmd.env_remove("LD_PRELOAD");
    }
    cmd
}

fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn registrations(dir: &Path) -> Vec<Registration> {
    fixtures::read_registrations(dir).expect("read records")
}

/// The device entries of a recorded bundle: (triple, bytes).
fn bundle_entries(reg: &Registration) -> Vec<(String, Vec<u8>)> {
    assert_eq!(
        reg.kind,
        PayloadKind::Bundle,
        "payload is not an uncompressed bundle"
    );
    let b = parse_bundle_at(&reg.payload, 0).expect("recorded bundle parses");
    b.entries
        .iter()
        .map(|e| {
            (
                e.triple.clone(),
                b.entry_data(e).unwrap_or_default().to_vec(),
            )
        })
        .collect()
}

fn write_archive(path: &Path, kernels: &[(&str, &str, &[u8])]) {
    let mut w = ArchiveWriter::new(
        Cursor::new(Vec::new()),
        "probe",
        "mixed",
        CompressionScheme::ZstdPerKernel,
        3,
    )
    .expect("writer");
    for (b, a, d) in kernels {
        w.add_kernel(b, a, d.to_vec()).expect("add");
    }
    fs::write(path, w.finish().expect("finish").into_inner()).expect("write archive");
}

// ---------------------------------------------------------------------------
// stub_probe: a HIPK wrapper (co_index 5) whose marker names lib/libx.so and
// ../.kpack/x.kpm; ROCM_KPACK_PATH points the loader at our archive.

#[test]
fn shim_replaces_hipk_with_a_bundle_of_loaded_code_objects() {
    let tmp = tempfile::tempdir().expect("tmp");
    let archive = tmp.path().join("x.kpack");
    let co_1100 = b"\x7fELF gfx1100 code object for co 5".repeat(50);
    let co_90a = b"\x7fELF gfx90a plain".repeat(70);
    write_archive(
        &archive,
        &[
            ("lib/libx.so#5", "gfx1100", &co_1100),
            ("lib/libx.so#5", "gfx90a", &co_90a),
            ("lib/libx.so#0", "gfx1100", b"wrong co_index"),
        ],
    );
    let record = tmp.path().join("rec");
    fs::create_dir_all(&record).expect("mkdir");
    let mut cmd = with_stub(Command::new(fixtures::stub_probe()), &record, true);
    cmd.arg("hipk")
        .env("ROCM_KPACK_PATH", &archive)
        .env("ROCM_KPACK_ARCH_OVERRIDE", "gfx1100,gfx90a:xnack+,gfx1030");
    let out = output(&mut cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let regs = registrations(&record);
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].magic, HIPF_MAGIC);
    let entries = bundle_entries(&regs[0]);
    let triples: Vec<&str> = entries.iter().map(|(t, _)| t.as_str()).collect();
    // Host entry first; the xnack+ device got the plain gfx90a build; gfx1030
    // had nothing and is left out.
    assert_eq!(
        triples,
        [
            "host-x86_64-unknown-linux--",
            "hipv4-amdgcn-amd-amdhsa--gfx1100",
            "hipv4-amdgcn-amd-amdhsa--gfx90a"
        ]
    );
    assert_eq!(entries[1].1, co_1100);
    assert_eq!(entries[2].1, co_90a);
    let log = fixtures::read_call_log(&record).expect("log");
    assert!(log.iter().any(|l| l.starts_with("unregister 0")), "{log:?}");
}

#[test]
fn shim_names_the_searched_paths_when_nothing_loads() {
    let tmp = tempfile::tempdir().expect("tmp");
    let record = tmp.path().join("rec");
    fs::create_dir_all(&record).expect("mkdir");
    let missing = tmp.path().join("gone.kpack");
    let mut cmd = with_stub(Command::new(fixtures::stub_probe()), &record, true);
    cmd.arg("hipk")
        .env("ROCM_KPACK_PATH", &missing)
        .env("ROCM_KPACK_ARCH_OVERRIDE", "gfx1100");
    let out = output(&mut cmd);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("rocm-kpack preload: no device code for gfx1100"),
        "{stderr}"
    );
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
    // The runtime then sees the original HIPK wrapper (and reports its own error).
    let regs = registrations(&record);
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].magic, HIPK_MAGIC);
    assert_eq!(regs[0].reserved1, 5);
    assert_eq!(regs[0].kind, PayloadKind::Marker);
}

#[test]
fn shim_passes_hipf_through_untouched() {
    let tmp = tempfile::tempdir().expect("tmp");
    for set in ["clang15", "clang19-compressed"] {
        let fat = fixtures::all_fat()
            .into_iter()
            .find(|f| f.set == set && f.binary.name == "app_pie")
            .expect("fixture");
        let mut seen = Vec::new();
        for shim in [false, true] {
            let record = tmp.path().join(format!("{set}-{shim}"));
            fs::create_dir_all(&record).expect("mkdir");
            let out = output(&mut with_stub(Command::new(&fat.path), &record, shim));
            assert!(out.status.success(), "{}", text(&out.stderr));
            let regs = registrations(&record);
            assert_eq!(regs.len(), 1);
            assert_eq!(regs[0].magic, HIPF_MAGIC);
            seen.push(regs[0].payload.clone());
        }
        assert_eq!(
            seen[0], seen[1],
            "{set}: the shim changed a HIPF registration"
        );
    }
}

// ---------------------------------------------------------------------------
// Split fixtures: `rocm-kpack split-binary`, then run with the shim.

/// `rocm-kpack split-binary <fat> --out <out>`: host-only binary
/// `out/<name>`, archives and manifest in `out/.kpack/`.
fn split(fat: &Path, out: &Path) -> PathBuf {
    let mut cmd = bins::command("rocm-kpack");
    cmd.arg("split-binary").arg(fat).arg("--out").arg(out);
    let o = output(&mut cmd);
    assert!(
        o.status.success(),
        "{cmd:?}: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let host = out.join(fat.file_name().expect("name"));
    assert!(host.is_file(), "{} not written", host.display());
    host
}

/// Code objects of bundle `index` of a fat binary: target -> bytes.
fn original_code_objects(fat: &Path, index: usize) -> Vec<(String, Vec<u8>)> {
    use object::{Object, ObjectSection};
    let data = fs::read(fat).expect("read fixture");
    let file = object::File::parse(&*data).expect("ELF");
    let section = file.section_by_name(".hip_fatbin").expect(".hip_fatbin");
    let bytes = section.data().expect("section data");
    let bundles = rocm_kpack_format::bundle::parse_fatbin(bytes).expect("bundles");
    bundles[index]
        .code_objects()
        .map(|(t, d)| (t.to_owned(), d.to_vec()))
        .collect()
}

#[test]
fn split_executables_run_on_the_stand_in_runtime_through_the_shim() {
    let tmp = tempfile::tempdir().expect("tmp");
    for fat in fixtures::all_fat()
        .into_iter()
        .filter(|f| f.binary.name == "app_pie")
    {
        let dir = tmp.path().join(fat.set);
        let host = split(&fat.path, &dir);
        let original = original_code_objects(&fat.path, 0);
        let (_, gfx1100) = original
            .iter()
            .find(|(t, _)| t == "gfx1100")
            .expect("fixture has gfx1100");
        let run = |shim: bool, override_arch: Option<&str>, tag: &str| {
            let record = dir.join(format!("rec-{tag}"));
            fs::create_dir_all(&record).expect("mkdir");
            let mut cmd = with_stub(Command::new(&host), &record, shim);
            if let Some(a) = override_arch {
                cmd.env("ROCM_KPACK_ARCH_OVERRIDE", a);
            }
            let out = output(&mut cmd);
            (out, registrations(&record))
        };

        // With the shim: HIPF, bundle = host entry + the original gfx1100 bytes.
        let (out, regs) = run(true, Some("gfx1100"), "shim");
        assert!(out.status.success(), "{}: {}", fat.set, text(&out.stderr));
        assert_eq!(regs.len(), 1, "{}", fat.set);
        assert_eq!(regs[0].magic, HIPF_MAGIC, "{}", fat.set);
        let entries = bundle_entries(&regs[0]);
        assert_eq!(entries.len(), 2, "{}: {entries:?}", fat.set);
        assert_eq!(entries[1].0, "hipv4-amdgcn-amd-amdhsa--gfx1100");
        assert!(
            entries[1].1 == *gfx1100,
            "{}: gfx1100 code object differs from the original",
            fat.set
        );

        // Without the shim the runtime is handed the HIPK wrapper, which a
        // stock runtime rejects.
        let (out, regs) = run(false, Some("gfx1100"), "plain");
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(regs.len(), 1);
        assert_eq!(regs[0].magic, HIPK_MAGIC);
        assert_eq!(regs[0].kind, PayloadKind::Marker);

        // Archives removed: the shim names the paths it searched.
        fs::rename(dir.join(".kpack"), dir.join("kpack-moved")).expect("move archives");
        let (out, regs) = run(true, Some("gfx1100"), "gone");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("rocm-kpack preload: no device code for gfx1100"),
            "{stderr}"
        );
        assert!(stderr.contains(".kpack/app_pie.kpm"), "{stderr}");
        assert!(stderr.contains("app_pie_gfx1100.kpack"), "{stderr}");
        assert_eq!(regs.first().map(|r| r.magic), Some(HIPK_MAGIC));
        fs::rename(dir.join("kpack-moved"), dir.join(".kpack")).expect("restore");
    }
}

#[test]
fn split_library_with_three_translation_units_through_the_shim() {
    // libmulti.so: three wrappers, three bundles; each registration must get
    // the code object of its own co_index.
    let tmp = tempfile::tempdir().expect("tmp");
    for fat in fixtures::all_fat()
        .into_iter()
        .filter(|f| f.binary.name == "libmulti.so")
    {
        let dir = tmp.path().join(fat.set);
        let host = split(&fat.path, &dir);
        let record = dir.join("rec");
        fs::create_dir_all(&record).expect("mkdir");
        let mut cmd = with_stub(Command::new(fixtures::run_lib()), &record, true);
        cmd.arg(&host)
            .env("ROCM_KPACK_ARCH_OVERRIDE", "gfx90a:xnack-,gfx1101");
        let out = output(&mut cmd);
        assert!(out.status.success(), "{}: {}", fat.set, text(&out.stderr));
        let regs = registrations(&record);
        assert_eq!(regs.len(), 3, "{}", fat.set);
        let mut seen = Vec::new();
        for reg in &regs {
            assert_eq!(reg.magic, HIPF_MAGIC);
            let entries = bundle_entries(reg);
            // Which bundle was this? The one whose gfx1101 object matches.
            let got_1101 = &entries
                .iter()
                .find(|(t, _)| t.ends_with("--gfx1101"))
                .expect("gfx1101 entry")
                .1;
            let index = (0..3)
                .find(|&i| {
                    original_code_objects(&fat.path, i)
                        .iter()
                        .any(|(t, d)| t == "gfx1101" && d == got_1101)
                })
                .expect("gfx1101 object matches one original bundle");
            let original = original_code_objects(&fat.path, index);
            let want_90a = &original
                .iter()
                .find(|(t, _)| t == "gfx90a:xnack-")
                .expect("xnack- build")
                .1;
            let got_90a = &entries
                .iter()
                .find(|(t, _)| t.ends_with("--gfx90a:xnack-"))
                .expect("gfx90a entry")
                .1;
            assert!(
                got_90a == want_90a,
                "{}: bundle {index} gfx90a:xnack- differs",
                fat.set
            );
            seen.push(index);
        }
        seen.sort_unstable();
        assert_eq!(seen, [0, 1, 2], "{}: each translation unit once", fat.set);
    }
}

// ---------------------------------------------------------------------------
// Detected GPUs are named the way the HIP runtime names them in the process:
// KFD sysfs gives `gfx90a:sramecc+` (xnack is a per-process mode), the
// runtime runs it as `gfx90a:sramecc+:xnack-` unless HSA_XNACK=1. Detection
// reads the MI210 fixture tree through ROCM_KPACK_SYSFS_ROOT.

fn mi210_sysfs() -> PathBuf {
    fixtures::machine("mi210")
}

#[test]
fn shim_adds_the_process_xnack_mode_to_detected_gpus() {
    let tmp = tempfile::tempdir().expect("tmp");
    let archive = tmp.path().join("x.kpack");
    let minus = b"\x7fELF gfx90a:xnack- build".repeat(40);
    let plus = b"\x7fELF gfx90a:xnack+ build".repeat(30);
    write_archive(
        &archive,
        &[
            ("lib/libx.so#5", "gfx90a:xnack-", &minus),
            ("lib/libx.so#5", "gfx90a:xnack+", &plus),
            ("lib/libx.so#5", "gfx1100", b"another GPU"),
        ],
    );
    for (hsa_xnack, arch, want) in [
        (None, "gfx90a:xnack-", &minus),
        (Some("0"), "gfx90a:xnack-", &minus),
        (Some("1"), "gfx90a:xnack+", &plus),
    ] {
        let record = tmp.path().join(format!("rec-{hsa_xnack:?}"));
        fs::create_dir_all(&record).expect("mkdir");
        let mut cmd = with_stub(Command::new(fixtures::stub_probe()), &record, true);
        cmd.arg("hipk")
            .env("ROCM_KPACK_PATH", &archive)
            .env("ROCM_KPACK_SYSFS_ROOT", mi210_sysfs());
        if let Some(v) = hsa_xnack {
            cmd.env("HSA_XNACK", v);
        }
        let out = output(&mut cmd);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let regs = registrations(&record);
        assert_eq!(regs.len(), 1);
        assert_eq!(
            regs[0].magic,
            HIPF_MAGIC,
            "HSA_XNACK={hsa_xnack:?}: {}",
            text(&out.stderr)
        );
        let entries = bundle_entries(&regs[0]);
        let triples: Vec<&str> = entries.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            triples,
            [
                "host-x86_64-unknown-linux--".to_owned(),
                format!("hipv4-amdgcn-amd-amdhsa--{arch}")
            ],
            "HSA_XNACK={hsa_xnack:?}"
        );
        assert!(
            entries[1].1 == *want,
            "HSA_XNACK={hsa_xnack:?}: wrong bytes"
        );
    }

    // ROCM_KPACK_ARCH_OVERRIDE is used as given: `gfx90a:sramecc+` stays
    // without xnack, and no build in the archive is usable with both modes.
    let record = tmp.path().join("rec-override");
    fs::create_dir_all(&record).expect("mkdir");
    let mut cmd = with_stub(Command::new(fixtures::stub_probe()), &record, true);
    cmd.arg("hipk")
        .env("ROCM_KPACK_PATH", &archive)
        .env("ROCM_KPACK_SYSFS_ROOT", mi210_sysfs())
        .env("ROCM_KPACK_ARCH_OVERRIDE", "gfx90a:sramecc+");
    let out = output(&mut cmd);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("no device code for gfx90a:sramecc+ "),
        "{stderr}"
    );
    assert_eq!(
        registrations(&record).first().map(|r| r.magic),
        Some(HIPK_MAGIC)
    );
}

/// Compiles a program that `dlopen`s its argument with lazy binding (a real
/// ROCm library references HIP functions the stand-in lacks, and calls
/// none of them while loading) and exits without unloading it.
fn dlopen_lazy(dir: &Path) -> PathBuf {
    let src = dir.join("dlopen_lazy.c");
    fs::write(
        &src,
        "#include <dlfcn.h>\n#include <stdio.h>\n\
         int main(int argc, char **argv) {\n\
           if (argc != 2) return 1;\n\
           if (!dlopen(argv[1], RTLD_LAZY | RTLD_LOCAL)) { fprintf(stderr, \"%s\\n\", dlerror()); return 2; }\n\
           return 0;\n\
         }\n",
    )
    .expect("write source");
    let exe = dir.join("dlopen_lazy");
    let o = output(Command::new("cc").arg("-o").arg(&exe).arg(&src).arg("-ldl"));
    assert!(o.status.success(), "cc: {}", text(&o.stderr));
    exe
}

#[test]
fn mi210_gets_debian_rocrand_xnack_minus_code_object_through_the_shim() {
    let root = rocm_kpack_test_support::debian::extracted("librocrand1")
        .expect("librocrand (scripts/test.sh fetches it)");
    let fat = root.join("usr/lib/x86_64-linux-gnu/librocrand.so.1.1");
    let tmp = tempfile::tempdir().expect("tmp");
    let host = split(&fat, &tmp.path().join("split"));
    let original = original_code_objects(&fat, 0);
    let (_, want) = original
        .iter()
        .find(|(t, _)| t == "gfx90a:xnack-")
        .expect("Debian ships gfx90a:xnack-");

    // librocrand links libamdhip64.so.5: the stand-in under that name.
    let hip = tmp.path().join("hip");
    fs::create_dir_all(&hip).expect("mkdir");
    std::os::unix::fs::symlink(fixtures::stub_lib(), hip.join("libamdhip64.so.5"))
        .expect("symlink");
    let record = tmp.path().join("rec");
    fs::create_dir_all(&record).expect("mkdir");
    let mut cmd = with_stub(Command::new(dlopen_lazy(tmp.path())), &record, true);
    cmd.arg(&host)
        .env("LD_LIBRARY_PATH", &hip)
        .env("ROCM_KPACK_SYSFS_ROOT", mi210_sysfs());
    let out = output(&mut cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let regs = registrations(&record);
    assert_eq!(regs.len(), 1, "{}", text(&out.stderr));
    assert_eq!(regs[0].magic, HIPF_MAGIC, "{}", text(&out.stderr));
    let entries = bundle_entries(&regs[0]);
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[1].0, "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-");
    assert!(
        entries[1].1 == *want,
        "gfx90a:xnack- code object differs from Debian's"
    );
}
