//! Helpers shared by the workspace's tests and benchmarks (the one support
//! crate of the test binary `tests/tests/suite`): fixture paths, Debian test
//! data, fixture trees, the workspace's binaries, clang tools, AMD's
//! `@GFXARCH@` archive lookup, the public tool's archive layout, packages and
//! package-manager roots, and an HTTP server that misbehaves on cue.

pub mod amd_native;
pub mod bins;
pub use rocm_kpack_testkit::bomb;
pub mod ccob;
pub mod clang;
pub mod databases;
pub mod debian;
pub mod fixtures;
pub mod gfxarch;
pub mod http;
pub mod layouts;
pub mod packages;
pub mod pe;
pub mod phdr;
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

/// The modules [`HostilePythonDir`] plants.
const HOSTILE_MODULES: [&str; 6] = [
    "json.py",
    "pip.py",
    "site.py",
    "sitecustomize.py",
    "usercustomize.py",
    "encodings/__init__.py",
];

/// A directory that runs code as whoever starts a Python from it: module
/// files (`json.py`, `pip.py`, `site.py`, `sitecustomize.py`,
/// `usercustomize.py`, `encodings/`) that a non-isolated interpreter
/// imports from its working directory, each creating `<dir>/ran-<name>`
/// when imported ([`HostilePythonDir::ran`]).
pub struct HostilePythonDir {
    /// The directory to start commands from.
    pub dir: std::path::PathBuf,
}

impl HostilePythonDir {
    /// Plants the modules in `dir` (created).
    pub fn plant(dir: &std::path::Path) -> HostilePythonDir {
        for module in HOSTILE_MODULES {
            let path = dir.join(module);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            let marker = dir.join(format!("ran-{}", module.replace('/', "-")));
            std::fs::write(
                &path,
                format!("open({:?}, 'a').close()\n", marker.display().to_string()),
            )
            .expect("plant");
        }
        HostilePythonDir {
            dir: dir.to_path_buf(),
        }
    }

    /// Removes the planted modules (their markers stay).
    pub fn remove_modules(&self) {
        for module in HOSTILE_MODULES {
            std::fs::remove_file(self.dir.join(module)).expect("remove module");
        }
        std::fs::remove_dir(self.dir.join("encodings")).expect("remove encodings");
    }

    /// The markers of modules that ran.
    pub fn ran(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.dir)
            .expect("hostile dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("ran-"))
            .collect();
        v.sort();
        v
    }
}
