//! `rocm-kpack-fetch pip install ...` / `uv pip install ...`: the
//! post-install hook pip does not have. The user's `pip install` arguments
//! are run once, with the local GPUs' `device-<target>` extras added to
//! every requirement on the command line whose distribution declares them,
//! so `torch torchvision` on an MI300X resolves as
//! `torch[device-gfx942] torchvision[device-gfx942]`.
//!
//! Which extras a requirement's distribution declares is learned without
//! installing anything: `pip install --dry-run --no-deps --ignore-installed
//! --report -` with the user's own arguments (index, find-links, pins)
//! resolves the named requirements and reports their metadata (pip reads it
//! from PEP 658 metadata files where the index serves them).

use std::collections::BTreeMap;
use std::path::Path;

use rocm_kpack_format::target::TargetId;
use rocm_kpack_pkgspec::amd::device_extra;
use serde::{Deserialize, Serialize};

use super::pip::device_targets;
use super::{checked, passthrough, PmError};

/// Options of `pip install` and `uv pip install` that take a value as the
/// next argument (the value is not a requirement).
const VALUE_OPTIONS: &[&str] = &[
    "-r",
    "--requirement",
    "--requirements",
    "-c",
    "--constraint",
    "--constraints",
    "-e",
    "--editable",
    "-t",
    "--target",
    "--platform",
    "--python-version",
    "--python-platform",
    "--implementation",
    "--abi",
    "--root",
    "--prefix",
    "--src",
    "--upgrade-strategy",
    "-C",
    "--config-settings",
    "--config-setting",
    "--global-option",
    "--no-binary",
    "--only-binary",
    "--progress-bar",
    "--root-user-action",
    "--report",
    "-i",
    "--index-url",
    "--extra-index-url",
    "--index",
    "--default-index",
    "--index-strategy",
    "-f",
    "--find-links",
    "-p",
    "--python",
    "--log",
    "--keyring-provider",
    "--proxy",
    "--retries",
    "--timeout",
    "--exists-action",
    "--trusted-host",
    "--allow-insecure-host",
    "--cert",
    "--client-cert",
    "--cache-dir",
    "--use-feature",
    "--use-deprecated",
    "--override",
    "--overrides",
    "--build-constraint",
    "--build-constraints",
    "--resolution",
    "--prerelease",
    "--fork-strategy",
    "--exclude-newer",
    "--link-mode",
    "--color",
    "--config-file",
    "--directory",
    "--project",
    "--group",
    "--extra",
    "--torch-backend",
    "--no-build-isolation-package",
    "--reinstall-package",
    "-P",
    "--upgrade-package",
    "--refresh-package",
];

/// Options whose value is a path pip would read relative to its working
/// directory (the interpreter runs from `/`, [`crate::python::command`]).
const PATH_OPTIONS: &[&str] = &[
    "-r",
    "--requirement",
    "-c",
    "--constraint",
    "-e",
    "--editable",
    "-f",
    "--find-links",
    "-t",
    "--target",
    "--root",
    "--prefix",
    "--src",
    "--log",
    "--cert",
    "--client-cert",
    "--cache-dir",
];

/// Options of the user's arguments that change what the metadata query
/// finds, as pip spells them (uv's `--index` is pip's
/// `--extra-index-url`, its `--default-index` pip's `--index-url`);
/// flags without a value are listed with `None`.
const QUERY_OPTIONS: &[(&str, Option<&str>)] = &[
    ("-i", Some("--index-url")),
    ("--index-url", Some("--index-url")),
    ("--default-index", Some("--index-url")),
    ("--extra-index-url", Some("--extra-index-url")),
    ("--index", Some("--extra-index-url")),
    ("-f", Some("--find-links")),
    ("--find-links", Some("--find-links")),
    ("--trusted-host", Some("--trusted-host")),
    ("--only-binary", Some("--only-binary")),
    ("--no-binary", Some("--no-binary")),
    ("--no-index", None),
    ("--pre", None),
    ("--prefer-binary", None),
];

/// The arguments of the metadata query: the user's named requirements and
/// the options of [`QUERY_OPTIONS`], nothing else (uv's own options mean
/// nothing to pip; requirement files and paths are not asked about).
pub fn query_args(args: &[String]) -> Vec<String> {
    let positions = requirement_positions(args);
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if positions.contains(&i) {
            if requirement_name(a).is_some() {
                out.push(a.clone());
            }
            i += 1;
            continue;
        }
        let (opt, inline) = match a.split_once('=') {
            Some((o, v)) if a.starts_with("--") => (o, Some(v)),
            _ => (a.as_str(), None),
        };
        match QUERY_OPTIONS.iter().find(|(o, _)| *o == opt) {
            Some((_, Some(pip))) => {
                let value = inline.or_else(|| args.get(i + 1).map(String::as_str));
                if let Some(v) = value {
                    out.push(format!("{pip}={v}"));
                }
                if inline.is_none() {
                    i += 1;
                }
            }
            Some((o, None)) => out.push(o.to_string()),
            None => {
                if inline.is_none() && VALUE_OPTIONS.contains(&opt) {
                    i += 1;
                }
            }
        }
        i += 1;
    }
    out
}

/// The indices of the requirement arguments among `pip install`'s
/// arguments (after `install`): the positionals that are not option values.
/// Everything after `--` is positional.
pub fn requirement_positions(args: &[String]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut only_positional = false;
    while i < args.len() {
        let a = &args[i];
        if only_positional || !a.starts_with('-') || a == "-" {
            out.push(i);
        } else if a == "--" {
            only_positional = true;
        } else if !a.contains('=') && VALUE_OPTIONS.contains(&a.as_str()) {
            i += 1;
        }
        i += 1;
    }
    out
}

/// The distribution name a requirement names (`torch` of
/// `torch[cuda]>=2; python_version>"3"`, of `torch @ https://...`); `None`
/// for paths and URLs, whose name only the resolver knows.
pub fn requirement_name(req: &str) -> Option<&str> {
    let req = req.trim_start();
    let end = req
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(req.len());
    let name = &req[..end];
    let rest = req[end..].trim_start();
    let plausible = name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && !name.ends_with(".whl")
        && (rest.is_empty() || rest.starts_with(['[', '=', '<', '>', '!', '~', ';', '@', '(']));
    plausible.then_some(name)
}

/// The requirement with `extras` added to its extras (`torch==2` ->
/// `torch[device-gfx942]==2`, `torch[a]` -> `torch[a,device-gfx942]`); one
/// already there is not repeated.
pub fn with_extras(req: &str, name: &str, extras: &[String]) -> String {
    let Some(at) = req.find(name) else {
        return req.to_string();
    };
    let after = at + name.len();
    let (head, tail) = req.split_at(after);
    let tail_trim = tail.trim_start();
    let (mut current, rest): (Vec<String>, &str) = match tail_trim.strip_prefix('[') {
        Some(inner) => match inner.find(']') {
            Some(close) => (
                inner[..close]
                    .split(',')
                    .map(str::trim)
                    .filter(|e| !e.is_empty())
                    .map(str::to_string)
                    .collect(),
                &inner[close + 1..],
            ),
            None => return req.to_string(),
        },
        None => (Vec::new(), tail),
    };
    for e in extras {
        if !current.iter().any(|c| super::pip::normalize_extra(c) == *e) {
            current.push(e.clone());
        }
    }
    format!("{head}[{}]{rest}", current.join(","))
}

/// One requirement the wrapper changed, or could not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rewritten {
    /// The argument as the user typed it.
    pub requirement: String,
    /// As passed to pip.
    pub now: String,
    /// The extras added.
    pub extras: Vec<String>,
}

/// What the wrapper will run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WrapPlan {
    /// The `install` arguments passed to the client.
    pub args: Vec<String>,
    /// The requirements that got extras.
    pub rewritten: Vec<Rewritten>,
    /// Targets a distribution has no extra for, requirements it cannot
    /// read a name from.
    pub warnings: Vec<String>,
}

/// The `pip install --dry-run --report` document, as far as read here.
#[derive(Debug, Deserialize)]
struct Report {
    #[serde(default)]
    install: Vec<ReportItem>,
}

#[derive(Debug, Deserialize)]
struct ReportItem {
    metadata: ReportMetadata,
}

#[derive(Debug, Deserialize)]
struct ReportMetadata {
    name: String,
    #[serde(default)]
    provides_extra: Vec<String>,
}

/// The extras each distribution the arguments name declares (PEP 503
/// names, PEP 685 extras), asked of `python -I -m pip` without installing.
pub fn declared_extras(
    python: &str,
    args: &[String],
) -> Result<BTreeMap<String, Vec<String>>, PmError> {
    let mut c = crate::python::command(python);
    c.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--quiet",
        "--dry-run",
        "--no-deps",
        "--ignore-installed",
        "--report",
        "-",
    ])
    .args(args);
    let text = checked(&mut c)?;
    parse_report(&text).map_err(|detail| PmError::Output {
        tool: format!("{python} -m pip install --dry-run --report -"),
        detail,
    })
}

fn parse_report(text: &str) -> Result<BTreeMap<String, Vec<String>>, String> {
    // pip may print notices before the document (indented JSON), which
    // starts at the first line that starts with `{`.
    let start = if text.starts_with('{') {
        Some(0)
    } else {
        text.find("\n{").map(|i| i + 1)
    };
    let json = start
        .map(|i| &text[i..])
        .ok_or_else(|| "no report on stdout".to_string())?;
    let report: Report = serde_json::from_str(json).map_err(|e| e.to_string())?;
    Ok(report
        .install
        .into_iter()
        .map(|i| {
            (
                super::pip::normalize_extra(&i.metadata.name),
                i.metadata
                    .provides_extra
                    .iter()
                    .map(|e| super::pip::normalize_extra(e))
                    .collect(),
            )
        })
        .collect())
}

/// `args` (pip install's, after `install`) with the local targets'
/// extras added to each requirement whose distribution declares them.
pub fn rewrite(
    args: &[String],
    declared: &BTreeMap<String, Vec<String>>,
    targets: &[TargetId],
) -> WrapPlan {
    let mut plan = WrapPlan {
        args: args.to_vec(),
        ..WrapPlan::default()
    };
    let wanted = device_targets(targets);
    for i in requirement_positions(args) {
        let req = &args[i];
        let Some(name) = requirement_name(req) else {
            if !Path::new(req).exists() {
                plan.warnings.push(format!(
                    "{req}: not a named requirement; no device extras added"
                ));
            }
            continue;
        };
        let Some(extras) = declared.get(&super::pip::normalize_extra(name)) else {
            continue;
        };
        if !extras.iter().any(|e| e.starts_with("device-")) {
            continue;
        }
        let mut add = Vec::new();
        for (dt, local) in &wanted {
            let extra = device_extra(dt);
            if extras.contains(&extra) {
                add.push(extra);
            } else {
                plan.warnings.push(format!(
                    "{name} publishes no device code for {} (it declares no extra {extra})",
                    local.join(", ")
                ));
            }
        }
        if add.is_empty() {
            continue;
        }
        let now = with_extras(req, name, &add);
        plan.rewritten.push(Rewritten {
            requirement: req.clone(),
            now: now.clone(),
            extras: add,
        });
        plan.args[i] = now;
    }
    plan
}

/// Path values and path requirements made absolute against `cwd`: pip
/// runs from `/` ([`crate::python::command`]), the user typed them
/// relative to where they are.
pub fn absolute_paths(args: &[String], cwd: &Path) -> Vec<String> {
    let abs = |v: &str| -> String {
        if v.contains("://") || Path::new(v).is_absolute() {
            return v.to_string();
        }
        cwd.join(v).display().to_string()
    };
    let mut out = Vec::with_capacity(args.len());
    let positions = requirement_positions(args);
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if PATH_OPTIONS.contains(&a.as_str()) && i + 1 < args.len() {
            out.push(a.clone());
            out.push(abs(&args[i + 1]));
            i += 2;
            continue;
        }
        if let Some((opt, value)) = a.split_once('=') {
            if a.starts_with("--") && PATH_OPTIONS.contains(&opt) {
                out.push(format!("{opt}={}", abs(value)));
                i += 1;
                continue;
            }
        }
        let is_path = positions.contains(&i)
            && requirement_name(a).is_none()
            && (a.starts_with('.') || a.contains('/') || cwd.join(a).exists());
        out.push(if is_path { abs(a) } else { a.clone() });
        i += 1;
    }
    out
}

/// The client that installs.
#[derive(Debug, Clone)]
pub enum Client {
    /// `python -I -m pip install`.
    Pip {
        /// The interpreter.
        python: String,
    },
    /// `uv pip install` (uv is not Python: it runs where the user is).
    Uv {
        /// The uv program.
        uv: String,
    },
}

impl Client {
    /// The command that installs `args`.
    pub fn command(&self, args: &[String]) -> std::process::Command {
        match self {
            Client::Pip { python } => {
                let mut c = crate::python::command(python);
                c.args(["-m", "pip", "install"]).args(args);
                c
            }
            Client::Uv { uv } => {
                let mut c = std::process::Command::new(uv);
                c.args(["pip", "install"]).args(args);
                c
            }
        }
    }

    /// Runs the install, output passed through.
    pub fn install(&self, args: &[String]) -> Result<(), PmError> {
        passthrough(&mut self.command(args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn requirements_are_the_positionals_that_are_not_option_values() {
        let args = s(&[
            "--index-url",
            "http://x/simple",
            "torch==2.9",
            "-r",
            "req.txt",
            "--upgrade",
            "--target=/t",
            "torchvision",
            "--",
            "-weird",
        ]);
        assert_eq!(requirement_positions(&args), [2, 7, 9]);
    }

    #[test]
    fn names_come_from_named_requirements_only() {
        assert_eq!(requirement_name("torch"), Some("torch"));
        assert_eq!(requirement_name("torch[cuda]>=2"), Some("torch"));
        assert_eq!(requirement_name("Torch_Vision == 1"), Some("Torch_Vision"));
        assert_eq!(requirement_name("torch @ https://h/t.whl"), Some("torch"));
        assert_eq!(requirement_name("./dist/torch-2.whl"), None);
        assert_eq!(requirement_name("torch-2-py3-none-any.whl"), None);
        assert_eq!(requirement_name("https://h/t.whl"), None);
        assert_eq!(requirement_name("/abs/dir"), None);
    }

    #[test]
    fn extras_are_added_once_inside_existing_brackets() {
        let add = s(&["device-gfx942"]);
        assert_eq!(with_extras("torch", "torch", &add), "torch[device-gfx942]");
        assert_eq!(
            with_extras("torch==2.9", "torch", &add),
            "torch[device-gfx942]==2.9"
        );
        assert_eq!(
            with_extras("torch[libraries]>=2", "torch", &add),
            "torch[libraries,device-gfx942]>=2"
        );
        assert_eq!(
            with_extras("torch[Device_GFX942]", "torch", &add),
            "torch[Device_GFX942]"
        );
    }

    #[test]
    fn rewrite_adds_the_local_extras_where_declared_and_warns_where_not() {
        let mut declared = BTreeMap::new();
        declared.insert(
            "torch".to_string(),
            s(&["device-all", "device-gfx942", "device-gfx90a"]),
        );
        declared.insert("numpy".to_string(), Vec::new());
        let targets = [
            TargetId::parse("gfx942:sramecc+:xnack-").unwrap_or_else(|e| panic!("{e}")),
            TargetId::parse("gfx1100").unwrap_or_else(|e| panic!("{e}")),
        ];
        let plan = rewrite(
            &s(&["-i", "http://x/", "torch==2.9", "numpy"]),
            &declared,
            &targets,
        );
        assert_eq!(
            plan.args,
            ["-i", "http://x/", "torch[device-gfx942]==2.9", "numpy"]
        );
        assert_eq!(
            plan.warnings,
            ["torch publishes no device code for gfx1100 (it declares no extra device-gfx1100)"]
        );
    }

    #[test]
    fn the_report_gives_names_and_extras_normalized() {
        let text = "notice\n{\n  \"version\": \"1\",\n  \"install\": [{\"metadata\": {\"name\": \"Torch\", \
                    \"provides_extra\": [\"device_gfx942\", \"device-all\"]}}]\n}\n";
        let got = parse_report(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got["torch"], ["device-gfx942", "device-all"]);
        assert!(parse_report("nothing").is_err());
    }

    #[test]
    fn the_query_keeps_requirements_and_index_options_only() {
        let got = query_args(&s(&[
            "--python",
            "/v/bin/python",
            "--index",
            "http://a/simple",
            "--default-index=http://b/simple",
            "--system",
            "-r",
            "req.txt",
            "torch",
            "./local",
            "--pre",
        ]));
        assert_eq!(
            got,
            [
                "--extra-index-url=http://a/simple",
                "--index-url=http://b/simple",
                "torch",
                "--pre"
            ]
        );
    }

    #[test]
    fn relative_paths_become_absolute() {
        let cwd = Path::new("/home/u/proj");
        let got = absolute_paths(
            &s(&[
                "-r",
                "req.txt",
                "--find-links=wheels",
                "./pkg",
                "torch",
                "https://h/x.whl",
            ]),
            cwd,
        );
        assert_eq!(
            got,
            [
                "-r",
                "/home/u/proj/req.txt",
                "--find-links=/home/u/proj/wheels",
                "/home/u/proj/./pkg",
                "torch",
                "https://h/x.whl"
            ]
        );
    }
}
