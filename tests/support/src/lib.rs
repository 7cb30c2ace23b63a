//! Helpers shared by the workspace's tests and benchmarks: fixture paths,
//! Debian test data, fixture trees, the workspace's binaries, clang tools,
//! AMD's `@GFXARCH@` archive lookup, the public tool's archive layout and an
//! HTTP server that misbehaves on cue.

pub mod bins;
pub mod bomb;
pub mod ccob;
pub mod clang;
pub mod debian;
pub mod fixtures;
pub mod gfxarch;
pub mod http;
pub mod layouts;
pub mod pe;
pub mod snapshot;
pub mod tree;

/// `<venv>/lib/pythonX.Y/site-packages` of a virtual environment.
pub fn site_packages(venv: &std::path::Path) -> std::path::PathBuf {
    let lib = venv.join("lib");
    let py = std::fs::read_dir(&lib)
        .expect("venv lib")
        .map(|e| e.expect("entry").path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("python"))
        })
        .expect("pythonX.Y");
    py.join("site-packages")
}
