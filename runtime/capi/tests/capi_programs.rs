//! The built C library as C programs see it: exported symbols vs the header,
//! the header as C99 and C++, the C test program (tests/c/kpack_test.c)
//! linked against librocm_kpack.so and librocm_kpack.a and run under
//! valgrind, `ROCM_KPACK_DEBUG` output, the install layout with a CMake
//! consumer using find_package(rocm-kpack) and pkg-config, and code objects
//! loaded out of split host binaries byte-identical to the originals.

// Linux only: the programs are built with cc against librocm_kpack.so/.a and
// run under valgrind. On Windows, tests/tests/suite/windows_split.rs drives
// rocm_kpack.dll under Wine through tests/fixtures/windows/kpack_probe.exe.
#![cfg(unix)]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rocm_kpack_format::bundle::parse_fatbin;
use rocm_kpack_format::wrapper::{FatbinWrapper, HIPK_MAGIC};
use rocm_kpack_testkit::layout::*;

// Built artifacts (C library, static archive, preload shim). Here, not in
// the testkit, which the loader's tests share without the test-support
// crate.

pub struct Artifacts {
    /// target/<profile>
    pub out_dir: PathBuf,
    /// Directory holding `librocm_kpack.so.0` (symlink named by the SONAME).
    pub soname_dir: PathBuf,
    pub cdylib: PathBuf,
    pub staticlib: PathBuf,
    pub preload: PathBuf,
    /// `cargo` profile name matching `out_dir`.
    pub profile: String,
}

/// Builds (once per test process) and locates the C artifacts with the same
/// profile as the running tests.
pub fn artifacts() -> &'static Artifacts {
    static ART: OnceLock<Artifacts> = OnceLock::new();
    ART.get_or_init(|| {
        let out_dir = rocm_kpack_test_support::bins::profile_dir();
        let dir_name = out_dir
            .file_name()
            .expect("profile dir")
            .to_string_lossy()
            .into_owned();
        let profile = if dir_name == "debug" {
            "dev".to_owned()
        } else {
            dir_name
        };
        // The one build of the workspace's binaries and libraries every
        // test binary shares (the same packages, so the same features): a
        // build of other packages here would resolve other features and
        // replace the files other tests are running.
        let built = rocm_kpack_test_support::bins::built();
        assert_eq!(built, &out_dir, "test binary outside target/<profile>");
        let cdylib = out_dir.join("librocm_kpack.so");
        let staticlib = out_dir.join("librocm_kpack.a");
        let preload = out_dir.join("librocm_kpack_preload.so");
        for p in [&cdylib, &staticlib, &preload] {
            assert!(p.is_file(), "{} was not built", p.display());
        }
        let soname_dir = out_dir.join("rocm-kpack-soname");
        fs::create_dir_all(&soname_dir).expect("mkdir soname dir");
        let link = soname_dir.join("librocm_kpack.so.0");
        let _ = fs::remove_file(&link);
        #[cfg(unix)]
        std::os::unix::fs::symlink(&cdylib, &link).expect("symlink SONAME");
        Artifacts {
            out_dir,
            soname_dir,
            cdylib,
            staticlib,
            preload,
            profile,
        }
    })
}

fn repo() -> PathBuf {
    workspace_root()
}

fn include_dir() -> PathBuf {
    repo().join("runtime/capi/include")
}

fn test_c_source() -> PathBuf {
    repo().join("tests/c/kpack_test.c")
}

const WARNINGS: [&str; 4] = ["-Wall", "-Wextra", "-Werror", "-pedantic"];

/// System libraries the static archive needs
/// (`rustc --print native-static-libs`).
const STATIC_LIBS: [&str; 7] = [
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];

/// The C test program, linked against the shared library (rpath to the
/// SONAME directory) or the static archive; built once per test process.
fn c_program(shared: bool) -> &'static Path {
    static SHARED: OnceLock<PathBuf> = OnceLock::new();
    static STATIC: OnceLock<PathBuf> = OnceLock::new();
    let cell = if shared { &SHARED } else { &STATIC };
    cell.get_or_init(|| {
        let art = artifacts();
        let out = art.out_dir.join(if shared {
            "kpack_test_shared"
        } else {
            "kpack_test_static"
        });
        let mut cmd = Command::new("cc");
        cmd.arg("-std=c99")
            .args(WARNINGS)
            .arg("-g")
            .arg("-I")
            .arg(include_dir())
            .arg(test_c_source());
        if shared {
            cmd.arg(format!("-L{}", art.soname_dir.display()))
                .arg(format!("-Wl,-rpath,{}", art.soname_dir.display()))
                .arg(art.soname_dir.join("librocm_kpack.so.0"));
        } else {
            cmd.arg(&art.staticlib).args(STATIC_LIBS);
        }
        cmd.arg("-o").arg(&out);
        run_ok(&mut cmd);
        out
    })
}

fn c_run(shared: bool, args: &[&str]) -> Command {
    let mut cmd = Command::new(c_program(shared));
    cmd.args(args);
    for v in [
        "ROCM_KPACK_PATH",
        "ROCM_KPACK_PATH_PREFIX",
        "ROCM_KPACK_DISABLE",
        "ROCM_KPACK_DEBUG",
        "ROCM_KPACK_ARCH_OVERRIDE",
    ] {
        cmd.env_remove(v);
    }
    cmd
}

fn testdata_str() -> String {
    testdata().display().to_string()
}

/// Function names declared with KPACK_API in the header.
fn header_functions() -> BTreeSet<String> {
    let text = fs::read_to_string(include_dir().join("rocm_kpack/kpack.h")).expect("header");
    let mut names = BTreeSet::new();
    for decl in text.split("KPACK_API").skip(1) {
        let before_paren = decl.split('(').next().unwrap_or_default();
        if let Some(name) = before_paren.split_whitespace().last() {
            names.insert(name.trim_start_matches('*').to_owned());
        }
    }
    names
}

fn dynamic_symbols(lib: &Path) -> BTreeSet<String> {
    let out = run_ok(Command::new("nm").args(["-D", "--defined-only"]).arg(lib));
    out.lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(str::to_owned)
        .collect()
}

#[test]
fn exported_symbols_are_exactly_the_header_functions() {
    let art = artifacts();
    let header = header_functions();
    assert_eq!(header.len(), 14, "{header:?}");
    assert_eq!(dynamic_symbols(&art.cdylib), header);
    let soname = run_ok(Command::new("readelf").arg("-d").arg(&art.cdylib));
    assert!(
        soname.contains("Library soname: [librocm_kpack.so.0]"),
        "{soname}"
    );
    // The shim exports only the two interposed HIP entry points.
    let shim: Vec<String> = dynamic_symbols(&art.preload).into_iter().collect();
    assert_eq!(shim, ["__hipRegisterFatBinary", "__hipUnregisterFatBinary"]);
}

/// What `librocm_kpack` links, built alone as runtime/install-runtime.sh
/// builds it: the readers and the loader, none of the tools' plumbing
/// (temporary files, command lines, progress, the network).
#[test]
fn the_c_library_links_none_of_the_tools_crates() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--offline", "-p", "rocm-kpack-capi", "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}"])
        .current_dir(repo())
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crates: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    assert!(crates.contains("rocm-kpack-loader"), "{crates:?}");
    for tool in [
        "tempfile",
        "clap",
        "anyhow",
        "indicatif",
        "reqwest",
        "rayon",
    ] {
        assert!(
            !crates.contains(tool),
            "librocm_kpack links {tool}: {crates:?}"
        );
    }
}

#[test]
fn header_compiles_as_c99_and_cxx() {
    let dir = tempfile::tempdir().expect("tmp");
    let c = dir.path().join("h.c");
    fs::write(
        &c,
        "#include <rocm_kpack/kpack.h>\nint main(void) { return KPACK_SUCCESS; }\n",
    )
    .expect("write");
    run_ok(
        Command::new("cc")
            .args(["-std=c99", "-fsyntax-only"])
            .args(WARNINGS)
            .arg("-I")
            .arg(include_dir())
            .arg(&c),
    );
    let cxx = dir.path().join("h.cpp");
    fs::write(&cxx, "#include <rocm_kpack/kpack.h>\nint main() { kpack_cache_t c = nullptr; (void)c; return KPACK_SUCCESS; }\n")
        .expect("write");
    for std in ["-std=c++11", "-std=c++17"] {
        run_ok(
            Command::new("c++")
                .arg(std)
                .arg("-fsyntax-only")
                .args(WARNINGS)
                .arg("-I")
                .arg(include_dir())
                .arg(&cxx),
        );
    }
}

#[test]
fn c_program_reads_the_vectors_shared_and_static() {
    for shared in [true, false] {
        let out = run_ok(&mut c_run(shared, &["vectors", &testdata_str()]));
        assert!(out.contains("OK"), "{out}");
    }
    // The shared build really uses the shared library.
    let needed = run_ok(Command::new("readelf").arg("-d").arg(c_program(true)));
    assert!(needed.contains("[librocm_kpack.so.0]"), "{needed}");
}

#[test]
fn c_program_is_clean_under_valgrind() {
    let mut cmd = Command::new("valgrind");
    cmd.args([
        "-q",
        "--error-exitcode=99",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite,indirect",
    ])
    .arg(c_program(true))
    .args(["vectors", &testdata_str()]);
    let out = run_ok(&mut cmd);
    assert!(out.contains("OK"), "{out}");
}

#[test]
fn rocm_kpack_debug_logs_the_search() {
    let mut cmd = c_run(true, &["vectors", &testdata_str()]);
    cmd.env("ROCM_KPACK_DEBUG", "1");
    let (ok, _, stderr) = run(&mut cmd);
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("kpack: "))
        .collect();
    assert!(
        lines.iter().any(|l| l.contains("test_noop.kpack")),
        "{stderr}"
    );
    assert!(lines.iter().any(|l| l.contains("wanted")), "{stderr}");
    assert!(
        lines.iter().any(|l| l.contains("missing.kpack")),
        "{stderr}"
    );
    for off in ["0", ""] {
        let mut cmd = c_run(true, &["vectors", &testdata_str()]);
        cmd.env("ROCM_KPACK_DEBUG", off);
        let (ok, _, stderr) = run(&mut cmd);
        assert!(
            ok && !stderr.contains("kpack: "),
            "ROCM_KPACK_DEBUG={off:?}: {stderr}"
        );
    }
}

#[test]
fn install_layout_cmake_and_pkg_config() {
    let art = artifacts();
    let prefix = tempfile::tempdir().expect("tmp");
    let p = prefix.path().join("rocm prefix"); // a space must survive
    run_ok(
        Command::new(repo().join("runtime/install-runtime.sh"))
            .arg("--prefix")
            .arg(&p)
            .args(["--profile", &art.profile, "--no-build"]),
    );
    let lib = p.join("lib");
    assert_eq!(
        fs::read_link(lib.join("librocm_kpack.so")).ok(),
        Some(PathBuf::from("librocm_kpack.so.0"))
    );
    assert_eq!(
        fs::read_link(lib.join("librocm_kpack.so.0")).ok(),
        Some(PathBuf::from("librocm_kpack.so.0.1.0"))
    );
    for f in [
        "lib/librocm_kpack.so.0.1.0",
        "lib/librocm_kpack.a",
        "lib/librocm_kpack_preload.so",
        "include/rocm_kpack/kpack.h",
        "include/rocm_kpack/kpack_types.h",
        "include/rocm_kpack/kpack_export.h",
        "lib/cmake/rocm-kpack/rocm-kpack-config.cmake",
        "lib/cmake/rocm-kpack/rocm-kpack-config-version.cmake",
        "lib/pkgconfig/rocm-kpack.pc",
    ] {
        assert!(p.join(f).is_file(), "{f} missing");
    }

    // pkg-config: prefix substituted, compiles and links a program.
    let pc = fs::read_to_string(lib.join("pkgconfig/rocm-kpack.pc")).expect("pc");
    assert!(pc.contains(&format!("prefix={}", p.display())), "{pc}");
    let flags = run_ok(
        Command::new("pkg-config")
            .args(["--cflags", "--libs", "rocm-kpack"])
            .env("PKG_CONFIG_PATH", lib.join("pkgconfig")),
    );
    assert!(flags.contains("-lrocm_kpack"), "{flags}");

    // CMake consumer: find_package(rocm-kpack) builds the test program
    // against rocm::rocm_kpack (shared) and rocm::rocm_kpack_static.
    let build = prefix.path().join("build");
    run_ok(
        Command::new("cmake")
            .arg("-S")
            .arg(repo().join("tests/c/cmake-consumer"))
            .arg("-B")
            .arg(&build)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", p.display())),
    );
    run_ok(Command::new("cmake").arg("--build").arg(&build));
    for exe in ["kpack_test_shared", "kpack_test_static"] {
        let out = run_ok(Command::new(build.join(exe)).args(["vectors", &testdata_str()]));
        assert!(out.contains("OK"), "{exe}: {out}");
    }
    run_ok(&mut Command::new(build.join("kpack_header_cxx")));
    let needed = run_ok(
        Command::new("readelf")
            .arg("-d")
            .arg(build.join("kpack_test_shared")),
    );
    assert!(needed.contains("[librocm_kpack.so.0]"), "{needed}");
    // A major version the package cannot satisfy is refused; ROCM_KPACK_USE_STATIC_LIBS
    // switches rocm::rocm_kpack to the archive.
    let probe = prefix.path().join("probe");
    fs::create_dir_all(&probe).expect("mkdir");
    let configure = |version: &str, extra: &[&str]| {
        fs::write(
            probe.join("CMakeLists.txt"),
            format!(
                "cmake_minimum_required(VERSION 3.16)\nproject(p C)\nfind_package(rocm-kpack {version} CONFIG REQUIRED)\n\
                 get_target_property(t rocm::rocm_kpack TYPE)\nmessage(STATUS \"kpack target type: ${{t}}\")\n"
            ),
        )
        .expect("write");
        run(Command::new("cmake")
            .arg("-S")
            .arg(&probe)
            .arg("-B")
            .arg(probe.join(format!("b{version}{}", extra.len())))
            .arg(format!("-DCMAKE_PREFIX_PATH={}", p.display()))
            .args(extra))
    };
    let (ok, stdout, stderr) = configure("0.1", &[]);
    assert!(
        ok && stdout.contains("kpack target type: SHARED_LIBRARY"),
        "{stdout}{stderr}"
    );
    let (ok, stdout, stderr) = configure("0.1", &["-DROCM_KPACK_USE_STATIC_LIBS=ON"]);
    assert!(
        ok && stdout.contains("kpack target type: STATIC_LIBRARY"),
        "{stdout}{stderr}"
    );
    let (ok, _, _) = configure("1.0", &[]);
    assert!(!ok, "find_package(rocm-kpack 1.0) must fail against 0.1.0");
}

// ---------------------------------------------------------------------------
// Split binaries: every fixture split by `rocm-kpack split-binary`; the C
// program reads the marker and the wrappers out of the host-only ELF and
// loads every (co_index, target) through kpack_load_code_object, comparing
// with the code objects the fat binary carried.

/// Sections of an ELF file, dumped with objcopy.
fn dump_section(elf: &Path, name: &str, dir: &Path) -> Vec<u8> {
    fs::create_dir_all(dir).expect("mkdir");
    let out = dir.join(format!("{}.bin", name.trim_start_matches('.')));
    run_ok(
        Command::new("objcopy")
            .arg(format!("--dump-section={name}={}", out.display()))
            .arg(elf)
            .arg(dir.join("objcopy-discard")),
    );
    fs::read(&out).expect("dumped section")
}

/// The `rocm-kpack` CLI, built with this test binary's profile.
fn splitter() -> PathBuf {
    rocm_kpack_test_support::bins::bin("rocm-kpack")
}

fn fixtures() -> PathBuf {
    repo().join("tests/fixtures")
}

#[test]
fn split_binaries_load_byte_identical_code_objects() {
    let root = tempfile::tempdir().expect("tmp");
    let mut checked = 0;
    for set in ["clang15", "clang19", "clang19-compressed"] {
        for name in [
            "app_pie",
            "app_nopie",
            "libfixture.so",
            "libmulti.so",
            "app_rdc",
        ] {
            let fat = fixtures().join(set).join(name);
            let dir = root.path().join(set).join(name.replace('.', "_"));
            run_ok(
                Command::new(splitter())
                    .arg("split-binary")
                    .arg(&fat)
                    .arg("--out")
                    .arg(&dir),
            );
            let host = dir.join(name);
            let scratch = dir.join("scratch");
            // The host-only binary: HIPK wrappers and a marker, no device code.
            let segment = dump_section(&host, ".hipFatBinSegment", &scratch);
            let wrappers = FatbinWrapper::parse_all(&segment).expect("wrappers");
            assert!(
                wrappers.iter().all(|w| w.magic == HIPK_MAGIC),
                "{set}/{name}"
            );
            // Expected: co_index k = bundle k of the original .hip_fatbin.
            let fatbin = dump_section(&fat, ".hip_fatbin", &scratch.join("orig"));
            let bundles = parse_fatbin(&fatbin).expect("bundles");
            let co_indices: BTreeSet<u32> = wrappers.iter().map(|w| w.co_index()).collect();
            assert_eq!(
                co_indices.len(),
                bundles.len(),
                "{set}/{name}: one co_index per bundle"
            );
            let mut list = String::new();
            let mut n = 0;
            for (k, bundle) in bundles.iter().enumerate() {
                for (target, bytes) in bundle.code_objects() {
                    let p = scratch.join(format!("expected-{k}-{n}.co"));
                    fs::write(&p, bytes).expect("write");
                    list.push_str(&format!("{k} {target} {}\n", p.display()));
                    n += 1;
                }
            }
            let list_path = scratch.join("expect.txt");
            fs::write(&list_path, &list).expect("write");
            for shared in [true, false] {
                let out = run_ok(&mut c_run(
                    shared,
                    &[
                        "split",
                        &host.display().to_string(),
                        &list_path.display().to_string(),
                    ],
                ));
                assert!(
                    out.contains(&format!("loaded {n} identical code objects")),
                    "{set}/{name}: {out}"
                );
            }
            checked += n;
        }
    }
    // 3 sets x (1+1+1+3+1 bundles) x 5 or 7 targets.
    assert!(checked >= 100, "{checked}");
}

/// The overlay layout of AMD's torch wheels (a few kernels in
/// `foo_gfx90a:xnack-.kpack`, all of them in `foo_gfx90a.kpack`), native and
/// generic-ISA archives of gfx942 with damaged copies in the most specific
/// ones, a damaged gfx1030 archive; the splitter's marker, and a marker
/// naming one archive directly.
fn clr_layout() -> Layout {
    use rocm_kpack_format::archive::CompressionScheme::{None as Plain, ZstdPerKernel as Zstd};
    let l = Layout::new();
    let k = |co: u32, arch: &str, text: &str| kernel(&key(co), arch, text.as_bytes().to_vec());
    l.archive(
        "gfx90a:xnack-",
        Plain,
        &[k(0, "gfx90a:xnack-", "overlay-xnack-minus#0")],
    );
    l.archive(
        "gfx90a:xnack+",
        Plain,
        &[k(1, "gfx90a:xnack+", "overlay-xnack-plus#1")],
    );
    l.archive(
        "gfx90a",
        Plain,
        &[
            k(0, "gfx90a", "base#0"),
            k(1, "gfx90a", "base#1"),
            k(2, "gfx90a", "base#2"),
        ],
    );
    let six = l.archive(
        "gfx942:sramecc+:xnack-",
        Zstd,
        &[k(6, "gfx942:sramecc+:xnack-", "damaged#6")],
    );
    corrupt_first_frame(&six);
    let five = l.archive(
        "gfx942:sramecc+",
        Zstd,
        &[k(5, "gfx942:sramecc+", "damaged#5")],
    );
    corrupt_first_frame(&five);
    l.archive(
        "gfx942",
        Plain,
        &[k(0, "gfx942", "gfx942#0"), k(5, "gfx942", "gfx942#5")],
    );
    l.archive(
        "gfx9-4-generic",
        Plain,
        &[k(3, "gfx9-4-generic", "generic#3")],
    );
    let gfx1030 = l.archive("gfx1030", Zstd, &[k(0, "gfx1030", "damaged#0")]);
    corrupt_first_frame(&gfx1030);
    fs::write(
        l.root().join("marker.bin"),
        l.marker().to_msgpack().expect("marker"),
    )
    .expect("write marker");
    let direct = marker(KERNEL_NAME, &["../.kpack/foo_gfx90a.kpack"]);
    fs::write(
        l.root().join("direct.bin"),
        direct.to_msgpack().expect("marker"),
    )
    .expect("write marker");
    l
}

/// Each case of `clr_cases.txt` as `name -> (code, bytes)`.
fn clr_expected() -> Vec<(String, String)> {
    let table = repo().join("runtime/capi/tests/clr_cases.txt");
    fs::read_to_string(table)
        .expect("case table")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 7, "{l}");
            (f[0].to_string(), format!("{} {}", f[5], f[6]))
        })
        .collect()
}

fn clr_outcomes(lib_dir: Option<&Path>, layout: &Layout) -> Vec<(String, String)> {
    let table = repo().join("runtime/capi/tests/clr_cases.txt");
    let root = layout.root().display().to_string();
    let mut cmd = c_run(true, &["clr", &root, &table.display().to_string()]);
    if let Some(dir) = lib_dir {
        // The program's RUNPATH yields to LD_LIBRARY_PATH.
        cmd.env("LD_LIBRARY_PATH", dir);
    }
    let out = run_ok(&mut cmd);
    out.lines()
        .map(|l| {
            let (name, rest) = l.split_once(' ').expect("name and outcome");
            (name.to_string(), rest.to_string())
        })
        .collect()
}

/// The fall-through rule on the calls CLR makes (one cache; the agent's
/// fully prefixed ISA, then its generic ISA), case by case as AMD's current
/// loader answers (`clr_cases.txt`): a kernel missing from an overlay
/// comes from the archive after it, a damaged copy hands on to the next,
/// KERNEL_NOT_FOUND only after every archive (or the last one's error),
/// ARCHIVE_NOT_FOUND when nothing opens, ARCH_NOT_FOUND when what opens
/// lacks the arch. With `KPACK_REFERENCE_LIB_DIR` (the directory of AMD's
/// `librocm_kpack.so.0`, built by tests/scripts/build-reference-runtime.sh)
/// the same program runs against it too.
#[test]
fn clr_loads_fall_through_as_amds_loader_does() {
    let layout = clr_layout();
    let expected = clr_expected();
    assert_eq!(expected.len(), 20);
    assert_eq!(clr_outcomes(None, &layout), expected, "ours");
    if let Some(dir) = std::env::var_os("KPACK_REFERENCE_LIB_DIR") {
        assert_eq!(
            clr_outcomes(Some(Path::new(&dir)), &layout),
            expected,
            "AMD's loader"
        );
    }
}
