//! A large fat Windows DLL, built at test time the way
//! tests/fixtures/windows/build.sh builds the committed ones (clang-19 for
//! x86_64-pc-windows-msvc, lld-link-19, the fixture CRT and the stand-in
//! HIP runtime's import library): `tests/fixtures/src/lib.hip` for two processors plus a
//! host data array of the requested size, so that the host code, not the
//! device code, makes the DLL big. Built once per size and cached under the
//! test-data cache ([`crate::debian::cache_dir`]/pe-big/), atomically.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The DLL (`kpbig.dll`) with `host_mib` MiB of host data, built on first use.
pub fn big_dll(host_mib: usize) -> io::Result<PathBuf> {
    let dir = crate::debian::cache_dir()
        .join("pe-big")
        .join(format!("h{host_mib}"));
    let dll = dir.join("kpbig.dll");
    if dll.is_file() {
        return Ok(dll);
    }
    let parent = dir.parent().unwrap_or(&dir);
    fs::create_dir_all(parent)?;
    let work = tempfile::Builder::new()
        .prefix(".pe-build-")
        .tempdir_in(parent)?;
    build(host_mib, work.path())?;
    // Another process may have finished first: either copy is the same.
    match fs::rename(work.path().join("out"), &dir) {
        Ok(()) => Ok(dll),
        Err(_) if dll.is_file() => Ok(dll),
        Err(e) => Err(e),
    }
}

fn run(cmd: &mut Command) -> io::Result<()> {
    let out = cmd.output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

fn build(host_mib: usize, work: &Path) -> io::Result<()> {
    let fixtures = crate::fixtures::fixtures_dir();
    let out = work.join("out");
    fs::create_dir_all(&out)?;
    const T: &str = "--target=x86_64-pc-windows-msvc";
    run(Command::new("llvm-dlltool-19")
        .args(["-m", "i386:x86-64", "-d"])
        .arg(fixtures.join("windows/amdhip64.def"))
        .arg("-l")
        .arg(work.join("amdhip64.lib")))?;
    run(Command::new("clang-19")
        .args([T, "-O2", "-DKPACK_DLL", "-c"])
        .arg(fixtures.join("windows/crt.c"))
        .arg("-o")
        .arg(work.join("crt.obj")))?;
    run(Command::new("clang-19")
        .args([
            T,
            "-x",
            "hip",
            "-nogpuinc",
            "-nogpulib",
            "-O2",
            "-fno-ident",
        ])
        .args([
            "--offload-arch=gfx1100",
            "--offload-arch=gfx90a",
            "-cuid=kpbig",
            "-c",
        ])
        .arg(format!("-I{}", fixtures.join("src").display()))
        .arg(fixtures.join("src/lib.hip"))
        .arg("-o")
        .arg(work.join("lib.obj")))?;
    // One non-zero byte keeps the array in initialised data (file bytes),
    // not in zero-filled memory.
    fs::write(
        work.join("host.c"),
        format!(
            "__declspec(dllexport) const unsigned char kpack_big_host[{}] = {{1}};\n",
            host_mib << 20
        ),
    )?;
    run(Command::new("clang-19")
        .args([T, "-O2", "-c"])
        .arg(work.join("host.c"))
        .arg("-o")
        .arg(work.join("host.obj")))?;
    run(Command::new("lld-link-19")
        .args([
            "/nologo",
            "/brepro",
            "/release",
            "/nodefaultlib",
            "/dll",
            "/noimplib",
        ])
        .args(["/entry:_DllMainCRTStartup", "/export:kpack_fixture_run"])
        .arg(format!("/out:{}", out.join("kpbig.dll").display()))
        .arg(work.join("crt.obj"))
        .arg(work.join("lib.obj"))
        .arg(work.join("host.obj"))
        .arg(work.join("amdhip64.lib")))?;
    Ok(())
}
