//! Every `--json` document of `rocm-kpack` against docs/cli-json.md: each
//! documented document is produced by running its command on the fixtures,
//! and every field it prints must be listed there with its type, every
//! listed field (not marked optional) must be printed, and `schema` comes
//! first. A new field, or a document with no table, fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rocm_kpack_test_support::bins;
use serde_json::Value;

/// One row of a table: a field path, its types, whether it may be absent,
/// and whether it stands for everything below it (`a.*`).
#[derive(Debug)]
struct Row {
    path: String,
    types: BTreeSet<String>,
    optional: bool,
    wildcard: bool,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

/// The tables of docs/cli-json.md, by the name of their
/// `<!-- json: NAME -->` marker.
fn documented() -> BTreeMap<String, Vec<Row>> {
    let text = std::fs::read_to_string(repo_root().join("docs/cli-json.md")).expect("cli-json.md");
    let mut docs: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(name) = line
            .strip_prefix("<!-- json: ")
            .and_then(|r| r.strip_suffix(" -->"))
        {
            assert!(
                docs.insert(name.to_owned(), Vec::new()).is_none(),
                "two tables named {name}"
            );
            current = Some(name.to_owned());
            continue;
        }
        let Some(name) = &current else { continue };
        if !line.starts_with('|') {
            if !line.trim().is_empty() {
                current = None;
            }
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(field), Some(ty)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Some(path) = field.strip_prefix('`').and_then(|f| f.strip_suffix('`')) else {
            continue; // the header and its rule
        };
        let optional = ty.contains("(optional)");
        let types: BTreeSet<String> = ty
            .replace("(optional)", "")
            .split(" or ")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        let (path, wildcard) = match path.strip_suffix(".*") {
            Some(p) => (p.to_owned(), true),
            None => (path.to_owned(), false),
        };
        if !wildcard {
            for t in &types {
                assert!(
                    ["string", "integer", "number", "boolean", "array", "object", "null"]
                        .contains(&t.as_str()),
                    "{name}: {path}: unknown type {t:?}"
                );
            }
        }
        docs.entry(name.clone()).or_default().push(Row {
            path,
            types,
            optional,
            wildcard,
        });
    }
    docs
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Every path of `v` (`a`, `a[]`, `a[].b`) with the types seen there.
fn flatten(v: &Value, path: &str, out: &mut BTreeMap<String, BTreeSet<&'static str>>) {
    if !path.is_empty() {
        out.entry(path.to_owned()).or_default().insert(type_of(v));
    }
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                flatten(x, &p, out);
            }
        }
        Value::Array(items) => {
            for x in items {
                flatten(x, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

/// The path a field hangs from: `a[].b` -> `a[]`, `a[]` -> `a`, `a` -> ``.
fn parent(path: &str) -> &str {
    if let Some(list) = path.strip_suffix("[]") {
        return list;
    }
    path.rfind('.').map_or("", |i| &path[..i])
}

/// Checks one document (`text`, as printed) against its table.
fn check(name: &str, text: &str, rows: &[Row]) {
    assert!(
        text.trim_start().starts_with("{\n  \"schema\": "),
        "{name}: `schema` is not the first key:\n{text}"
    );
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
    assert_eq!(v["schema"], 1, "{name}");
    let mut seen = BTreeMap::new();
    flatten(&v, "", &mut seen);
    for (path, types) in &seen {
        let covered = rows
            .iter()
            .any(|r| r.wildcard && path.starts_with(&format!("{}.", r.path)));
        if covered {
            continue;
        }
        let row = rows
            .iter()
            .find(|r| !r.wildcard && r.path == *path)
            .unwrap_or_else(|| panic!("{name}: `{path}` is not in docs/cli-json.md"));
        for t in types {
            let ok = row.types.contains(*t) || (*t == "integer" && row.types.contains("number"));
            assert!(
                ok,
                "{name}: `{path}` is {t}, docs/cli-json.md says {:?}",
                row.types
            );
        }
    }
    // A documented field is printed wherever its parent is an object.
    for r in rows.iter().filter(|r| !r.wildcard && !r.optional) {
        if r.path.ends_with("[]") {
            continue; // an empty list has no elements to see
        }
        let p = parent(&r.path);
        let in_an_object = p.is_empty() || seen.get(p).is_some_and(|t| t.contains("object"));
        assert!(
            !in_an_object || seen.contains_key(&r.path),
            "{name}: `{}` is documented but missing",
            r.path
        );
    }
}

/// Runs `rocm-kpack ARGS` in `dir` and returns its stdout; `code` is the
/// exit code expected.
fn json_of(dir: &Path, args: &[&str], code: i32) -> String {
    program_json_of("rocm-kpack", dir, args, code)
}

/// [`json_of`] for `program`; `rocm-kpack-fetch` isolated from this
/// machine's environment (`bins::isolate_fetcher`).
fn program_json_of(program: &str, dir: &Path, args: &[&str], code: i32) -> String {
    let mut cmd = bins::command(program);
    cmd.args(args)
        .current_dir(dir)
        .env_remove("SOURCE_DATE_EPOCH");
    if program == "rocm-kpack-fetch" {
        // pip reads no configuration of this machine's (an index of its own).
        bins::isolate_fetcher(&mut cmd).env("PIP_CONFIG_FILE", "/dev/null");
    }
    let out = cmd.output().expect("run the program");
    assert_eq!(
        out.status.code(),
        Some(code),
        "{program} {args:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 JSON")
}

#[test]
fn every_json_document_is_as_docs_cli_json_md_lists_it() {
    let docs = documented();
    let work = tempfile::tempdir().expect("tempdir");
    let w = work.path();
    // The fat deb is fatpkg/kfat_1.0_amd64.deb, below.
    rocm_kpack_test_support::packages::cli_inputs(w, "libmulti.so");
    let mut produced: BTreeMap<&str, String> = BTreeMap::new();
    let mut run = |name: &'static str, args: &[&str], code: i32| {
        produced.insert(name, json_of(w, args, code));
    };
    run("split", &["split", "tree", "--out", "split", "--json"], 0);
    run(
        "split-dry-run",
        &["split", "tree", "--out", "x", "--dry-run", "--json"],
        0,
    );
    run(
        "split-binary",
        &[
            "split-binary",
            "tree/lib/libmulti.so",
            "--out",
            "one",
            "--json",
        ],
        0,
    );
    run(
        "recombine",
        &["recombine", "split", "--out", "rec", "--json"],
        0,
    );
    // generic/ alone: every marker misses its archives, exit 4.
    run(
        "verify",
        &["verify", "split/generic", "--target", "gfx1100", "--json"],
        4,
    );
    run("repair-phdr", &["repair-phdr", "split", "--json"], 0);
    run("spec-show", &["spec", "show", "--json"], 0);
    run(
        "package",
        &[
            "package",
            "split",
            "--out",
            "pkgs",
            "--name",
            "libmulti1",
            "--version",
            "1.0",
            "--format",
            "deb,rpm,wheel",
            "--json",
        ],
        0,
    );
    run(
        "publish",
        &["publish", "pkgs", "--out", "repo", "--no-fetcher", "--json"],
        0,
    );
    run(
        "publish-dry-run",
        &[
            "publish",
            "pkgs",
            "--out",
            "repo2",
            "--no-fetcher",
            "--dry-run",
            "--json",
        ],
        0,
    );
    let fat_deb = "fatpkg/kfat_1.0_amd64.deb";
    run(
        "split-package",
        &[
            "split-package",
            fat_deb,
            "--out",
            "sp",
            "--level",
            "1",
            "--json",
        ],
        0,
    );
    run(
        "split-package-dry-run",
        &[
            "split-package",
            fat_deb,
            "--out",
            "sp2",
            "--dry-run",
            "--json",
        ],
        0,
    );
    run(
        "inspect-archive",
        &[
            "inspect",
            "--json",
            "split/gfx1100/.kpack/libmulti_gfx1100.kpack",
        ],
        0,
    );
    run(
        "inspect-manifest",
        &["inspect", "--json", "split/generic/.kpack/libmulti.kpm"],
        0,
    );
    run(
        "inspect-elf",
        &["inspect", "--json", "tree/lib/libmulti.so"],
        0,
    );
    // A split binary: the marker filled in, no bundles.
    let split_elf = json_of(
        w,
        &["inspect", "--json", "split/generic/lib/libmulti.so"],
        0,
    );
    run(
        "inspect-package",
        &["inspect", "--json", "pkgs/libmulti1_1.0+kpack1_amd64.deb"],
        0,
    );
    run("error", &["inspect", "--json", "no-such-file.kpack"], 1);

    let names: BTreeSet<&str> = docs
        .keys()
        .map(String::as_str)
        .filter(|n| !n.starts_with(FETCH))
        .collect();
    let ran: BTreeSet<&str> = produced.keys().copied().collect();
    assert_eq!(
        names, ran,
        "every rocm-kpack table of docs/cli-json.md, and only those, is checked"
    );
    for (name, text) in &produced {
        check(name, text, &docs[*name]);
    }
    check("inspect-elf (split)", &split_elf, &docs["inspect-elf"]);
    // What the documents say, beyond their shape.
    let error: Value = serde_json::from_str(&produced["error"]).expect("json");
    assert_eq!(error["exit_code"], 1);
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|e| e.contains("no-such-file.kpack")),
        "{error}"
    );
    let publish: Value = serde_json::from_str(&produced["publish"]).expect("json");
    assert_eq!(publish["output"], "repo");
    let split: Value = serde_json::from_str(&produced["split"]).expect("json");
    for o in split["outputs"].as_array().expect("outputs") {
        assert_eq!(o["dest"], o["name"], "one dest shape: the tree's name");
    }
    let package: Value = serde_json::from_str(&produced["inspect-package"]).expect("json");
    assert_eq!(package["role"], "generic");
}

/// The tables of `rocm-kpack-fetch` documents: `fetch-<name>`.
const FETCH: &str = "fetch-";

/// Every `--json` document of `rocm-kpack-fetch` against docs/cli-json.md,
/// on a root whose generic tree (a split of the fixture library) has its
/// archives fetched from a directory: one installed, one a package's, the
/// rest absent.
#[test]
fn every_fetch_json_document_is_as_docs_cli_json_md_lists_it() {
    let docs = documented();
    let work = tempfile::tempdir().expect("tempdir");
    let w = work.path();
    rocm_kpack_test_support::packages::cli_inputs(w, "libmulti.so");
    json_of(w, &["split", "tree", "--out", "split", "-q"], 0);
    let store = w.join("store");
    rocm_kpack_test_support::packages::offline_store(
        &w.join("split"),
        &["gfx1100", "gfx11-generic", "gfx90a"],
        &store,
    );
    let kpack = w.join("root/opt/rocm/.kpack");
    std::fs::create_dir_all(&kpack).expect("mkdir");
    std::fs::copy(
        w.join("split/generic/.kpack/libmulti.kpm"),
        kpack.join("libmulti.kpm"),
    )
    .expect("copy the manifest");
    std::fs::copy(
        store.join("libmulti_gfx90a.kpack"),
        kpack.join("libmulti_gfx90a.kpack"),
    )
    .expect("a package's archive");
    let machines = Path::new(env!("CARGO_MANIFEST_DIR")).join("../splitter/demo/machines");
    let machine = |m: &str| machines.join(m).to_string_lossy().into_owned();
    let (mi210, cpu) = (machine("mi210"), machine("cpu-only"));
    let r = ["--root", "root"];
    let mut produced: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut run = |name: &'static str, args: &[&str], code: i32| {
        produced
            .entry(name)
            .or_default()
            .push(program_json_of("rocm-kpack-fetch", w, args, code));
    };
    run(
        "fetch-detect",
        &["detect", "--json", "--sysfs-root", &mi210],
        0,
    );
    let offline = ["--offline", "store", "--json"];
    let install = [&["install", "--target", "gfx1100"][..], &r, &offline].concat();
    run("fetch-install", &[&install[..], &["--dry-run"]].concat(), 0);
    run("fetch-install", &install, 0);
    run(
        "fetch-install-via",
        &[
            &[
                "install",
                "--target",
                "gfx1100",
                "--via",
                "apt",
                "--dry-run",
                "--json",
            ][..],
            &r,
        ]
        .concat(),
        0,
    );
    run(
        "fetch-no-targets",
        &[
            &["install", "--auto", "--json", "--sysfs-root", &cpu][..],
            &r,
        ]
        .concat(),
        3,
    );
    run(
        "fetch-no-targets",
        &[&["gc", "--json", "--sysfs-root", &cpu][..], &r].concat(),
        3,
    );
    run(
        "fetch-status",
        &[&["status", "--target", "gfx1100,gfx942", "--json"][..], &r].concat(),
        4,
    );
    run("fetch-list", &[&["list", "--json"][..], &r].concat(), 0);
    run(
        "fetch-verify",
        &[&["verify", "--target", "gfx1100", "--json"][..], &r].concat(),
        0,
    );
    run(
        "fetch-remove",
        &[&["remove", "libmulti", "--json"][..], &r].concat(),
        0,
    );
    run(
        "fetch-remove",
        &[&["remove", "no-such-component", "--json"][..], &r].concat(),
        1,
    );
    run(
        "fetch-gc",
        &[&["gc", "--target", "gfx942", "--json"][..], &r].concat(),
        0,
    );
    run(
        "fetch-prune",
        &[&["prune", "--target", "gfx942", "--json"][..], &r].concat(),
        0,
    );
    run(
        "fetch-doctor",
        &[
            &[
                "doctor",
                "--target",
                "gfx1100",
                "--json",
                "--sysfs-root",
                &mi210,
            ][..],
            &r,
        ]
        .concat(),
        0,
    );
    // pip: a base wheel of the fixture library and its device wheels, in
    // a pip index of files (README's recipe), resolved for gfx1100.
    std::fs::create_dir_all(w.join("kpkg/kpkg/lib")).expect("mkdir");
    std::fs::create_dir_all(w.join("kpkg/kpkg-1.0.dist-info")).expect("mkdir");
    std::fs::copy(
        w.join("tree/lib/libmulti.so"),
        w.join("kpkg/kpkg/lib/libmulti.so"),
    )
    .expect("copy");
    std::fs::write(
        w.join("kpkg/kpkg-1.0.dist-info/METADATA"),
        "Metadata-Version: 2.1\nName: kpkg\nVersion: 1.0\n",
    )
    .expect("metadata");
    for args in [
        &[
            "split",
            "kpkg",
            "--out",
            "wsplit",
            "--prefix-dir",
            "kpkg",
            "-q",
        ][..],
        &[
            "package", "wsplit", "--format", "wheel", "--out", "wpkgs", "-q",
        ],
        &[
            "publish",
            "wpkgs",
            "--out",
            "wrepo",
            "--pip",
            "--no-fetcher",
            "-q",
        ],
    ] {
        json_of(w, args, 0);
    }
    let index = format!("file://{}/wrepo/simple/", w.display());
    run(
        "fetch-pip",
        &[
            "pip",
            "--target",
            "gfx1100",
            "--python",
            "python3",
            "--dry-run",
            "--json",
            "install",
            "--index-url",
            &index,
            "kpkg",
        ],
        0,
    );
    // -q: pip says nothing either.
    let mut quiet = bins::command("rocm-kpack-fetch");
    quiet
        .args([
            "pip",
            "-q",
            "--target",
            "gfx1100",
            "--python",
            "python3",
            "--dry-run",
        ])
        .args(["install", "--index-url", &index, "kpkg"])
        .current_dir(w);
    bins::isolate_fetcher(&mut quiet).env("PIP_CONFIG_FILE", "/dev/null");
    let out = quiet.output().expect("run rocm-kpack-fetch pip -q");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "pip -q: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // A usage error, and a failure before anything to report.
    run("error", &["list", "--root", "no-such-root", "--json"], 2);
    let names: BTreeSet<&str> = docs
        .keys()
        .map(String::as_str)
        .filter(|n| n.starts_with(FETCH))
        .chain(["error"])
        .collect();
    let ran: BTreeSet<&str> = produced.keys().copied().collect();
    assert_eq!(
        names, ran,
        "every rocm-kpack-fetch table of docs/cli-json.md, and only those, is checked"
    );
    for (name, texts) in &produced {
        for text in texts {
            check(name, text, &docs[*name]);
        }
    }
    // What the documents say, beyond their shape.
    let install: Value = serde_json::from_str(&produced["fetch-install"][1]).expect("json");
    let installed: Vec<&str> = install["installed"]
        .as_array()
        .expect("installed")
        .iter()
        .filter_map(|i| i["filename"].as_str())
        .collect();
    assert_eq!(
        installed,
        ["libmulti_gfx11-generic.kpack", "libmulti_gfx1100.kpack"]
    );
    // The keys of an object printed at `indent`, in printed order (a
    // parsed Value would sort them).
    let keys = |text: &str, indent: usize| -> Vec<String> {
        let lead = " ".repeat(indent);
        text.lines()
            .filter_map(|l| l.strip_prefix(&lead))
            .filter(|l| l.starts_with('"'))
            .filter_map(|l| l.split('"').nth(1).map(str::to_owned))
            .filter(|k| k != "schema")
            .collect()
    };
    let detect = keys(&produced["fetch-detect"][0], 2);
    let none = &produced["fetch-no-targets"][0];
    let detection = none
        .split_once("\"detection\": {")
        .map(|(_, rest)| rest)
        .expect("a detection object");
    let in_install: Vec<String> = keys(detection, 4).into_iter().take(detect.len()).collect();
    assert_eq!(in_install, detect, "one key order for the detection");
    let removed: Value = serde_json::from_str(&produced["fetch-remove"][1]).expect("json");
    assert!(
        removed["problems"][0]
            .as_str()
            .is_some_and(|p| p.contains("no-such-component")),
        "{removed}"
    );
}

#[test]
fn the_parent_of_a_path() {
    assert_eq!(parent("a"), "");
    assert_eq!(parent("a.b"), "a");
    assert_eq!(parent("a[].b"), "a[]");
    assert_eq!(parent("a[]"), "a");
    assert_eq!(parent("a[][]"), "a[]");
    assert_eq!(parent("a.b[]"), "a.b");
}
