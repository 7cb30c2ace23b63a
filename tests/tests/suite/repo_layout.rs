//! Rules about the source tree itself: every document a source comment
//! cites and every path cited in docs/ and comments is in the repository, nothing reads outside the repository, file
//! names are built only by the format crate's `layout` module, no
//! shipped crate reads anything under `tests/` or embeds a file from
//! outside its own directory, the C library is built by one
//! crate, and the splitter does not link the fetcher.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root")
        .to_path_buf()
}

/// Tracked and untracked-but-not-ignored files of the repository.
fn files() -> Vec<PathBuf> {
    let out = Command::new("git")
        .args([
            "ls-files",
            "--cached",
            "--others",
            "--exclude-standard",
            "-z",
        ])
        .current_dir(repo())
        .output()
        .expect("git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    out.stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
        .filter(|p| repo().join(p).is_file())
        .collect()
}

fn rust_sources() -> Vec<(PathBuf, String)> {
    files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| {
            let text = fs::read_to_string(repo().join(&p)).expect("read source");
            (p, text)
        })
        .collect()
}

/// The comment parts (from `//` on) of a source file's lines.
fn comments(source: &str) -> String {
    source
        .lines()
        .filter_map(|l| l.find("//").and_then(|at| l.get(at..)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The words of `text` (split at whitespace, brackets, quotes and
/// punctuation, trailing dots dropped), each with whether it follows a `<`
/// (an `#include <...>` name or a placeholder).
fn words(text: &str) -> Vec<(&str, bool)> {
    let is_separator = |c: char| c.is_whitespace() || "()[]`'\",;:<>|=".contains(c);
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        if !is_separator(c) {
            continue;
        }
        let word = text.get(start..i).unwrap_or_default().trim_end_matches('.');
        let after_angle = start > 0 && text.get(start - 1..start) == Some("<");
        start = i + c.len_utf8();
        if !word.is_empty() {
            out.push((word, after_angle));
        }
    }
    out
}

/// Markdown file names cited in the comments of a file.
fn cited_docs(text: &str) -> Vec<String> {
    words(&comments(text))
        .into_iter()
        .map(|(word, _)| word)
        .filter(|word| {
            word.ends_with(".md")
                && word.len() > 3
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn every_cited_document_exists() {
    let mut missing = Vec::new();
    for (path, text) in rust_sources() {
        let dir = path.parent().unwrap_or(Path::new(""));
        for doc in cited_docs(&text) {
            let found = repo().join(&doc).is_file()
                || repo().join(dir).join(&doc).is_file()
                // "its README.md" of a directory the comment names
                || (doc == "README.md" && text.contains("tests/fixtures/"));
            if !found {
                missing.push(format!("{}: {doc}", path.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documents cited but not in the repository:\n{}",
        missing.join("\n")
    );
}

/// File extensions of the repository files that docs and comments cite.
const CITED_EXTENSIONS: [&str; 14] = [
    ".rs", ".md", ".sh", ".py", ".toml", ".h", ".hip", ".yml", ".yaml", ".map", ".cmake", ".in",
    ".c", ".txt",
];

/// Repository paths (with a `/`, ending in a cited extension) in `text`.
/// Not paths of this repository, so skipped: absolute and home paths, URLs,
/// patterns and placeholders (`*`, `{}`, `$`, `@`, `%`, `<...>`), and
/// `#include <...>` names.
fn cited_paths(text: &str) -> Vec<String> {
    words(text)
        .into_iter()
        .filter(|&(word, after_angle)| {
            word.contains('/')
                && !after_angle
                && CITED_EXTENSIONS.iter().any(|e| word.ends_with(e))
                && !word.starts_with(['/', '~', '$', '-'])
                && !word.starts_with("http")
                && !word.contains(['*', '{', '}', '$', '@', '%'])
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._/+-".contains(c))
        })
        .map(|(word, _)| word.to_string())
        .collect()
}

/// Every path cited in `docs/`, the README and source comments names a file
/// of the repository: from the root, the citing file's directory or its
/// crate's root (a crate citing its own `src` files).
#[test]
fn every_cited_path_exists() {
    let root = repo();
    let mut missing = Vec::new();
    for path in files() {
        let name = path.to_string_lossy().into_owned();
        let is_doc = name == "README.md" || (name.starts_with("docs/") && name.ends_with(".md"));
        let text = if is_doc {
            fs::read_to_string(root.join(&path)).expect("read doc")
        } else if name.ends_with(".rs") {
            comments(&fs::read_to_string(root.join(&path)).expect("read source"))
        } else {
            continue;
        };
        let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
        let mut bases = vec![PathBuf::new(), dir.clone()];
        if let Some(krate) = dir
            .ancestors()
            .find(|a| root.join(a).join("Cargo.toml").is_file())
        {
            bases.push(krate.to_path_buf());
        }
        let mut cited = cited_paths(&text);
        cited.sort();
        cited.dedup();
        for cite in cited {
            if !bases.iter().any(|b| root.join(b).join(&cite).exists()) {
                missing.push(format!("{name}: {cite}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths cited but not in the repository:\n{}",
        missing.join("\n")
    );
}

#[test]
fn nothing_reads_outside_the_repository() {
    let shared = ["..", "shared"].join("/");
    let offenders: Vec<String> = files()
        .into_iter()
        .filter(|p| p != Path::new(file!()) && !p.starts_with("tests/tests/suite/repo_layout.rs"))
        .filter_map(|p| {
            let text = fs::read_to_string(repo().join(&p)).ok()?;
            text.contains(&shared).then(|| p.display().to_string())
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "files referring to {shared}: {offenders:?}"
    );
}

/// Directories of the crates that ship (every workspace package without
/// `publish = false`), relative to the repository root.
fn shipped_crates() -> Vec<PathBuf> {
    files()
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "Cargo.toml"))
        .filter(|p| {
            let text = fs::read_to_string(repo().join(p)).expect("read Cargo.toml");
            text.contains("[package]") && !text.lines().any(|l| l.trim() == "publish = false")
        })
        .map(|p| p.parent().unwrap_or(Path::new("")).to_path_buf())
        .collect()
}

/// Files of the crate at `krate` that go into what it ships: not its
/// tests, benches or examples, nor the files of a crate nested in it.
fn shipped_files(krate: &Path, all: &[PathBuf]) -> Vec<PathBuf> {
    all.iter()
        .filter(|p| p.starts_with(krate))
        .filter(|p| {
            let rel = p.strip_prefix(krate).unwrap_or(p);
            let first = rel
                .components()
                .next()
                .map(|c| c.as_os_str().to_string_lossy());
            !matches!(first.as_deref(), Some("tests" | "benches" | "examples"))
                && !rel.ancestors().skip(1).any(|a| {
                    !a.as_os_str().is_empty()
                        && repo().join(krate).join(a).join("Cargo.toml").is_file()
                })
        })
        .cloned()
        .collect()
}

/// Source files that are unit-test modules: declared `#[cfg(test)] mod x;`
/// by a file of the same crate (`<x>.rs` or `<x>/mod.rs` beside it, or in its
/// directory when the declaring file is `foo.rs`).
fn test_modules(sources: &[(PathBuf, String)]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (path, text) in sources {
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let dir = match path.file_stem().and_then(|s| s.to_str()) {
            Some("lib" | "main" | "mod") => path.parent().unwrap_or(Path::new("")).to_path_buf(),
            _ => path.with_extension(""),
        };
        for pair in lines.windows(2) {
            let name = pair[1]
                .strip_prefix("mod ")
                .and_then(|r| r.strip_suffix(';'));
            if let (true, Some(name)) = (pair[0] == "#[cfg(test)]", name) {
                out.push(dir.join(format!("{name}.rs")));
                out.push(dir.join(name).join("mod.rs"));
            }
        }
    }
    out
}

/// The lines of a shipped file (`path` relative to the repository root)
/// that read something under a `tests/` directory: an `include_bytes!`,
/// `include_str!`, `include!` or `include_dir!` of such a path, a path
/// climbing into one (`../tests/`), the crate's directory joined with
/// `tests`, any mention in a build script, and, in a manifest, such a path
/// or a test crate outside the dev-dependencies and test targets.
/// Comments are not code; unit-test modules at the end of a file are not
/// shipped.
fn reads_under_tests(path: &str, text: &str) -> Vec<String> {
    let mut offenders = Vec::new();
    let mut flag =
        |n: usize, line: &str| offenders.push(format!("{path}:{}: {}", n + 1, line.trim()));
    if path.ends_with("Cargo.toml") {
        let mut section = String::new();
        for (n, line) in text.lines().enumerate() {
            let code = line.split('#').next().unwrap_or_default().trim();
            if code.starts_with('[') {
                section = code.to_string();
                continue;
            }
            let test_only = section.contains("dev-dependencies")
                || ["[[test]]", "[[bench]]", "[[example]]"].contains(&section.as_str());
            let test_crate =
                code.starts_with("rocm-kpack-test-support") || code.starts_with("rocm-kpack-tests");
            if !test_only && (code.contains("tests/") || code.contains("\"tests\"") || test_crate) {
                flag(n, line);
            }
        }
        return offenders;
    }
    let build_script = path.ends_with("build.rs");
    let body = text.split("#[cfg(test)]").next().unwrap_or_default();
    for (n, line) in body.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let mentions = code.contains("tests/") || code.contains("\"tests\"");
        let include = ["include_bytes!", "include_str!", "include!", "include_dir!"]
            .iter()
            .any(|m| code.contains(m));
        let climbs = code.contains("../tests");
        let joins = code.contains("CARGO_MANIFEST_DIR") && mentions;
        if (mentions && (include || build_script)) || climbs || joins {
            flag(n, line);
        }
    }
    offenders
}

#[test]
fn shipped_crates_read_nothing_under_tests() {
    // Test data is for tests: a shipped crate that embeds or opens a file
    // under tests/ ships test fixtures, and cannot be packaged on its own
    // (a crate cannot reach outside its directory). Product data lives in
    // the crate that ships it (the demo's machines and binaries in
    // splitter/demo/).
    let all = files();
    let mut offenders = Vec::new();
    for krate in shipped_crates() {
        let shipped = shipped_files(&krate, &all);
        let sources: Vec<(PathBuf, String)> = shipped
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
            .map(|p| {
                (
                    p.clone(),
                    fs::read_to_string(repo().join(p)).expect("read source"),
                )
            })
            .collect();
        let unit_tests = test_modules(&sources);
        for (path, text) in &sources {
            if !unit_tests.contains(path) {
                offenders.extend(reads_under_tests(&path.to_string_lossy(), text));
            }
        }
        let manifest = krate.join("Cargo.toml");
        let text = fs::read_to_string(repo().join(&manifest)).expect("read Cargo.toml");
        offenders.extend(reads_under_tests(&manifest.to_string_lossy(), &text));
    }
    assert!(
        offenders.is_empty(),
        "shipped code reading test files:\n{}",
        offenders.join("\n")
    );
}

/// Where the `include_*!` macros of a shipped source (`path` relative to
/// the repository root, in the crate at `krate`) read from, when that is
/// outside the crate: the string literals of each macro call are joined,
/// resolved against the crate (`CARGO_MANIFEST_DIR`) or the file's
/// directory, and `..` folded.
fn includes_outside_crate(krate: &Path, path: &Path, text: &str) -> Vec<String> {
    let body = text.split("#[cfg(test)]").next().unwrap_or_default();
    let lines: Vec<&str> = body.lines().collect();
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let Some(at) = [
            "include_bytes!(",
            "include_str!(",
            "include!(",
            "include_dir!(",
        ]
        .iter()
        .find_map(|m| code.find(m)) else {
            continue;
        };
        // The call, up to its closing parenthesis (macros spread over lines).
        let mut call = String::new();
        let mut depth = 0i32;
        'lines: for l in lines[n..].iter().take(8) {
            let l = l.split("//").next().unwrap_or_default();
            let l = if call.is_empty() { &l[at..] } else { l };
            for ch in l.chars() {
                call.push(ch);
                match ch {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            break 'lines;
                        }
                    }
                    _ => {}
                }
            }
        }
        let literal: String = call
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|s| *s != "CARGO_MANIFEST_DIR")
            .collect();
        let (base, rel) = match literal.strip_prefix("$CARGO_MANIFEST_DIR") {
            Some(rest) => (krate.to_path_buf(), rest.to_string()),
            None if call.contains("CARGO_MANIFEST_DIR") => (krate.to_path_buf(), literal),
            None => (
                path.parent().unwrap_or(Path::new("")).to_path_buf(),
                literal,
            ),
        };
        let mut resolved = base;
        for part in rel.split('/').filter(|p| !p.is_empty() && *p != ".") {
            if part == ".." {
                if !resolved.pop() {
                    resolved.push("..");
                }
            } else {
                resolved.push(part);
            }
        }
        if !resolved.starts_with(krate) {
            out.push(format!(
                "{}:{}: reads {}",
                path.display(),
                n + 1,
                resolved.display()
            ));
        }
    }
    out
}

#[test]
fn shipped_crates_embed_nothing_from_outside_their_directory() {
    // `cargo package` ships a crate's own directory: an include that climbs
    // out of it (a template beside the crates, a fixture) breaks the
    // packaged crate. What a crate embeds lives in it (the fetcher's hook
    // templates in splitter/publish/templates/).
    let all = files();
    let mut offenders = Vec::new();
    for krate in shipped_crates() {
        for p in shipped_files(&krate, &all)
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        {
            let text = fs::read_to_string(repo().join(p)).expect("read source");
            offenders.extend(includes_outside_crate(&krate, p, &text));
        }
    }
    assert!(
        offenders.is_empty(),
        "shipped code embedding files outside its crate:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_outside_crate_rule_catches_climbing_includes_and_spares_inner_ones() {
    let krate = Path::new("splitter/publish");
    let file = Path::new("splitter/publish/src/fetcher.rs");
    let climbing = "const T: &str = include_str!(concat!(\n    env!(\"CARGO_MANIFEST_DIR\"),\n    \"/../../repo-templates/fetch/\",\n    \"deb/postinst\"\n));";
    assert_eq!(includes_outside_crate(krate, file, climbing).len(), 1);
    let relative = "const A: &[u8] = include_bytes!(\"../../demo/binaries/app\");";
    assert_eq!(includes_outside_crate(krate, file, relative).len(), 1);
    let inner = "const T: &str = include_str!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/templates/deb/postinst\"));";
    assert!(includes_outside_crate(krate, file, inner).is_empty());
    let sibling = "const A: &[u8] = include_bytes!(\"../templates/x\");";
    assert!(includes_outside_crate(krate, file, sibling).is_empty());
    let dir = "static D: Dir = include_dir!(\"$CARGO_MANIFEST_DIR/machines/mi210\");";
    assert!(includes_outside_crate(krate, file, dir).is_empty());
}

#[test]
fn the_tests_rule_catches_planted_reads() {
    // Each of these, planted in a shipped file, must be caught.
    let planted = [
        (
            "splitter/src/x.rs",
            "const A: &[u8] = include_bytes!(\"../../tests/fixtures/clang19/app_pie\");",
        ),
        (
            "splitter/src/x.rs",
            "const A: &str = include_str!(\"../tests/data.txt\");",
        ),
        (
            "splitter/src/x.rs",
            "static D: Dir = include_dir!(\"$CARGO_MANIFEST_DIR/tests/fixtures/sysfs\");",
        ),
        (
            "splitter/src/x.rs",
            "let p = Path::new(env!(\"CARGO_MANIFEST_DIR\")).join(\"tests/fixtures\");",
        ),
        (
            "splitter/src/x.rs",
            "let p = root.join(\"../tests/fixtures/specs\");",
        ),
        (
            "runtime/capi/build.rs",
            "println!(\"cargo:rerun-if-changed=tests/exports.map\");",
        ),
        (
            "splitter/Cargo.toml",
            "[package]\nbuild = \"../tests/build.rs\"",
        ),
        (
            "splitter/Cargo.toml",
            "[dependencies]\nrocm-kpack-test-support.workspace = true",
        ),
        (
            "splitter/Cargo.toml",
            "[package]\ninclude = [\"src/**\", \"tests/fixtures/**\"]",
        ),
    ];
    for (path, text) in planted {
        assert_eq!(
            reads_under_tests(path, text).len(),
            1,
            "not caught in {path}: {text}"
        );
    }
    // Mentions that read nothing, and test-only code, pass.
    let fine = [
        (
            "splitter/demo/src/lib.rs",
            "outln!(\"run tests/scripts/fetch-debian-testdata.sh to include it\")?;",
        ),
        (
            "splitter/src/x.rs",
            "/// Built like tests/fixtures/build.sh builds it.",
        ),
        (
            "splitter/src/x.rs",
            "fn f() {}\n#[cfg(test)]\nmod t { const A: &str = include_str!(\"../tests/a\"); }",
        ),
        (
            "splitter/Cargo.toml",
            "[dev-dependencies]\nrocm-kpack-test-support.workspace = true",
        ),
    ];
    for (path, text) in fine {
        assert_eq!(
            reads_under_tests(path, text),
            Vec::<String>::new(),
            "{path}: {text}"
        );
    }
}

#[test]
fn file_names_are_built_only_by_the_layout_module() {
    // A `format!` whose template spells an archive, manifest, pattern or
    // store path outside `layout.rs`, in library, binary or example code
    // (tests and their support crate may spell literal names: they check
    // what the library builds).
    let needles = [
        ".kpack\"",
        ".kpm\"",
        "@GFXARCH@",
        "by-hash/sha256",
        ".sources.toml",
    ];
    let mut offenders = Vec::new();
    for (path, text) in rust_sources() {
        let p = path.to_string_lossy();
        let product = (p.contains("/src/") || p.contains("/examples/")) && !p.starts_with("tests/");
        if p.ends_with("format/src/layout.rs") || !product {
            continue;
        }
        // Unit-test modules sit at the end of a file.
        let body = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in body.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if code.contains("format!(") && needles.iter().any(|x| code.contains(x)) {
                offenders.push(format!("{p}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "names built outside layout.rs:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn one_crate_builds_the_c_library() {
    let mut cdylibs = Vec::new();
    for path in files()
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "Cargo.toml"))
    {
        let text = fs::read_to_string(repo().join(&path)).expect("read Cargo.toml");
        let crate_type = text
            .lines()
            .find(|l| l.trim_start().starts_with("crate-type"));
        if let Some(line) = crate_type.filter(|l| l.contains("cdylib")) {
            cdylibs.push((path.display().to_string(), line.trim().to_string()));
        }
    }
    // The C library, and the LD_PRELOAD shim that is a shared object by
    // nature; neither is also an rlib others link.
    let names: Vec<&str> = cdylibs.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        names,
        ["runtime/capi/Cargo.toml", "runtime/preload/Cargo.toml"],
        "{cdylibs:?}"
    );
    assert!(
        cdylibs.iter().all(|(_, l)| !l.contains("rlib")),
        "{cdylibs:?}"
    );
    let capi = fs::read_to_string(repo().join("runtime/capi/Cargo.toml")).expect("capi manifest");
    assert!(
        capi.contains("staticlib"),
        "the C ABI crate builds librocm_kpack.a too"
    );
}

#[test]
fn the_splitter_does_not_link_the_fetcher() {
    // The library and the `rocm-kpack` binary package over it.
    for package in ["rocm-kpack-splitter", "rocm-kpack"] {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args([
                "tree",
                "--offline",
                "-p",
                package,
                "-e",
                "normal",
                "--prefix",
                "none",
            ])
            .current_dir(repo())
            .output()
            .expect("cargo tree");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tree = String::from_utf8_lossy(&out.stdout);
        for banned in [
            "rocm-kpack-fetcher ",
            "rocm-kpack-fetch ",
            "tokio ",
            "reqwest ",
            "rustls ",
        ] {
            assert!(
                !tree.lines().any(|l| l.starts_with(banned)),
                "{package} depends on {banned}:\n{tree}"
            );
        }
        assert!(
            tree.lines().any(|l| l.starts_with("rocm-kpack-format ")),
            "{tree}"
        );
    }
}

/// The workspace's crates from `cargo metadata`: name, directory relative
/// to the repository root, and the workspace crates each depends on
/// (normal dependencies, any target; dev and build dependencies are not
/// edges of the architecture).
fn workspace_crates() -> Vec<(String, String, Vec<String>)> {
    let meta = workspace_metadata();
    let packages = meta["packages"].as_array().expect("packages");
    let names: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let root = repo();
    packages
        .iter()
        .map(|p| {
            let name = p["name"].as_str().expect("name").to_string();
            let manifest = Path::new(p["manifest_path"].as_str().expect("manifest_path"));
            let dir = manifest
                .parent()
                .and_then(|d| d.strip_prefix(&root).ok())
                .expect("a crate inside the repository")
                .to_string_lossy()
                .into_owned();
            let mut deps = normal_dependencies(p);
            deps.retain(|d| names.contains(&d.as_str()));
            (name, if dir.is_empty() { ".".into() } else { dir }, deps)
        })
        .collect()
}

/// `cargo metadata --no-deps` of the workspace.
fn workspace_metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--offline",
            "--no-deps",
            "--format-version",
            "1",
        ])
        .current_dir(repo())
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("metadata json")
}

/// The normal dependencies (any target; not dev or build) of a package of
/// `cargo metadata`, sorted, each once.
fn normal_dependencies(package: &serde_json::Value) -> Vec<String> {
    let mut deps: Vec<String> = package["dependencies"]
        .as_array()
        .expect("dependencies")
        .iter()
        .filter(|d| d["kind"].is_null())
        .filter_map(|d| d["name"].as_str())
        .map(str::to_string)
        .collect();
    deps.sort();
    deps.dedup();
    deps
}

/// The crates that hold only command-line code: the conventions crate
/// both tools share and the two binary packages. Only they may use the
/// command-line crates ([`CLI_ONLY`]).
const CLI_CRATES: [&str; 3] = ["rocm-kpack-cli", "rocm-kpack", "rocm-kpack-fetch"];

/// Argument parsing, error reporting for humans, progress bars: what a
/// library leaves to the binary that calls it.
const CLI_ONLY: [&str; 3] = ["clap", "anyhow", "indicatif"];

/// Library crates (a package with a `lib` target of any kind) of `meta`
/// outside [`CLI_CRATES`] with a normal dependency on a crate of
/// [`CLI_ONLY`]; and CLI crates other than `rocm-kpack-cli` that have a
/// library (the tools are binary packages).
fn cli_only_mismatches(meta: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in meta["packages"].as_array().expect("packages") {
        let name = p["name"].as_str().expect("name");
        let has_lib = p["targets"].as_array().expect("targets").iter().any(|t| {
            t["kind"].as_array().is_some_and(|kinds| {
                kinds.iter().filter_map(|k| k.as_str()).any(|k| {
                    matches!(
                        k,
                        "lib" | "rlib" | "dylib" | "cdylib" | "staticlib" | "proc-macro"
                    )
                })
            })
        });
        if CLI_CRATES.contains(&name) {
            if has_lib && name != "rocm-kpack-cli" {
                out.push(format!("{name} is a binary package, yet it has a library"));
            }
            continue;
        }
        if !has_lib {
            continue;
        }
        for dep in normal_dependencies(p) {
            if CLI_ONLY.contains(&dep.as_str()) {
                out.push(format!(
                    "library crate {name} depends on {dep}, which only {} may use",
                    CLI_CRATES.join(", ")
                ));
            }
        }
    }
    out
}

#[test]
fn libraries_carry_no_clap_anyhow_or_indicatif() {
    let mismatches = cli_only_mismatches(&workspace_metadata());
    assert!(
        mismatches.is_empty(),
        "`cargo metadata`: the tools are binary crates, libraries return typed errors and report progress through a trait:\n{}",
        mismatches.join("\n")
    );
}

#[test]
fn the_cli_only_check_catches_a_library_with_clap_and_a_tool_with_a_library() {
    let package = |name: &str, kind: &str, deps: &[(&str, Option<&str>)]| {
        serde_json::json!({
            "name": name,
            "targets": [{ "kind": [kind] }],
            "dependencies": deps
                .iter()
                .map(|(d, k)| serde_json::json!({ "name": d, "kind": k }))
                .collect::<Vec<_>>(),
        })
    };
    let meta = |packages: Vec<serde_json::Value>| serde_json::json!({ "packages": packages });
    let good = meta(vec![
        package("rocm-kpack-cli", "lib", &[("clap", None), ("anyhow", None)]),
        package("rocm-kpack", "bin", &[("clap", None), ("indicatif", None)]),
        package("rocm-kpack-fetch", "bin", &[("anyhow", None)]),
        package("rocm-kpack-tests", "lib", &[("anyhow", Some("dev"))]),
        package("rocm-kpack-capi", "cdylib", &[("libc", None)]),
    ]);
    assert_eq!(cli_only_mismatches(&good), Vec::<String>::new());
    let bad = [
        (
            package("rocm-kpack-fetcher", "lib", &[("anyhow", None)]),
            "library crate rocm-kpack-fetcher depends on anyhow",
        ),
        (
            package("rocm-kpack-demo", "lib", &[("clap", None)]),
            "library crate rocm-kpack-demo depends on clap",
        ),
        (
            package("rocm-kpack-capi", "staticlib", &[("indicatif", None)]),
            "library crate rocm-kpack-capi depends on indicatif",
        ),
        (
            package("rocm-kpack-fetch", "lib", &[]),
            "rocm-kpack-fetch is a binary package, yet it has a library",
        ),
    ];
    for (p, expected) in bad {
        let found = cli_only_mismatches(&meta(vec![p]));
        assert!(
            found.iter().any(|m| m.contains(expected)),
            "expected {expected:?} in {found:?}"
        );
    }
}

/// The lines of `doc` under the heading `## {title}`, up to the next `## `.
fn section<'a>(doc: &'a str, title: &str) -> Vec<&'a str> {
    let heading = format!("## {title}");
    doc.lines()
        .skip_while(|l| l.trim_end() != heading)
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .collect()
}

/// The crates of the table `| crate | path | one line |` under "## Crates"
/// (columns found by their header; cells may be in backticks): (crate, path).
fn doc_crates(doc: &str) -> Result<Vec<(String, String)>, String> {
    let rows: Vec<Vec<String>> = section(doc, "Crates")
        .into_iter()
        .filter(|l| l.trim_start().starts_with('|'))
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().trim_matches('`').trim().to_string())
                .collect()
        })
        .collect();
    let header = rows.first().ok_or("no table under \"## Crates\"")?;
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h.eq_ignore_ascii_case(name))
            .ok_or(format!("the crates table has no column \"{name}\""))
    };
    let (krate, path) = (column("crate")?, column("path")?);
    Ok(rows
        .iter()
        .skip(1)
        .filter(|r| !r.iter().all(|c| c.chars().all(|ch| "-: ".contains(ch))))
        .filter_map(|r| {
            Some((
                r.get(krate)?.clone(),
                r.get(path)?.trim_end_matches('/').to_string(),
            ))
        })
        .collect())
}

/// The rules "- `A` may depend on: `B`, `C`" (or "nothing") under
/// "## Dependency rules": crate -> the crates it may depend on.
fn doc_rules(doc: &str) -> Result<std::collections::BTreeMap<String, Vec<String>>, String> {
    let mut rules = std::collections::BTreeMap::new();
    for line in section(doc, "Dependency rules") {
        let Some(rule) = line.strip_prefix("- `") else {
            continue;
        };
        let Some((krate, allowed)) = rule.split_once("` may depend on:") else {
            continue;
        };
        let allowed: Vec<String> = allowed
            .split(',')
            .map(|a| a.trim().trim_end_matches('.').trim())
            .filter(|a| a.starts_with('`'))
            .map(|a| a.trim_matches('`').to_string())
            .collect();
        if rules.insert(krate.to_string(), allowed).is_some() {
            return Err(format!("two rules for `{krate}`"));
        }
    }
    if rules.is_empty() {
        return Err("no rules \"- `A` may depend on: `B`\" under \"## Dependency rules\"".into());
    }
    Ok(rules)
}

/// What the doc says against what the workspace is: crates missing from
/// the doc, crates of the doc that do not exist (or sit elsewhere), crates
/// without a rule, and dependency edges no rule allows.
fn architecture_mismatches(doc: &str, crates: &[(String, String, Vec<String>)]) -> Vec<String> {
    let (listed, rules) = match (doc_crates(doc), doc_rules(doc)) {
        (Ok(l), Ok(r)) => (l, r),
        (l, r) => return l.err().into_iter().chain(r.err()).collect(),
    };
    let mut out = Vec::new();
    for (name, dir, deps) in crates {
        match listed.iter().find(|(n, _)| n == name) {
            None => out.push(format!(
                "crate {name} ({dir}) is not in the table under \"## Crates\""
            )),
            Some((_, path)) if path != dir => {
                out.push(format!("crate {name} is at {dir}, the doc says {path}"))
            }
            Some(_) => {}
        }
        let Some(allowed) = rules.get(name) else {
            out.push(format!(
                "crate {name} has no rule under \"## Dependency rules\""
            ));
            continue;
        };
        for dep in deps.iter().filter(|d| !allowed.contains(d)) {
            out.push(format!(
                "{name} depends on {dep}, which its rule does not allow"
            ));
        }
    }
    let exists = |n: &String| crates.iter().any(|(c, _, _)| c == n);
    for (name, _) in listed.iter().filter(|(n, _)| !exists(n)) {
        out.push(format!(
            "the doc lists crate {name}, which is not in the workspace"
        ));
    }
    for (name, allowed) in &rules {
        for n in std::iter::once(name).chain(allowed).filter(|n| !exists(n)) {
            out.push(format!(
                "the rule of {name} names crate {n}, which is not in the workspace"
            ));
        }
    }
    out
}

#[test]
fn the_architecture_doc_lists_every_crate_and_its_allowed_dependencies() {
    let doc = fs::read_to_string(repo().join("docs/architecture.md")).expect("architecture.md");
    let mismatches = architecture_mismatches(&doc, &workspace_crates());
    assert!(
        mismatches.is_empty(),
        "docs/architecture.md against `cargo metadata`:\n{}",
        mismatches.join("\n")
    );
}

#[test]
fn the_architecture_check_catches_each_kind_of_mismatch() {
    let crates = vec![
        ("a".to_string(), "x/a".to_string(), vec![]),
        ("b".to_string(), "b".to_string(), vec!["a".to_string()]),
    ];
    let doc = |table: &str, rules: &str| {
        format!("# T\n\n## Crates\n\n| crate | path | one line |\n|---|---|---|\n{table}\n## Dependency rules\n\n{rules}\n## Other\n")
    };
    let good_table = "| `a` | `x/a` | one |\n| `b` | `b/` | two |\n";
    let good_rules = "- `a` may depend on: nothing\n- `b` may depend on: `a`.\n";
    assert_eq!(
        architecture_mismatches(&doc(good_table, good_rules), &crates),
        Vec::<String>::new()
    );
    let bad = [
        // a crate missing from the doc
        (
            doc("| `a` | `x/a` | one |\n", good_rules),
            "crate b (b) is not in the table",
        ),
        // a doc crate that does not exist
        (
            doc(&format!("{good_table}| `c` | `c` | three |\n"), good_rules),
            "the doc lists crate c",
        ),
        // a crate elsewhere than the doc says
        (
            doc("| `a` | `a` | one |\n| `b` | `b` | two |\n", good_rules),
            "crate a is at x/a",
        ),
        // an edge no rule allows
        (
            doc(
                good_table,
                "- `a` may depend on: nothing\n- `b` may depend on: nothing\n",
            ),
            "b depends on a",
        ),
        // a crate without a rule
        (
            doc(good_table, "- `b` may depend on: `a`\n"),
            "crate a has no rule",
        ),
        // a rule naming a crate that does not exist
        (
            doc(
                good_table,
                &format!("{good_rules}- `a` may depend on: `z`\n"),
            ),
            "two rules for `a`",
        ),
        (
            doc(
                good_table,
                "- `a` may depend on: `z`\n- `b` may depend on: `a`\n",
            ),
            "names crate z",
        ),
        // no table, no rules
        ("# T\n".to_string(), "no table under"),
    ];
    for (text, expected) in bad {
        let found = architecture_mismatches(&text, &crates);
        assert!(
            found.iter().any(|m| m.contains(expected)),
            "expected {expected:?} in {found:?} for:\n{text}"
        );
    }
}

/// The integration-test targets of each package of `meta` beyond one
/// (cargo's own `tests/testsuite` layout: one binary links once); the
/// end-to-end crate's `split_memory` measures its whole process with its
/// own allocator, so it is a binary of its own.
fn extra_test_binaries(meta: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in meta["packages"].as_array().expect("packages") {
        let name = p["name"].as_str().expect("name");
        let tests: Vec<&str> = p["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .filter(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "test"))
            })
            .filter_map(|t| t["name"].as_str())
            .filter(|t| !(name == "rocm-kpack-tests" && *t == "split_memory"))
            .collect();
        if tests.len() > 1 {
            out.push(format!("{name}: {}", tests.join(", ")));
        }
    }
    out
}

#[test]
fn each_crate_has_one_integration_test_binary_at_most() {
    let extra = extra_test_binaries(&workspace_metadata());
    assert!(
        extra.is_empty(),
        "more than one integration-test binary (make them modules of one tests/<name>/main.rs):\n{}",
        extra.join("\n")
    );
    let two = serde_json::json!({ "packages": [{
        "name": "x",
        "targets": [{ "name": "a", "kind": ["test"] }, { "name": "b", "kind": ["test"] }, { "name": "x", "kind": ["lib"] }],
    }]});
    assert_eq!(extra_test_binaries(&two), vec!["x: a, b".to_string()]);
}

/// `#[path = "..."]` attributes of `text` (a file at `path`, relative to
/// the repository) that name a file outside the crate directory `krate`.
fn paths_into_other_crates(
    path: &Path,
    text: &str,
    krate: &Path,
    crates: &[PathBuf],
) -> Vec<String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("#[path = \"") else {
            continue;
        };
        let Some(target) = rest.split('"').next() else {
            continue;
        };
        let mut resolved = path.parent().unwrap_or(Path::new("")).to_path_buf();
        for part in Path::new(target).components() {
            match part {
                std::path::Component::ParentDir => {
                    resolved.pop();
                }
                std::path::Component::Normal(p) => resolved.push(p),
                _ => {}
            }
        }
        // The crate that owns the target: the deepest crate directory above it.
        let owner = crates
            .iter()
            .filter(|c| c.as_os_str() == "." || resolved.starts_with(c))
            .max_by_key(|c| c.components().count());
        if owner.map(PathBuf::as_path) != Some(krate) {
            out.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
        }
    }
    out
}

/// What crates share in their tests is a crate (runtime/testkit,
/// tests/support), not a file compiled into each by `#[path]`.
#[test]
fn no_crate_compiles_another_crates_file_by_path() {
    let crates: Vec<PathBuf> = workspace_crates()
        .into_iter()
        .map(|(_, dir, _)| PathBuf::from(dir))
        .collect();
    let owner = |p: &Path| -> PathBuf {
        crates
            .iter()
            .filter(|c| c.as_os_str() == "." || p.starts_with(c))
            .max_by_key(|c| c.components().count())
            .cloned()
            .unwrap_or_default()
    };
    let mut found = Vec::new();
    for (path, text) in rust_sources() {
        found.extend(paths_into_other_crates(
            &path,
            &text,
            &owner(&path),
            &crates,
        ));
    }
    assert!(
        found.is_empty(),
        "#[path] into another crate:\n{}",
        found.join("\n")
    );
    let planted = paths_into_other_crates(
        Path::new("runtime/loader/tests/x.rs"),
        "#[path = \"../../capi/tests/support.rs\"]\nmod s;\n#[path = \"inner/m.rs\"]\nmod m;\n",
        Path::new("runtime/loader"),
        &[
            PathBuf::from("runtime/loader"),
            PathBuf::from("runtime/capi"),
        ],
    );
    assert_eq!(planted.len(), 1, "{planted:?}");
}

/// The longest a product function of the splitter may be, in lines (its
/// signature to its closing brace). The splitter's long functions were
/// broken into named phases (docs/architecture.md, "Splitter engine"); the
/// longest left are `split::plan::plan`, `recombine::regroup` and
/// `elf::phdr::repair`. Lower it as those are broken up too.
const MAX_FUNCTION_LINES: usize = 240;

/// (file, function, lines) of every function in `source` longer than
/// `max`, unit tests (`#[cfg(test)]` and after) left out. A function is
/// counted from its `fn` line to the first line after it that closes at
/// the same indentation.
fn long_functions(path: &str, source: &str, max: usize) -> Vec<(String, String, usize)> {
    let lines: Vec<&str> = source
        .lines()
        .take_while(|l| l.trim() != "#[cfg(test)]")
        .collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let rest = ["pub(crate) ", "pub(super) ", "pub ", ""]
            .iter()
            .find_map(|p| trimmed.strip_prefix(p))
            .unwrap_or(trimmed);
        let Some(name) = rest.strip_prefix("fn ") else {
            continue;
        };
        if line.trim_end().ends_with(';') {
            continue;
        }
        let name: String = name
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let close = format!("{indent}}}");
        if let Some(end) = lines.iter().skip(i + 1).position(|l| l.starts_with(&close)) {
            let len = end + 2;
            if len > max {
                out.push((path.to_string(), name, len));
            }
        }
    }
    out
}

#[test]
fn no_splitter_function_is_longer_than_the_limit() {
    let mut long = Vec::new();
    for (path, text) in rust_sources() {
        let rel = path.to_string_lossy().into_owned();
        if rel.starts_with("splitter/src/") {
            long.extend(long_functions(&rel, &text, MAX_FUNCTION_LINES));
        }
    }
    assert!(
        long.is_empty(),
        "functions longer than {MAX_FUNCTION_LINES} lines (break them into named phases):\n{}",
        long.iter()
            .map(|(p, f, n)| format!("  {p}: {f} ({n} lines)"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_function_length_check_counts_to_the_closing_brace() {
    let src = "fn short() {\n    x();\n}\n\nimpl A {\n    pub fn long() {\n        a();\n        b();\n        c();\n    }\n}\n\n#[cfg(test)]\nmod tests {\n    fn long_test() {\n        a();\n        b();\n        c();\n    }\n}\n";
    assert_eq!(
        long_functions("x.rs", src, 4),
        [("x.rs".to_string(), "long".to_string(), 5)]
    );
}

/// Module paths the splitter engine must not import: everything that sits
/// above it (docs/architecture.md, "Splitter engine").
const ABOVE_THE_ENGINE: [&str; 5] = [
    "split::tree",
    "split::artifact",
    "split::batch",
    "split::recombine",
    "split::request",
];

#[test]
fn the_splitter_engine_imports_nothing_that_sits_above_it() {
    let mut found = Vec::new();
    for (path, text) in rust_sources() {
        let rel = path.to_string_lossy().into_owned();
        if !rel.starts_with("splitter/src/split/engine") {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for m in ABOVE_THE_ENGINE.iter().filter(|m| code.contains(*m)) {
                found.push(format!("{rel}:{}: {m}", n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "split/engine uses a module that sits above it:\n{}",
        found.join("\n")
    );
}
