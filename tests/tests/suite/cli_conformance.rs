//! Both command lines, every subcommand: `--help` works, output into a
//! closed pipe (`| head` that already quit) is a quiet exit 0, shell
//! completions load in bash and every man page renders with `man -l`;
//! `-v`/`-q` everywhere, `--out` for where to write, and no colours on a
//! piped stderr.
//! The subcommands are read from each program's own `--help`, so a new one
//! is covered without touching this file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rocm_kpack_test_support::{bins, fixtures};

const PROGRAMS: [&str; 2] = ["rocm-kpack", "rocm-kpack-fetch"];

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run the program");
    assert!(
        out.status.success(),
        "{cmd:?} failed ({:?}):\n--- stdout ---\n{}--- stderr ---\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The names in the `Commands:` section of a `--help` output, without
/// clap's `help`.
fn commands_in_help(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Every command path of `program` (`[]`, `["inspect"]`, `["spec", "show"]`,
/// ...), each checked to print its `--help` with exit 0.
fn command_paths(program: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        let out = run(bins::command(program).args(&path).arg("--help"));
        let help = String::from_utf8(out.stdout).expect("help is UTF-8");
        assert!(
            help.contains("Usage:"),
            "{program} {path:?} --help:\n{help}"
        );
        for sub in commands_in_help(&help) {
            let mut child = path.clone();
            child.push(sub);
            todo.push(child);
        }
        paths.push(path);
    }
    paths.sort();
    paths
}

#[test]
fn every_subcommand_has_help_and_the_walk_finds_them_all() {
    let splitter = command_paths("rocm-kpack");
    let fetcher = command_paths("rocm-kpack-fetch");
    for expected in [
        &["inspect"][..],
        &["spec", "show"],
        &["completions"],
        &["man"],
    ] {
        assert!(
            splitter.iter().any(|p| p == expected),
            "{expected:?} in {splitter:?}"
        );
    }
    for expected in [&["install"][..], &["doctor"], &["completions"], &["man"]] {
        assert!(
            fetcher.iter().any(|p| p == expected),
            "{expected:?} in {fetcher:?}"
        );
    }
}

#[test]
fn every_subcommand_accepts_quiet_and_verbose() {
    for program in PROGRAMS {
        for path in command_paths(program) {
            let out = run(bins::command(program).args(&path).arg("--help"));
            let help = String::from_utf8(out.stdout).expect("help is UTF-8");
            for flag in ["-q, --quiet", "-v, --verbose..."] {
                assert!(
                    help.contains(flag),
                    "{program} {path:?} --help lacks {flag}:\n{help}"
                );
            }
            // One overwrite rule: whatever writes to --out takes --force.
            if help.contains("--out <") {
                assert!(
                    help.contains("--force"),
                    "{program} {path:?} has --out but no --force:\n{help}"
                );
            }
            // Accepted after the subcommand as well as before it.
            for flag in ["-q", "-v", "-vv"] {
                run(bins::command(program).args(&path).args([flag, "--help"]));
                run(bins::command(program).arg(flag).args(&path).arg("--help"));
            }
        }
        // One or the other.
        let out = bins::command(program)
            .args(["-q", "-v", "completions", "bash"])
            .output()
            .expect("run the program");
        assert_eq!(out.status.code(), Some(2), "{program} -q -v");
    }
}

#[test]
fn extract_writes_with_out_and_still_takes_output() {
    let out = run(bins::command("rocm-kpack").args(["extract", "--help"]));
    let help = String::from_utf8(out.stdout).expect("help is UTF-8");
    assert!(help.contains("-o, --out <FILE>"), "{help}");
    // `--output`, its old name, is a hidden alias.
    assert!(!help.contains("--output"), "{help}");
}

#[test]
fn log_lines_into_a_pipe_carry_no_colour() {
    let fixture = fixtures::fixture("clang19/libfixture.so");
    let dir = tempfile::tempdir().expect("tempdir");
    let split_out = dir.path().join("split");
    // `inspect` may log nothing; `split-binary -vv` logs debug lines.
    let runs: [(&[&str], &Path, bool); 3] = [
        (&["-v", "inspect"], &fixture, false),
        (&["-vv", "inspect"], &fixture, false),
        (
            &[
                "-vv",
                "split-binary",
                "--out",
                split_out.to_str().expect("UTF-8"),
            ],
            &fixture,
            true,
        ),
    ];
    for (args, input, logs) in runs {
        let out = bins::command("rocm-kpack")
            .args(args)
            .arg(input)
            .env_remove("NO_COLOR")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("run the program");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "rocm-kpack {args:?}: {:?}\n{stderr}",
            out.status
        );
        assert!(
            !out.stderr.contains(&0x1b),
            "rocm-kpack {args:?}: ESC on a piped stderr:\n{stderr}"
        );
        if logs {
            assert!(
                stderr.contains("DEBUG"),
                "rocm-kpack {args:?}: no log lines:\n{stderr}"
            );
        }
    }
}

/// Runs `program args` with stdout a pipe whose read end is already closed.
fn run_into_closed_pipe(program: &str, args: &[String], cwd: &Path) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    bins::command(program)
        .args(args)
        .current_dir(cwd)
        .env("ROCM_KPACK_PYTHON", "")
        .env_remove("ROCM_KPACK_ARCH_OVERRIDE")
        .env_remove("HSA_OVERRIDE_GFX_VERSION")
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run the program")
}

/// [`run_into_closed_pipe`] exits 0 and says nothing on stderr.
fn assert_quiet_into_closed_pipe(program: &str, args: &[String], cwd: &Path) {
    let out = run_into_closed_pipe(program, args, cwd);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "`{program} {}` into a closed pipe: {:?}, stderr:\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

#[test]
fn closed_stdout_is_a_quiet_success() {
    let repo = repo_root();
    let empty = tempfile::tempdir().expect("tempdir");
    let root = empty.path().to_str().expect("UTF-8 temp path");
    let man_dir = tempfile::tempdir().expect("tempdir");
    let man = man_dir.path().to_str().expect("UTF-8 temp path");
    let fixture = fixtures::fixture("clang19/libfixture.so");
    let sysfs = fixtures::machine("mi210");
    let (fixture, sysfs) = (
        fixture.to_str().expect("UTF-8"),
        sysfs.to_str().expect("UTF-8"),
    );
    let mut runs: Vec<(&str, Vec<String>)> = Vec::new();
    for program in PROGRAMS {
        for path in command_paths(program) {
            let mut help = path.clone();
            help.push("--help".into());
            runs.push((program, help));
        }
        runs.push((program, vec!["--version".into()]));
        runs.push((program, vec!["completions".into(), "bash".into()]));
        runs.push((program, vec!["man".into(), "--out".into(), man.into()]));
    }
    // Commands that print without side effects.
    let splitter: [&[&str]; 4] = [
        &["spec", "show"],
        &["spec", "show", "--json"],
        &["inspect", fixture],
        &["inspect", "--json", fixture],
    ];
    let fetcher: [&[&str]; 8] = [
        &["detect", "--sysfs-root", sysfs],
        &["detect", "--json", "--sysfs-root", sysfs],
        &["list", "--root", root],
        &["list", "--json", "--root", root],
        &["status", "--root", root, "--sysfs-root", sysfs],
        &["verify", "--root", root],
        &["doctor", "--root", root, "--sysfs-root", sysfs],
        &["gc", "--root", root, "--sysfs-root", sysfs],
    ];
    let owned = |args: &[&str]| args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
    runs.extend(splitter.iter().map(|a| ("rocm-kpack", owned(a))));
    runs.extend(fetcher.iter().map(|a| ("rocm-kpack-fetch", owned(a))));
    for (program, args) in &runs {
        assert_quiet_into_closed_pipe(program, args, &repo);
    }
    // Commands that write, each into a fresh directory, in data-flow order.
    let work = tempfile::tempdir().expect("tempdir");
    let w = |name: &str| work.path().join(name).to_str().expect("UTF-8").to_owned();
    std::fs::create_dir_all(work.path().join("tree/lib")).expect("mkdir");
    std::fs::copy(fixture, work.path().join("tree/lib/libfixture.so")).expect("copy");
    let writing: [Vec<String>; 4] = [
        owned(&["split-binary", fixture, "--out", &w("one")]),
        owned(&["split", &w("tree"), "--out", &w("split")]),
        owned(&[
            "package",
            &w("split"),
            "--out",
            &w("pkgs"),
            "--name",
            "fixture",
            "--version",
            "1.0",
            "--format",
            "deb,rpm",
        ]),
        owned(&[
            "extract",
            &w("one/.kpack/libfixture_gfx1100.kpack"),
            "--binary",
            "libfixture.so#0",
            "--target",
            "gfx1100",
            "--out",
            "-",
        ]),
    ];
    for args in &writing {
        assert_quiet_into_closed_pipe("rocm-kpack", args, &repo);
    }
    assert!(
        work.path()
            .join("pkgs")
            .read_dir()
            .expect("packages")
            .count()
            > 2
    );
}

/// The demo's narration goes to stdout; a closed stdout does not stop the
/// run (its progress on stderr is legitimate, a panic is not).
#[test]
fn demo_into_a_closed_pipe_completes() {
    let out = run_into_closed_pipe("rocm-kpack", &["demo".to_owned()], &repo_root());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "rocm-kpack demo into a closed pipe: {:?}\n{stderr}",
        out.status
    );
}

/// An installed `rocm-kpack` (here: copied with the fetcher into a
/// `bin/` of its own, away from the source tree, with no cargo on PATH and
/// no test-data variables) runs the whole demo: it builds nothing and reads
/// no cache. Without the preload shim it says the step is skipped; with the
/// shim in `../lib` (runtime/install-runtime.sh's prefix) it runs it.
#[test]
fn demo_runs_from_an_installed_program_and_builds_nothing() {
    let prefix = tempfile::tempdir().expect("tempdir");
    let bin = prefix.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    for program in PROGRAMS {
        std::fs::copy(bins::bin(program), bin.join(program)).expect("copy");
    }
    let demo = || {
        let out = Command::new(bin.join("rocm-kpack"))
            .arg("demo")
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display()),
            )
            .env("HOME", prefix.path())
            .current_dir(prefix.path())
            .output()
            .expect("run the demo");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "installed demo: {:?}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!stdout.contains("$ cargo"), "the demo ran cargo:\n{stdout}");
        stdout
    };
    let stdout = demo();
    assert!(
        stdout.contains("preload shim: skipped (librocm_kpack_preload.so not found)"),
        "{stdout}"
    );
    let lib = prefix.path().join("lib");
    std::fs::create_dir_all(&lib).expect("mkdir");
    std::fs::copy(
        bins::lib("librocm_kpack_preload.so"),
        lib.join("librocm_kpack_preload.so"),
    )
    .expect("copy");
    let stdout = demo();
    assert!(
        stdout.contains("preload shim: 1 fat binary registration(s)"),
        "{stdout}"
    );
    assert!(stdout.contains("the demo took"), "{stdout}");
}

/// With family packages, `package` names each package as its file is
/// named (`kfix-gfx90x`), transitional ones included: no line spells a
/// group the AMD way (`gfx90X`), which would read as another package.
#[test]
fn package_tables_spell_groups_as_the_packages_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let w = dir.path();
    rocm_kpack_test_support::packages::cli_inputs(w, "libmulti.so");
    std::fs::write(w.join("family.toml"), "granularity = \"family\"\n").expect("write");
    run(bins::command("rocm-kpack")
        .args([
            "split",
            "tree",
            "--out",
            "split",
            "--spec",
            "family.toml",
            "-q",
        ])
        .current_dir(w));
    let out = run(bins::command("rocm-kpack")
        .args(["package", "split", "--out", "pkgs", "--name", "kfix"])
        .args(["--version", "1.0", "--spec", "family.toml"])
        .current_dir(w));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("kfix-gfx90x"),
        "no transitional package: {text}"
    );
    for line in text.lines().filter(|l| l.starts_with("deb ")) {
        let amd_spelling = line
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w.starts_with("gfx") && w.contains('X'));
        assert!(!amd_spelling, "{line}");
    }
}

#[test]
fn completions_are_printed_for_every_shell_and_load_in_bash() {
    let dir = tempfile::tempdir().expect("tempdir");
    for program in PROGRAMS {
        for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
            let out = run(bins::command(program).args(["completions", shell]));
            let script = String::from_utf8(out.stdout).expect("UTF-8 script");
            assert!(
                script.contains(program),
                "{program} completions {shell}:\n{script}"
            );
        }
        let script = dir.path().join(format!("{program}.bash"));
        let out = run(bins::command(program).args(["completions", "bash"]));
        std::fs::write(&script, out.stdout).expect("write script");
        // Loading defines the completion function and registers it.
        let check = format!("source {} && complete -p {program}", script.display());
        let out = run(Command::new("bash").args(["-c", &check]));
        assert!(String::from_utf8_lossy(&out.stdout).contains(program));
    }
}

#[test]
fn man_pages_cover_every_subcommand_and_render() {
    // `man` comes from man-db (scripts/test.sh installs it).
    for program in PROGRAMS {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = run(bins::command(program)
            .args(["man", "--out"])
            .arg(dir.path()));
        let listed = String::from_utf8(out.stdout).expect("UTF-8");
        let mut pages: Vec<String> = std::fs::read_dir(dir.path())
            .expect("read man dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        pages.sort();
        let mut expected: Vec<String> = command_paths(program)
            .iter()
            .map(|p| {
                let mut name = program.to_owned();
                for part in p {
                    name.push('-');
                    name.push_str(part);
                }
                name + ".1"
            })
            .collect();
        expected.sort();
        assert_eq!(pages, expected, "{program} man");
        assert_eq!(listed.lines().count(), pages.len(), "{listed}");
        for page in &pages {
            let out = Command::new("man")
                .args(["--warnings", "-l"])
                .arg(dir.path().join(page))
                .env("MANWIDTH", "80")
                .env("MANPAGER", "cat")
                .env("PAGER", "cat")
                .output()
                .expect("run man");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && out.stderr.is_empty() && text.contains("NAME"),
                "man -l {page}: {:?}\n{}{text}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            if page == &format!("{program}.1") {
                assert!(text.contains("EXIT STATUS"), "{page}:\n{text}");
                assert!(
                    text.contains("usage error") && text.contains("problems found"),
                    "{text}"
                );
            }
        }
    }
}

/// `--target` is one option on both commands, checked against the family
/// table when parsed: an unknown target is a usage error (exit 2) naming
/// the problem, with a hint for a near miss.
#[test]
fn invalid_targets_are_usage_errors_with_a_hint() {
    let sysfs = fixtures::machine("mi210");
    let tree = tempfile::tempdir().expect("tempdir");
    let runs: [(&str, Vec<&std::ffi::OsStr>); 3] = [
        (
            "rocm-kpack",
            vec!["verify".as_ref(), tree.path().as_os_str()],
        ),
        (
            "rocm-kpack-fetch",
            vec![
                "detect".as_ref(),
                "--sysfs-root".as_ref(),
                sysfs.as_os_str(),
            ],
        ),
        (
            "rocm-kpack-fetch",
            vec![
                "status".as_ref(),
                "--root".as_ref(),
                tree.path().as_os_str(),
            ],
        ),
    ];
    for (program, args) in &runs {
        for (target, expect) in [
            ("gfx1110", "did you mean `gfx1100`?"),
            ("gfx942:sramecc", "did you mean `gfx942:sramecc+`?"),
            ("gfx9999", "not a GPU processor"),
        ] {
            let out = bins::command(program)
                .args(args)
                .args(["--target", target])
                .output()
                .expect("run the program");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{program} {args:?} --target {target}: {stderr}"
            );
            assert!(
                stderr.contains(expect),
                "{program} --target {target}: {stderr}"
            );
        }
        // Repeatable and comma-separated alike.
        let help = run(bins::command(program).args(&args[..1]).arg("--help"));
        assert!(String::from_utf8_lossy(&help.stdout).contains("--target <TARGET>"));
    }
    let ok = run(bins::command("rocm-kpack-fetch").args([
        "detect",
        "--json",
        "--target",
        "gfx1100",
        "--target",
        "gfx90a:xnack-,gfx942",
    ]));
    let json: serde_json::Value = serde_json::from_slice(&ok.stdout).expect("json");
    assert_eq!(
        json["targets"],
        serde_json::json!(["gfx1100", "gfx90a:xnack-", "gfx942"]),
        "{json}"
    );
}

/// Every command that writes refuses to replace an existing output unless
/// `--force`, and refuses before writing anything.
#[test]
fn outputs_are_replaced_only_with_force() {
    let fixture = fixtures::fixture("clang19/libfixture.so");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let split = |force: bool| {
        let mut c = bins::command("rocm-kpack");
        c.arg("split-binary").arg(&fixture).arg("--out").arg(&out);
        if force {
            c.arg("--force");
        }
        c.output().expect("run the program")
    };
    assert!(split(false).status.success());
    let before = std::fs::read_dir(out.join(".kpack"))
        .expect("kpack")
        .count();
    let again = split(false);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("refusing to replace") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line, each cause once: {stderr}"
    );
    assert!(split(true).status.success());
    assert_eq!(
        std::fs::read_dir(out.join(".kpack"))
            .expect("kpack")
            .count(),
        before
    );

    // extract: a file.
    let archive = std::fs::read_dir(out.join(".kpack"))
        .expect("kpack")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "kpack"))
        .expect("an archive");
    let listing = run(bins::command("rocm-kpack")
        .args(["inspect", "--json"])
        .arg(&archive));
    let json: serde_json::Value = serde_json::from_slice(&listing.stdout).expect("json");
    let entry = &json["entries"][0];
    let (key, target) = (
        entry["binary"].as_str().expect("binary key"),
        entry["arch"].as_str().expect("arch"),
    );
    let co = dir.path().join("co.o");
    let extract = |force: bool| {
        let mut c = bins::command("rocm-kpack");
        c.arg("extract")
            .arg(&archive)
            .args(["--binary", key, "--target", target, "--out"])
            .arg(&co);
        if force {
            c.arg("--force");
        }
        c.output().expect("run the program")
    };
    assert!(extract(false).status.success());
    assert_eq!(extract(false).status.code(), Some(1));
    assert!(extract(true).status.success());
}

/// The exit-code table, one case per code and program: 0 success,
/// 1 failure, 2 usage error, 3 no AMD GPU, 4 problems found.
#[test]
fn exit_codes_follow_the_table() {
    let empty = tempfile::tempdir().expect("tempdir");
    let root = empty.path().to_str().expect("UTF-8");
    let cpu_only = fixtures::machine("cpu-only");
    let mi210 = fixtures::machine("mi210");
    let (cpu_only, mi210) = (
        cpu_only.to_str().expect("UTF-8"),
        mi210.to_str().expect("UTF-8"),
    );
    let cases: [(&str, &[&str], i32); 10] = [
        ("rocm-kpack", &["spec", "show"], 0),
        ("rocm-kpack", &["inspect", "/nonexistent/file.kpack"], 1),
        ("rocm-kpack", &["no-such-command"], 2),
        ("rocm-kpack", &["verify", root, "--target", "gfx9999"], 2),
        ("rocm-kpack-fetch", &["detect", "--sysfs-root", mi210], 0),
        (
            "rocm-kpack-fetch",
            &["list", "--root", "/nonexistent/root"],
            2,
        ),
        ("rocm-kpack-fetch", &["detect", "--sysfs-root", cpu_only], 3),
        (
            "rocm-kpack-fetch",
            &["status", "--root", root, "--sysfs-root", cpu_only],
            3,
        ),
        (
            "rocm-kpack-fetch",
            &["doctor", "--root", root, "--sysfs-root", cpu_only],
            3,
        ),
        ("rocm-kpack-fetch", &["install", "--root", root], 2),
    ];
    for (program, args, code) in cases {
        let out = bins::command(program)
            .args(args)
            .env_remove("ROCM_KPACK_ARCH_OVERRIDE")
            .env_remove("HSA_OVERRIDE_GFX_VERSION")
            .env("ROCM_KPACK_PYTHON", "")
            .output()
            .expect("run the program");
        assert_eq!(
            out.status.code(),
            Some(code),
            "{program} {args:?}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The rows of a help text's `Exit status:` section: (code, name).
fn exit_rows(help: &str) -> Vec<(u8, String)> {
    help.lines()
        .skip_while(|l| *l != "Exit status:")
        .skip(1)
        .take_while(|l| l.starts_with("  ") && !l.trim_start().starts_with('('))
        .filter_map(|l| {
            let t = l.trim_start();
            let (code, rest) = t.split_once("  ")?;
            Some((
                code.parse().ok()?,
                rest.split([';', '(', ':']).next()?.trim().to_string(),
            ))
        })
        .collect()
}

/// Exit codes a help text names in prose: "exit 4", "exits 0", "(exit 3 ...".
fn codes_in_prose(help: &str) -> Vec<u8> {
    let prose: String = help
        .split("Exit status:")
        .next()
        .unwrap_or(help)
        .replace('\n', " ");
    let words: Vec<&str> = prose.split_whitespace().collect();
    let mut out = Vec::new();
    for pair in words.windows(2) {
        let w = pair[0].trim_start_matches('(').to_ascii_lowercase();
        if w == "exit" || w == "exits" {
            if let Ok(code) = pair[1].trim_end_matches([',', ')', ';', '.']).parse::<u8>() {
                out.push(code);
            }
        }
    }
    out
}

/// Every help text against the one exit-code table (cli/): each row
/// of an `Exit status:` section is a row of the table, spelled the same; a
/// code the prose names is one the section lists; and a command the table
/// says ends with a code lists it.
#[test]
fn every_help_text_matches_the_exit_code_table() {
    use rocm_kpack_cli::ExitStatus;
    let name_of = |code: u8| {
        ExitStatus::ALL
            .iter()
            .find(|s| s.code() == code)
            .map(|s| s.name())
    };
    let table = ExitStatus::table();
    for program in PROGRAMS {
        for path in command_paths(program) {
            let out = run(bins::command(program).args(&path).arg("--help"));
            let help = String::from_utf8(out.stdout).expect("help is UTF-8");
            let what = format!("{program} {}", path.join(" "));
            let rows = exit_rows(&help);
            if path.is_empty() {
                assert!(
                    help.contains(&table),
                    "{what}: the top-level help carries the table:\n{help}"
                );
                continue;
            }
            for (code, name) in &rows {
                assert_eq!(
                    name_of(*code),
                    Some(name.as_str()),
                    "{what}: row {code} {name:?} is not the table's"
                );
            }
            let listed: Vec<u8> = rows.iter().map(|(c, _)| *c).collect();
            for code in codes_in_prose(&help) {
                assert!(
                    listed.is_empty() || listed.contains(&code),
                    "{what}: the help says exit {code}, its Exit status section lists {listed:?}:\n{help}"
                );
            }
            // The table's own words for a command (e.g. "rocm-kpack-fetch
            // verify" under 4) must be among that command's codes.
            let sub = path.join(" ");
            for status in ExitStatus::ALL {
                let row = table_row(&table, status.code());
                let mentioned = row.contains(&format!("{program} {sub} "))
                    || row.contains(&format!("{program} {sub}\n"))
                    || (program == "rocm-kpack-fetch"
                        && status == ExitStatus::Problems
                        && row_lists(&row, &sub));
                if mentioned && !rows.is_empty() {
                    assert!(
                        listed.contains(&status.code()),
                        "{what}: the table names it under {}, its help does not:\n{help}",
                        status.code()
                    );
                }
            }
        }
    }
    // The table itself: `rocm-kpack verify` finds problems with 4, not 1.
    assert!(!table_row(&table, 1).contains("verify"), "{table}");
    assert!(
        table_row(&table, 4).contains("rocm-kpack verify"),
        "{table}"
    );
}

/// The lines of the table's row for `code` (its first line and the
/// indented continuation lines).
fn table_row(table: &str, code: u8) -> String {
    let start = format!("  {code}  ");
    let mut lines = table.lines().skip_while(|l| !l.starts_with(&start));
    let mut row = String::new();
    if let Some(first) = lines.next() {
        row.push_str(first);
        row.push('\n');
    }
    for l in lines.take_while(|l| l.starts_with("     ")) {
        row.push_str(l);
        row.push('\n');
    }
    row.replace("\n     ", " ")
}

/// Whether the Problems row's list for rocm-kpack-fetch names `sub`
/// ("rocm-kpack-fetch verify (...), doctor (...), install --strict").
fn row_lists(row: &str, sub: &str) -> bool {
    let Some((_, fetch)) = row.split_once("rocm-kpack-fetch") else {
        return false;
    };
    fetch
        .split(',')
        .any(|part| part.split_whitespace().next() == Some(sub))
}

/// Each of `expected` ("SUBCOMMAND --option") was among the options a
/// bad-value walk `checked`: the walk reads the help it should.
fn assert_walked(checked: &[String], expected: &[&str]) {
    for e in expected {
        assert!(checked.iter().any(|c| c == e), "{e} in {checked:?}");
    }
}

/// The options of a `--help` text that take a value: (`--name`, `VALUE`).
fn valued_options(help: &str) -> Vec<(String, String)> {
    help.lines()
        .filter_map(|l| {
            let t = l.trim_start();
            let t = t
                .strip_prefix("-")
                .filter(|r| r.chars().nth(1) == Some(','))
                .map_or(t, |_| t.get(4..).unwrap_or(t));
            let rest = t.strip_prefix("--")?;
            let (name, rest) = rest.split_once(' ')?;
            let value = rest.strip_prefix('<')?.split_once('>')?.0;
            Some((format!("--{name}"), value.to_owned()))
        })
        .collect()
}

/// Every (subcommand path, option, value name) of `program` for options
/// that take a value, read from each subcommand's `--help`.
fn valued_options_of(program: &str) -> Vec<(Vec<String>, String, String)> {
    let mut out = Vec::new();
    for path in command_paths(program) {
        if path.is_empty() {
            continue;
        }
        let help = run(bins::command(program).args(&path).arg("--help"));
        let help = String::from_utf8(help.stdout).expect("UTF-8");
        for (option, value) in valued_options(&help) {
            out.push((path.clone(), option, value));
        }
    }
    out
}

/// Inputs the bad-value walk runs against: a tree, its split, an overlay,
/// packages, a fat deb, an archive.
struct Inputs {
    dir: tempfile::TempDir,
}

impl Inputs {
    fn new() -> Inputs {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = dir.path();
        rocm_kpack_test_support::packages::cli_inputs(w, "libfixture.so");
        std::fs::write(w.join("a-file"), "not a directory\n").expect("write");
        let inputs = Inputs { dir };
        for args in [
            &["split", "tree", "--out", "split", "-q"][..],
            &[
                "package",
                "split",
                "--out",
                "pkgs",
                "--name",
                "kfix",
                "--version",
                "1.0",
                "-q",
            ],
        ] {
            run(bins::command("rocm-kpack")
                .args(args)
                .current_dir(inputs.path()));
        }
        inputs
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A valid invocation of each `rocm-kpack` subcommand (relative to
/// [`Inputs`]), to which one bad option value is added.
fn base_args(path: &[String], n: usize) -> Vec<String> {
    let out = format!("out-{n}");
    let v: Vec<&str> = match path.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["inspect"] => vec!["tree/lib/libfixture.so"],
        ["extract"] => vec![
            "split/gfx1100/.kpack/libfixture_gfx1100.kpack",
            "--binary",
            "libfixture.so#0",
            "--target",
            "gfx1100",
            "--out",
            "co.o",
        ],
        ["split-binary"] => vec!["tree/lib/libfixture.so", "--out", &out],
        ["split"] => vec!["tree", "--out", &out],
        ["recombine"] => vec!["split", "--out", &out],
        ["verify"] => vec!["split/generic"],
        ["repair-phdr"] => vec!["tree"],
        ["spec", "show"] => vec![],
        ["package"] => vec!["split", "--out", &out, "--name", "kfix", "--version", "1.0"],
        ["publish"] => vec!["pkgs", "--out", &out],
        ["split-package"] => vec!["fatpkg/kfat_1.0_amd64.deb", "--out", &out],
        ["demo"] => vec![],
        ["man"] => vec![],
        ref other => panic!("no valid invocation of rocm-kpack {other:?}: add one"),
    };
    v.into_iter().map(str::to_owned).collect()
}

/// A bad value for an option (by its value name, or the option for
/// options whose value names another kind of thing), the exit code the
/// table gives it, and extra arguments the case needs.
fn bad_value(path: &[String], option: &str, value: &str) -> (&'static str, i32, Vec<&'static str>) {
    let sub = path.join(" ");
    match (sub.as_str(), option, value) {
        // Where a directory is written: a plain file is a usage error.
        (_, "--out" | "--cache" | "--dir", "DIR") => ("a-file", 2, vec![]),
        (_, "--prefix-dir", "DIR") => ("../outside", 2, vec![]),
        ("extract", "--out", "FILE") => ("tree", 2, vec![]),
        // Values with a grammar.
        (_, _, "SIZE") => ("2X", 2, vec![]),
        (_, "--jobs", "N") => ("0", 2, vec![]),
        (_, "--level" | "--device-level", "N") => ("99", 2, vec![]),
        (_, _, "TARGET") => ("gfx9999", 2, vec![]),
        (_, _, "FORMAT") => ("debx", 2, vec![]),
        (_, _, "KIND" | "COMPRESSION") => ("lz4", 2, vec![]),
        (_, _, "NAME") => ("../x", 2, vec![]),
        (_, _, "VERSION") => ("1 0", 2, vec![]),
        (_, _, "TAG") => ("py3", 2, vec![]),
        (_, _, "URL") => ("ftp://example.org/repo", 2, vec![]),
        (_, _, "KEYID") => ("--batch", 2, vec![]),
        (_, _, "MACHINE") => ("pdp11", 2, vec![]),
        // Files read: one that does not exist is unreadable input.
        (_, _, "FILE" | "DEB" | "TOML") => ("no-such-input", 1, vec![]),
        (_, "--fetcher-bin", "PATH") => ("no-such-input", 1, vec![]),
        (_, "--gpg", "PROGRAM") => ("no-such-input", 1, vec!["--sign-key", "ABCD1234"]),
        (_, "--binary", "KEY") => ("no-such-input#0", 1, vec![]),
        _ => panic!("rocm-kpack {sub} {option} <{value}>: no bad value known; add one"),
    }
}

/// Every option of every `rocm-kpack` subcommand that takes a value, given
/// a bad one, exits as the table says: 2 for a value that is wrong on its
/// face (checked when the line is parsed, or right after), 1 for a file
/// that cannot be read; and the message names the value.
#[test]
fn every_option_with_a_bad_value_exits_as_the_table_says() {
    let inputs = Inputs::new();
    let mut n = 0;
    let mut checked = Vec::new();
    for (path, option, value) in valued_options_of("rocm-kpack") {
        n += 1;
        let (bad, code, extra) = bad_value(&path, &option, &value);
        let mut args = base_args(&path, n);
        // An option the base already gives is replaced.
        if let Some(i) = args.iter().position(|a| *a == option) {
            args.drain(i..i + 2);
        }
        args.push(format!("{option}={bad}"));
        args.extend(extra.iter().map(|e| (*e).to_owned()));
        let out = bins::command("rocm-kpack")
            .args(&path)
            .args(&args)
            .current_dir(inputs.path())
            .env_remove("SOURCE_DATE_EPOCH")
            .output()
            .expect("run rocm-kpack");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(code),
            "rocm-kpack {} {}: {stderr}",
            path.join(" "),
            args.join(" ")
        );
        assert!(
            stderr.contains(bad) || stderr.contains(&option),
            "rocm-kpack {} {option}={bad}: the message names neither:\n{stderr}",
            path.join(" ")
        );
        checked.push(format!("{} {option}", path.join(" ")));
    }
    assert_walked(
        &checked,
        &[
            "package --format",
            "split --memory",
            "split --out",
            "split-package --target",
            "publish --suite",
            "man --out",
        ],
    );
    // --force changes nothing about a plain file as --out.
    let out = bins::command("rocm-kpack")
        .args(["split", "tree", "--out", "a-file", "--force"])
        .current_dir(inputs.path())
        .output()
        .expect("run rocm-kpack");
    assert_eq!(out.status.code(), Some(2));
    // With --json, a usage error is also the error object on stdout.
    let out = bins::command("rocm-kpack")
        .args(["split", "tree", "--out", "o", "--memory", "2X", "--json"])
        .current_dir(inputs.path())
        .output()
        .expect("run rocm-kpack");
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the error object");
    assert_eq!(doc["exit_code"], 2, "{doc}");
    assert!(
        doc["error"].as_str().is_some_and(|e| e.contains("2X")),
        "{doc}"
    );
}

/// `-q` prints nothing but errors and the `--json` document; `-v` adds
/// detail; a warning is `rocm-kpack: warning: ...`, in one style.
#[test]
fn quiet_is_silent_verbose_adds_detail_and_warnings_have_one_style() {
    let inputs = Inputs::new();
    let w = inputs.path();
    let runs: [&[&str]; 4] = [
        &["split", "tree", "--out", "q-split"],
        &[
            "package",
            "split",
            "--out",
            "q-pkgs",
            "--name",
            "kfix",
            "--version",
            "1.0",
        ],
        &["publish", "pkgs", "--out", "q-repo", "--no-fetcher"],
        &[
            "split-package",
            "fatpkg/kfat_1.0_amd64.deb",
            "--out",
            "q-sp",
            "--level",
            "1",
        ],
    ];
    for args in runs {
        let out = run(bins::command("rocm-kpack")
            .args(args)
            .arg("-q")
            .current_dir(w));
        assert!(
            out.stdout.is_empty() && out.stderr.is_empty(),
            "rocm-kpack {args:?} -q printed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The document, and nothing else.
        let mut again: Vec<&str> = args.to_vec();
        let out_dir = format!("{}-json", args[3]);
        again[3] = &out_dir;
        let out = run(bins::command("rocm-kpack")
            .args(&again)
            .args(["-q", "--json"])
            .current_dir(w));
        assert_only_the_document(&out, args);
    }
    // Without -q: the report, with plurals that agree.
    let out = run(bins::command("rocm-kpack")
        .args(["split", "tree", "--out", "v-split", "-v"])
        .current_dir(w));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(": 1 binary split ("), "{text}");
    assert!(
        text.contains("lib/libfixture.so: ") && text.contains(" in 1 bundle, "),
        "-v names each binary: {text}"
    );
    let plain = run(bins::command("rocm-kpack")
        .args(["split", "tree", "--out", "p-split"])
        .current_dir(w));
    let plain = String::from_utf8_lossy(&plain.stdout);
    assert!(!plain.contains("lib/libfixture.so: "), "{plain}");
    assert!(
        !plain.contains(" 1 files") && !plain.contains("1 binaries"),
        "{plain}"
    );
    // The table's columns line up.
    let rows: Vec<&str> = plain
        .lines()
        .filter(|l| l.starts_with("  gfx") || l.starts_with("  generic"))
        .collect();
    let ends: BTreeSet<usize> = rows.iter().map(|l| l.len()).collect();
    assert_eq!(ends.len(), 1, "ragged columns:\n{plain}");
    // A warning (recombine of one shard: most spec targets have no code).
    let out = run(bins::command("rocm-kpack")
        .args(["recombine", "split", "--out", "rec"])
        .current_dir(w));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("rocm-kpack: warning: ")),
        "{stderr}"
    );
    assert!(!stderr.contains("WARN"), "one style:\n{stderr}");
    let quiet = run(bins::command("rocm-kpack")
        .args(["recombine", "split", "--out", "rec-q", "-q"])
        .current_dir(w));
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
    // package's table names packages as they are named (gfx90x, not gfx90X).
    let out = run(bins::command("rocm-kpack")
        .args([
            "package",
            "split",
            "--out",
            "names",
            "--name",
            "kfix",
            "--version",
            "1.0",
        ])
        .current_dir(w));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().nth(1) == Some("kfix-gfx90x")),
        "{text}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some("gfx90X")),
        "{text}"
    );
}

/// A `-q --json` run's output: the document on stdout, nothing on stderr.
fn assert_only_the_document(out: &Output, args: &[&str]) {
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["schema"], 1, "{args:?}");
    assert!(
        out.stderr.is_empty(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A run that finds nothing to do is an error naming where it looked,
/// and leaves nothing behind.
#[test]
fn runs_that_find_nothing_say_where_they_looked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(empty.join("usr/lib")).expect("mkdir");
    for (args, out_dir) in [
        (vec!["split", "empty", "--out", "o1"], "o1"),
        (vec!["publish", "empty", "--out", "o2"], "o2"),
    ] {
        let out = bins::command("rocm-kpack")
            .args(&args)
            .current_dir(dir.path())
            .output()
            .expect("run rocm-kpack");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("empty") && stderr.contains("searched"),
            "{args:?} names what it searched: {stderr}"
        );
        assert!(
            !dir.path().join(out_dir).exists(),
            "{args:?} left {out_dir}"
        );
    }
}

/// `--target` on `split` and `split-package`: one device group per target
/// given, as the spec `granularity = "per-target"` with `targets`; device
/// code for a target not given is an error that says what to do.
#[test]
fn split_and_split_package_take_target() {
    let inputs = Inputs::new();
    let w = inputs.path();
    let targets = "gfx90a,gfx942,gfx1030,gfx1100,gfx1101,gfx11-generic";
    let out = run(bins::command("rocm-kpack")
        .args([
            "split", "tree", "--out", "t-split", "--target", targets, "--json",
        ])
        .current_dir(w));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let mut trees: Vec<&str> = doc["outputs"]
        .as_array()
        .expect("outputs")
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    trees.sort();
    let mut want: Vec<&str> = targets.split(',').chain(["generic"]).collect();
    want.sort();
    assert_eq!(trees, want);
    // Fewer targets than the input has.
    for args in [
        &["split", "tree", "--out", "t-few", "--target", "gfx1100"][..],
        &[
            "split-package",
            "fatpkg/kfat_1.0_amd64.deb",
            "--out",
            "t-few-pkg",
            "--target",
            "gfx1100",
        ],
    ] {
        let out = bins::command("rocm-kpack")
            .args(args)
            .current_dir(w)
            .output()
            .expect("run rocm-kpack");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("gfx90a") && stderr.contains("hint: ") && stderr.contains("--target"),
            "{args:?}: {stderr}"
        );
        assert!(!w.join(args[3]).join("generic").exists());
    }
    // split-package: the packages are those of the targets.
    let out = run(bins::command("rocm-kpack")
        .args([
            "split-package",
            "fatpkg/kfat_1.0_amd64.deb",
            "--out",
            "t-pkgs",
            "--target",
            targets,
        ])
        .args(["--level", "1", "--json"])
        .current_dir(w));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let mut names: Vec<&str> = doc["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter(|p| p.get("transitional").is_none())
        .filter_map(|p| p["name"].as_str())
        .collect();
    names.sort();
    let mut want: Vec<String> = targets.split(',').map(|t| format!("kfat-{t}")).collect();
    want.push("kfat".into());
    want.sort();
    assert_eq!(names, want);
    // --target and --spec are one or the other.
    let out = bins::command("rocm-kpack")
        .args([
            "split",
            "tree",
            "--out",
            "t-both",
            "--target",
            "gfx1100",
            "--spec",
            "keep.toml",
        ])
        .current_dir(w)
        .output()
        .expect("run rocm-kpack");
    assert_eq!(out.status.code(), Some(2));
}

/// `split-package --dry-run` names exactly the packages a run writes and
/// writes nothing in --out; `publish --dry-run` lists what it would
/// publish and writes nothing.
#[test]
fn dry_runs_name_what_a_run_writes_and_write_nothing() {
    let inputs = Inputs::new();
    let w = inputs.path();
    let deb = "fatpkg/kfat_1.0_amd64.deb";
    let names = |doc: &serde_json::Value| -> Vec<String> {
        let mut v: Vec<String> = doc["packages"]
            .as_array()
            .expect("packages")
            .iter()
            .map(|p| {
                p["path"]
                    .as_str()
                    .expect("path")
                    .rsplit('/')
                    .next()
                    .expect("name")
                    .to_owned()
            })
            .collect();
        v.sort();
        v
    };
    let dry = run(bins::command("rocm-kpack")
        .args(["split-package", deb, "--out", "dry", "--dry-run", "--json"])
        .current_dir(w));
    assert!(!w.join("dry").exists(), "a dry run made its --out");
    let dry: serde_json::Value = serde_json::from_slice(&dry.stdout).expect("JSON");
    let real = run(bins::command("rocm-kpack")
        .args([
            "split-package",
            deb,
            "--out",
            "real",
            "--level",
            "1",
            "--json",
        ])
        .current_dir(w));
    let real: serde_json::Value = serde_json::from_slice(&real.stdout).expect("JSON");
    assert_eq!(names(&dry), names(&real));
    let mut written: Vec<String> = std::fs::read_dir(w.join("real"))
        .expect("real")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(names(&dry), written);
    // The text form names them too, and says that a run would refuse to
    // replace them.
    let again = run(bins::command("rocm-kpack")
        .args(["split-package", deb, "--out", "real", "--dry-run"])
        .current_dir(w));
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(text.contains("kfat-gfx1100 "), "{text}");
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));

    let out = run(bins::command("rocm-kpack")
        .args([
            "publish",
            "pkgs",
            "--out",
            "pub-dry",
            "--no-fetcher",
            "--dry-run",
        ])
        .current_dir(w));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("would publish apt, kpack-store into pub-dry: ") && text.contains(" debs"),
        "{text}"
    );
    assert!(!w.join("pub-dry").exists(), "a dry run made its --out");
}

/// A full file system: the error names the file being written in --out
/// (not the input), and the hint names the file system and --out.
#[test]
fn a_full_disk_names_the_output_and_its_file_system() {
    let inputs = Inputs::new();
    let w = inputs.path();
    let mnt = w.join("small");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    // A 16 KiB tmpfs in a mount namespace of the command's own: unshare(1)
    // as root or in a user namespace, so nothing is left mounted.
    let deb = w.join("fatpkg/kfat_1.0_amd64.deb");
    for json in [false, true] {
        let mut cmd = Command::new("unshare");
        cmd.args([
            "-rm",
            "sh",
            "-c",
            r#"mount -t tmpfs -o size=16k tmpfs "$1" && shift && exec "$@""#,
            "sh",
        ])
        .arg(&mnt)
        .arg(bins::bin("rocm-kpack"))
        .arg("split-package")
        .arg(&deb)
        .arg("--out")
        .arg(mnt.join("out"));
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().expect("run unshare");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let error = line_starting(&stderr, "rocm-kpack: error: ");
        assert!(
            error.contains(&mnt.join("out").display().to_string())
                && error.contains("No space left on device"),
            "the output's file, not the input: {error}"
        );
        assert!(!error.contains("kfat_1.0_amd64.deb: usr/"), "{error}");
        let hint = full_fs_hint(&stderr, "rocm-kpack", &mnt);
        assert!(hint.contains("choose another --out"), "{hint}");
        if json {
            let doc: serde_json::Value =
                serde_json::from_slice(&out.stdout).expect("the error object");
            assert_eq!(doc["exit_code"], 1);
            assert!(
                doc["hint"].as_str().is_some_and(|h| h.contains("--out")),
                "{doc}"
            );
        }
    }
}

/// Every subcommand's `--help` ends with 1 to 3 examples (the man page's
/// EXAMPLES), and `RUST_LOG` is named once, in the top-level help, not on
/// every `-v` line.
#[test]
fn help_ends_with_examples_and_names_rust_log_once() {
    for (program, path) in PROGRAMS
        .iter()
        .flat_map(|p| command_paths(p).into_iter().map(move |path| (*p, path)))
    {
        let out = run(bins::command(program).args(&path).arg("--help"));
        let help = String::from_utf8(out.stdout).expect("UTF-8");
        let what = format!("{program} {} --help", path.join(" "));
        let last = help.trim_end().rsplit("\n\n").next().unwrap_or_default();
        assert!(
            last.starts_with("Examples:"),
            "{what} does not end with examples:\n{help}"
        );
        let examples = last
            .lines()
            .filter(|l| l.starts_with(&format!("      {program} ")))
            .count();
        assert!(
            (1..=3).contains(&examples),
            "{what}: {examples} examples:\n{last}"
        );
        let rust_log = help.matches("RUST_LOG").count();
        assert_eq!(rust_log, usize::from(path.is_empty()), "{what}:\n{help}");
        assert!(!help.contains("per GPU family"), "{what}:\n{help}");
    }
    // The retired command is not offered.
    let out = run(bins::command("rocm-kpack-fetch").arg("--help"));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("pip-index-url"));
}

/// A work directory for `rocm-kpack-fetch` runs: `froot`, an empty root,
/// and `a-file`, a plain file.
fn fetch_workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("froot")).expect("mkdir");
    std::fs::write(dir.path().join("a-file"), "not a directory\n").expect("write");
    dir
}

/// `program`'s hint in `stderr`, checked to name the full file system
/// mounted at `mnt`.
fn full_fs_hint<'a>(stderr: &'a str, program: &str, mnt: &Path) -> &'a str {
    let hint = line_starting(stderr, &format!("{program}: hint: "));
    assert!(
        hint.contains(&format!(
            "the file system mounted at {} is full",
            mnt.display()
        )),
        "{hint}"
    );
    hint
}

/// The line of `stderr` that starts with `prefix` (`PROGRAM: hint: `).
fn line_starting<'a>(stderr: &'a str, prefix: &str) -> &'a str {
    stderr
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?}: {stderr}"))
}

/// A valid invocation of each `rocm-kpack-fetch` subcommand in a work
/// directory holding `froot` (an empty root) and `a-file`: the options
/// before the bad value, and what follows it (`pip`'s and `uv`'s client
/// arguments come last).
fn fetch_base_args(path: &[String]) -> (Vec<&'static str>, Vec<&'static str>) {
    let root = ["--root", "froot"];
    let target = ["--target", "gfx1100"];
    let both = || [&target[..], &root[..]].concat();
    match path.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["detect"] => (target.to_vec(), vec![]),
        ["install"] => ([&both()[..], &["--dry-run"]].concat(), vec![]),
        ["status" | "verify" | "gc" | "prune" | "doctor"] => (both(), vec![]),
        ["list"] => (root.to_vec(), vec![]),
        ["remove"] => ([&["rocrand"][..], &root[..]].concat(), vec![]),
        ["trigger"] => (vec![], vec![]),
        ["pip"] => (
            vec!["--target", "gfx1100", "--dry-run"],
            vec!["install", "--no-index", "no-such-dist"],
        ),
        ["uv"] => (
            vec!["--target", "gfx1100", "--dry-run"],
            vec!["pip", "install", "--no-index", "no-such-dist"],
        ),
        ["completions"] => (vec!["bash"], vec![]),
        ["man"] => (vec![], vec![]),
        ref other => panic!("no valid invocation of rocm-kpack-fetch {other:?}: add one"),
    }
}

/// A bad value for a `rocm-kpack-fetch` option and the exit code the table
/// gives it; `None` for an option that takes any value (`--pm-opt`, passed
/// to the package manager as it is).
fn fetch_bad_value(path: &[String], option: &str, value: &str) -> Option<(&'static str, i32)> {
    let sub = path.join(" ");
    Some(match (sub.as_str(), option, value) {
        // `trigger` runs in a package transaction: one line, exit 0.
        ("trigger", _, _) => ("x", 0),
        (_, "--pm-opt", _) => return None,
        // Directories read: one that is not there, or a plain file.
        (_, "--root" | "--sysfs-root" | "--prefix", "DIR" | "P") => ("no-such-dir", 2),
        (_, "--offline", "DIR") => ("a-file", 2),
        // Directories written.
        (_, "--cache-dir" | "--out", "DIR") => ("a-file", 2),
        // Programs run: one that is not there is unusable input.
        // ... except uv's program given to `pip`: a usage error.
        ("pip", "--uv-exe", _) => ("no-such-input", 2),
        (_, "--python" | "--uv-exe", "PATH") => ("no-such-input", 1),
        // Values with a grammar.
        (_, _, "TARGET") => ("gfx9999", 2),
        (_, _, "URL") => ("ftp://example.org/repo", 2),
        (_, _, "SECONDS" | "SECS" | "N" | "BYTES" | "N|release") => ("x", 2),
        (_, _, "PM") => ("yum", 2),
        (_, _, "PATTERN") => ("{nope}", 2),
        _ => panic!("rocm-kpack-fetch {sub} {option} <{value}>: no bad value known; add one"),
    })
}

/// Every option of every `rocm-kpack-fetch` subcommand that takes a value,
/// given a bad one, exits as the table says: 2 for a value wrong on its
/// face (checked when the line is parsed, or right after), 1 for a program
/// that cannot be run, 0 for `trigger` (which never fails a package
/// transaction); and the message names the value or the option.
#[test]
fn every_fetch_option_with_a_bad_value_exits_as_the_table_says() {
    let dir = fetch_workdir();
    let w = dir.path();
    let mut checked = Vec::new();
    for (path, option, value) in valued_options_of("rocm-kpack-fetch") {
        let Some((bad, code)) = fetch_bad_value(&path, &option, &value) else {
            continue;
        };
        let (mut args, after) = fetch_base_args(&path);
        // An option the base already gives is replaced.
        if let Some(i) = args.iter().position(|a| *a == option) {
            args.drain(i..i + 2);
        }
        let given = format!("{option}={bad}");
        let mut cmd = bins::command("rocm-kpack-fetch");
        cmd.args(&path).args(&args).arg(&given).args(&after);
        bins::isolate_fetcher(&mut cmd);
        let out = cmd
            .current_dir(w)
            .env("ROCM_KPACK_FETCH_SKIP", "1")
            .env("PIP_CONFIG_FILE", "/dev/null")
            .output()
            .expect("run rocm-kpack-fetch");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let what = format!(
            "rocm-kpack-fetch {} {} {given}",
            path.join(" "),
            args.join(" ")
        );
        assert_eq!(out.status.code(), Some(code), "{what}: {said}");
        assert!(
            said.contains(bad) || said.contains(&option),
            "{what}: the message names neither:\n{said}"
        );
        checked.push(format!("{} {option}", path.join(" ")));
    }
    assert_walked(
        &checked,
        &[
            "install --cache-dir",
            "install --index-url",
            "install --native-host",
            "install --prefix",
            "install --python",
            "status --python",
            "prune --keep",
            "uv --uv-exe",
            "trigger --timeout",
        ],
    );
    // pip has no uv program: --uv-exe there is a usage error, however good.
    let mut cmd = bins::command("rocm-kpack-fetch");
    cmd.args([
        "pip", "--target", "gfx1100", "--uv-exe", "uv", "install", "x",
    ]);
    bins::isolate_fetcher(&mut cmd);
    assert_eq!(cmd.output().expect("run").status.code(), Some(2));
    // With --json, a usage error is also the error object on stdout.
    let mut cmd = bins::command("rocm-kpack-fetch");
    cmd.args(["list", "--root", "no-such-dir", "--json"])
        .current_dir(w);
    bins::isolate_fetcher(&mut cmd);
    let out = cmd.output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the error object");
    assert_eq!(doc["exit_code"], 2, "{doc}");
    assert!(
        doc["error"]
            .as_str()
            .is_some_and(|e| e.contains("no-such-dir")),
        "{doc}"
    );
}

/// `rocm-kpack-fetch -q` prints nothing but errors and the `--json`
/// document, for every command that reports (each prints something
/// without it); a no-op `install` says where it looked.
#[test]
fn fetch_quiet_prints_nothing_but_errors_and_the_document() {
    let dir = fetch_workdir();
    let w = dir.path();
    let runs: [&[&str]; 7] = [
        &["detect", "--target", "gfx1100"],
        &["install", "--target", "gfx1100", "--root", "froot"],
        &["status", "--target", "gfx1100", "--root", "froot"],
        &["list", "--root", "froot"],
        &["verify", "--root", "froot"],
        &["gc", "--target", "gfx1100", "--root", "froot"],
        &["prune", "--target", "gfx1100", "--root", "froot"],
    ];
    let fetch = |args: &[&str], extra: &[&str]| {
        let mut cmd = bins::command("rocm-kpack-fetch");
        cmd.args(args).args(extra).current_dir(w);
        bins::isolate_fetcher(&mut cmd);
        run(&mut cmd)
    };
    for args in runs {
        let loud = fetch(args, &[]);
        assert!(!loud.stdout.is_empty(), "{args:?} says nothing without -q");
        let out = fetch(args, &["-q"]);
        assert!(
            out.stdout.is_empty() && out.stderr.is_empty(),
            "rocm-kpack-fetch {args:?} -q printed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_only_the_document(&fetch(args, &["-q", "--json"]), args);
    }
    let out = fetch(runs[1], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("nothing to install: no .kpm manifest found (searched ")
            && text.contains("froot/opt/rocm*, froot/usr, "),
        "{text}"
    );
}

/// `install` on a full file system: the error names the file being
/// written, the hint the file system that is full (and `--cache-dir` when
/// it is the cache's), and there is no advice about the network.
#[test]
fn a_full_disk_in_install_names_the_file_system_not_the_network() {
    let dir = tempfile::tempdir().expect("tempdir");
    let w = dir.path();
    std::fs::create_dir_all(w.join("tree/lib")).expect("mkdir");
    std::fs::copy(
        fixtures::fixture("clang19/libmulti.so"),
        w.join("tree/lib/libmulti.so"),
    )
    .expect("copy");
    run(bins::command("rocm-kpack")
        .args(["split", "tree", "--out", "split", "-q"])
        .current_dir(w));
    let store = w.join("store");
    rocm_kpack_test_support::packages::offline_store(
        &w.join("split"),
        &["gfx1100", "gfx11-generic"],
        &store,
    );
    let mnt = w.join("small");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let big_cache = w.join("cache");
    for cache in [None, Some(&big_cache)] {
        // A one-page tmpfs in a mount namespace of the command's own
        // (unshare(1), as root or in a user namespace): the manifest fills
        // it, nothing is left mounted.
        let mut cmd = Command::new("unshare");
        cmd.args([
            "-rm",
            "sh",
            "-c",
            r#"mount -t tmpfs -o size=4k tmpfs "$1" && mkdir -p "$1/opt/rocm/.kpack" && cp "$2" "$1/opt/rocm/.kpack/" && shift 2 && exec "$@""#,
            "sh",
        ])
        .arg(&mnt)
        .arg(w.join("split/generic/.kpack/libmulti.kpm"))
        .arg(bins::bin("rocm-kpack-fetch"))
        .args(["install", "--target", "gfx1100", "--offline"])
        .arg(&store)
        .arg("--root")
        .arg(&mnt);
        if let Some(c) = cache {
            cmd.arg("--cache-dir").arg(c);
        }
        bins::isolate_fetcher(&mut cmd);
        let out = cmd.output().expect("run unshare");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("No space left on device")
                && stderr.contains(&mnt.display().to_string()),
            "names the file on the full file system: {stderr}"
        );
        assert!(!stderr.contains("check the network"), "{stderr}");
        let hint = full_fs_hint(&stderr, "rocm-kpack-fetch", &mnt);
        assert_eq!(hint.contains("--cache-dir"), cache.is_none(), "{hint}");
    }
}
