//! `rocm-kpack-fetch pip install ...` / `uv pip install ...`: the
//! post-install hook pip does not have, done by resolving first.
//!
//! PyTorch's ROCm wheels require `rocm[libraries,device-all]`
//! unconditionally, so plain `pip install torch` downloads every target's
//! device wheels. The wrapper resolves the command as typed, one level at
//! a time, and never lets the client see a device distribution of a
//! target that is neither local nor named:
//!
//! 1. Each round asks the client to select and fetch, without their
//!    dependencies (`--no-deps`, `--only-binary=:all:`, so nothing is
//!    built or run), the requirements found so far, with the user's own
//!    index, find-links, constraint and requirement-file options, spelled
//!    as the client reads them ([`parse_args`]): pip's `download -d DIR`,
//!    uv's `pip install --target DIR`. Their METADATA says what they
//!    require.
//! 2. A distribution that declares `device-<target>` extras and is asked
//!    for by the user, or with any device extra (`device-all`, another
//!    target's `device-<t>`), gets the local targets' extras instead of
//!    those ([`Walk::active_extras`]). Markers are evaluated for every extra
//!    (PEP 508), with the interpreter's environment.
//! 3. What a requirement on a non-local device extra alone would bring is
//!    left out ([`Plan::left_out`]) and never fetched. A dry run reads its
//!    index page and sizes its wheel with a `HEAD`, to say what the plain
//!    command would download ([`super::pip_sizes`]).
//! 4. The result is installed exactly, without resolving again: pip from
//!    the fetched files (`--no-index --find-links DIR --require-hashes
//!    --no-deps`); uv the pinned set with `--no-deps` (uv's cache already
//!    holds the wheels).
//!
//! Every name, version and requirement read from an index passes the
//! PEP 503 / 440 / 508 grammars ([`rocm_kpack_pkgspec::pep508`]) and is
//! re-rendered before it reaches a command line, after `--`; a requirement
//! that names a URL is refused. Both clients run from `/` with an explicit
//! interpreter ([`crate::python::Interpreter::trusted`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_format::target::TargetId;
use rocm_kpack_pkgspec::amd::{device_extra, DEVICE_ALL_EXTRA, DEVICE_EXTRA_PREFIX};
use rocm_kpack_pkgspec::pep508::{self, Requirement, Specifiers, Version};
use serde::Serialize;

use super::pip::device_targets;
use super::{checked, describe, passthrough, PmError};
use crate::python::Interpreter;

/// Which client installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientKind {
    /// `python -I -m pip`.
    Pip,
    /// `uv pip`.
    Uv,
}

/// What an option of the user's does here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Changes what is selected: every round and the install.
    Select,
    /// A requirements file: the first round.
    Requirements,
    /// Only the install.
    Install,
    /// The interpreter (uv's `--python`).
    Python,
    /// `--no-deps`: no rounds after the first.
    NoDeps,
    /// `--dry-run`: ours.
    DryRun,
    /// Implied anyway (`--only-binary`, `--no-build`).
    Implied,
    /// Refused, with why.
    Refuse(&'static str),
}

/// One option: its spellings, whether it takes a value, whether that value
/// is a path (made absolute: both clients run from `/`), and its role.
struct Opt {
    long: &'static [&'static str],
    short: Option<char>,
    value: bool,
    path: bool,
    role: Role,
}

const fn opt(
    long: &'static [&'static str],
    short: Option<char>,
    value: bool,
    path: bool,
    role: Role,
) -> Opt {
    Opt {
        long,
        short,
        value,
        path,
        role,
    }
}

const BUILDS: Role = Role::Refuse("it builds from source; the wrapper installs wheels only");

/// Every option of `pip install` and pip's general options (pip 23 to
/// 25), because pip (optparse) accepts any unambiguous prefix of a long
/// option: `--index` and `--index-u` are `--index-url`.
const PIP_OPTIONS: &[Opt] = &[
    opt(
        &["--requirement"],
        Some('r'),
        true,
        true,
        Role::Requirements,
    ),
    opt(&["--constraint"], Some('c'), true, true, Role::Select),
    opt(&["--index-url"], Some('i'), true, false, Role::Select),
    opt(&["--extra-index-url"], None, true, false, Role::Select),
    opt(&["--no-index"], None, false, false, Role::Select),
    opt(&["--find-links"], Some('f'), true, true, Role::Select),
    opt(&["--pre"], None, false, false, Role::Select),
    opt(&["--prefer-binary"], None, false, false, Role::Select),
    opt(&["--platform"], None, true, false, Role::Select),
    opt(&["--python-version"], None, true, false, Role::Select),
    opt(&["--implementation"], None, true, false, Role::Select),
    opt(&["--abi"], None, true, false, Role::Select),
    opt(
        &["--ignore-requires-python"],
        None,
        false,
        false,
        Role::Select,
    ),
    opt(&["--require-hashes"], None, false, false, Role::Select),
    opt(&["--trusted-host"], None, true, false, Role::Select),
    opt(&["--cert"], None, true, true, Role::Select),
    opt(&["--client-cert"], None, true, true, Role::Select),
    opt(&["--proxy"], None, true, false, Role::Select),
    opt(&["--retries"], None, true, false, Role::Select),
    opt(&["--resume-retries"], None, true, false, Role::Select),
    opt(&["--timeout"], None, true, false, Role::Select),
    opt(&["--keyring-provider"], None, true, false, Role::Select),
    opt(&["--use-feature"], None, true, false, Role::Select),
    opt(&["--use-deprecated"], None, true, false, Role::Select),
    opt(&["--cache-dir"], None, true, true, Role::Select),
    opt(&["--no-cache-dir"], None, false, false, Role::Select),
    opt(&["--isolated"], None, false, false, Role::Select),
    opt(&["--no-input"], None, false, false, Role::Select),
    opt(
        &["--disable-pip-version-check"],
        None,
        false,
        false,
        Role::Select,
    ),
    opt(&["--no-color"], None, false, false, Role::Select),
    opt(
        &["--no-python-version-warning"],
        None,
        false,
        false,
        Role::Select,
    ),
    opt(&["--debug"], None, false, false, Role::Select),
    opt(&["--verbose"], Some('v'), false, false, Role::Select),
    opt(&["--quiet"], Some('q'), false, false, Role::Select),
    opt(&["--target"], Some('t'), true, true, Role::Install),
    opt(&["--root"], None, true, true, Role::Install),
    opt(&["--prefix"], None, true, true, Role::Install),
    opt(&["--src"], None, true, true, Role::Install),
    opt(&["--log"], None, true, true, Role::Install),
    opt(&["--user"], None, false, false, Role::Install),
    opt(&["--upgrade"], Some('U'), false, false, Role::Install),
    opt(&["--upgrade-strategy"], None, true, false, Role::Install),
    opt(&["--force-reinstall"], None, false, false, Role::Install),
    opt(
        &["--ignore-installed"],
        Some('I'),
        false,
        false,
        Role::Install,
    ),
    opt(&["--no-build-isolation"], None, false, false, Role::Install),
    opt(&["--use-pep517"], None, false, false, Role::Install),
    opt(&["--no-use-pep517"], None, false, false, Role::Install),
    opt(
        &["--check-build-dependencies"],
        None,
        false,
        false,
        Role::Install,
    ),
    opt(
        &["--break-system-packages"],
        None,
        false,
        false,
        Role::Install,
    ),
    opt(&["--compile"], None, false, false, Role::Install),
    opt(&["--no-compile"], None, false, false, Role::Install),
    opt(
        &["--no-warn-script-location"],
        None,
        false,
        false,
        Role::Install,
    ),
    opt(&["--no-warn-conflicts"], None, false, false, Role::Install),
    opt(&["--require-virtualenv"], None, false, false, Role::Install),
    opt(&["--progress-bar"], None, true, false, Role::Install),
    opt(&["--root-user-action"], None, true, false, Role::Install),
    opt(&["--exists-action"], None, true, false, Role::Install),
    opt(&["--no-deps"], None, false, false, Role::NoDeps),
    opt(&["--dry-run"], None, false, false, Role::DryRun),
    opt(&["--only-binary"], None, true, false, Role::Implied),
    opt(&["--editable"], Some('e'), true, true, BUILDS),
    opt(&["--no-binary"], None, true, false, BUILDS),
    opt(&["--config-settings"], Some('C'), true, false, BUILDS),
    opt(&["--global-option"], None, true, false, BUILDS),
    opt(
        &["--report"],
        None,
        true,
        false,
        Role::Refuse("the wrapper reports with --json"),
    ),
    opt(
        &["--python"],
        None,
        true,
        false,
        Role::Refuse("name the interpreter with rocm-kpack-fetch's --python (before `install`)"),
    ),
    opt(
        &["--group"],
        None,
        true,
        true,
        Role::Refuse("not supported by the wrapper"),
    ),
    opt(
        &["--help"],
        Some('h'),
        false,
        false,
        Role::Refuse("run pip install --help"),
    ),
    opt(
        &["--version"],
        Some('V'),
        false,
        false,
        Role::Refuse("run pip --version"),
    ),
];

/// The options of `uv pip install` (uv 0.9) the wrapper knows; uv (clap)
/// takes no abbreviations.
const UV_OPTIONS: &[Opt] = &[
    opt(
        &["--requirements", "--requirement"],
        Some('r'),
        true,
        true,
        Role::Requirements,
    ),
    opt(
        &["--constraints", "--constraint"],
        Some('c'),
        true,
        true,
        Role::Select,
    ),
    opt(
        &["--overrides", "--override"],
        None,
        true,
        true,
        Role::Select,
    ),
    opt(
        &["--build-constraints", "--build-constraint"],
        Some('b'),
        true,
        true,
        Role::Select,
    ),
    opt(&["--index"], None, true, false, Role::Select),
    opt(&["--default-index"], None, true, false, Role::Select),
    opt(&["--index-url"], Some('i'), true, false, Role::Select),
    opt(&["--extra-index-url"], None, true, false, Role::Select),
    opt(&["--find-links"], Some('f'), true, true, Role::Select),
    opt(&["--no-index"], None, false, false, Role::Select),
    opt(&["--index-strategy"], None, true, false, Role::Select),
    opt(&["--keyring-provider"], None, true, false, Role::Select),
    opt(&["--prerelease"], None, true, false, Role::Select),
    opt(&["--resolution"], None, true, false, Role::Select),
    opt(&["--fork-strategy"], None, true, false, Role::Select),
    opt(&["--exclude-newer"], None, true, false, Role::Select),
    opt(&["--python-version"], None, true, false, Role::Select),
    opt(&["--python-platform"], None, true, false, Role::Select),
    opt(
        &["--allow-insecure-host", "--trusted-host"],
        None,
        true,
        false,
        Role::Select,
    ),
    opt(&["--cache-dir"], None, true, true, Role::Select),
    opt(&["--no-cache"], Some('n'), false, false, Role::Select),
    opt(&["--offline"], None, false, false, Role::Select),
    opt(&["--native-tls"], None, false, false, Role::Select),
    opt(&["--no-config"], None, false, false, Role::Select),
    opt(&["--config-file"], None, true, true, Role::Select),
    opt(&["--refresh"], None, false, false, Role::Select),
    opt(&["--quiet"], Some('q'), false, false, Role::Select),
    opt(&["--verbose"], Some('v'), false, false, Role::Select),
    opt(&["--no-progress"], None, false, false, Role::Select),
    opt(&["--color"], None, true, false, Role::Select),
    opt(&["--python"], Some('p'), true, true, Role::Python),
    opt(&["--system"], None, false, false, Role::Install),
    opt(
        &["--break-system-packages"],
        None,
        false,
        false,
        Role::Install,
    ),
    opt(&["--target"], None, true, true, Role::Install),
    opt(&["--prefix"], None, true, true, Role::Install),
    opt(
        &["--reinstall", "--force-reinstall"],
        None,
        false,
        false,
        Role::Install,
    ),
    opt(&["--reinstall-package"], None, true, false, Role::Install),
    opt(&["--upgrade"], Some('U'), false, false, Role::Install),
    opt(
        &["--upgrade-package"],
        Some('P'),
        true,
        false,
        Role::Install,
    ),
    opt(&["--link-mode"], None, true, false, Role::Install),
    opt(
        &["--compile-bytecode", "--compile"],
        None,
        false,
        false,
        Role::Install,
    ),
    opt(&["--strict"], None, false, false, Role::Install),
    opt(&["--require-hashes"], None, false, false, Role::Install),
    opt(&["--verify-hashes"], None, false, false, Role::Install),
    opt(&["--no-verify-hashes"], None, false, false, Role::Install),
    opt(&["--no-deps"], None, false, false, Role::NoDeps),
    opt(&["--dry-run"], None, false, false, Role::DryRun),
    opt(&["--only-binary"], None, true, false, Role::Implied),
    opt(&["--no-build"], None, false, false, Role::Implied),
    opt(&["--editable"], Some('e'), true, true, BUILDS),
    opt(&["--no-binary"], None, true, false, BUILDS),
    opt(
        &["--config-setting", "--config-settings"],
        Some('C'),
        true,
        false,
        BUILDS,
    ),
    opt(
        &["--torch-backend"],
        None,
        true,
        false,
        Role::Refuse("it chooses PyTorch's index itself; give the index with --index"),
    ),
    opt(
        &["--help"],
        Some('h'),
        false,
        false,
        Role::Refuse("run uv pip install --help"),
    ),
];

/// What is wrong with the user's arguments or what an index served.
#[derive(Debug, thiserror::Error)]
pub enum WrapError {
    /// An option the wrapper does not know or refuses.
    #[error("{option}: {why}")]
    Option {
        /// The option as typed.
        option: String,
        /// Why.
        why: String,
    },
    /// A value read from an index or a wheel.
    #[error("{0}")]
    Input(String),
    /// Running the client.
    #[error(transparent)]
    Pm(#[from] PmError),
    /// A file of ours.
    #[error(transparent)]
    Io(#[from] rocm_kpack_fs::PathError),
}

/// The user's `install` arguments, sorted by what they do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UserArgs {
    /// Options that change what is selected, as `--long=value` or `--flag`.
    pub select: Vec<String>,
    /// Requirements files (`--requirement=PATH`).
    pub requirement_files: Vec<PathBuf>,
    /// Options only the install takes.
    pub install: Vec<String>,
    /// The requirements, as typed (paths made absolute).
    pub requirements: Vec<String>,
    /// uv's `--python`.
    pub python: Option<String>,
    /// `--no-deps`.
    pub no_deps: bool,
    /// `--dry-run`.
    pub dry_run: bool,
}

fn absolute(v: &str, cwd: &Path) -> String {
    if v.contains("://") || Path::new(v).is_absolute() {
        return v.to_string();
    }
    cwd.join(v).display().to_string()
}

/// Sorts `args` (everything after `install`) by role, with each option
/// spelled in full (`--index-url=URL`) as the client reads it: pip's
/// abbreviations expanded, `-iURL` split. An option the wrapper does not
/// know is refused rather than guessed at.
pub fn parse_args(kind: ClientKind, args: &[String], cwd: &Path) -> Result<UserArgs, WrapError> {
    let table = match kind {
        ClientKind::Pip => PIP_OPTIONS,
        ClientKind::Uv => UV_OPTIONS,
    };
    let mut out = UserArgs::default();
    let mut i = 0;
    let mut positional = false;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if positional || !a.starts_with('-') || a == "-" {
            out.requirements.push(requirement_arg(a, cwd));
            continue;
        }
        if a == "--" {
            positional = true;
            continue;
        }
        let (o, value) = if let Some(long) = a.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let o = find_long(kind, table, name).map_err(|why| WrapError::Option {
                option: a.clone(),
                why,
            })?;
            (o, inline)
        } else {
            // Short options; flags may be grouped (`-qU`), a value follows
            // its letter directly (`-iURL`) or as the next argument.
            let letters: Vec<char> = a[1..].chars().collect();
            let mut found = None;
            for (k, c) in letters.iter().enumerate() {
                let o = table.iter().find(|o| o.short == Some(*c)).ok_or_else(|| {
                    WrapError::Option {
                        option: a.clone(),
                        why: format!("-{c} is not an option the wrapper knows"),
                    }
                })?;
                if o.value {
                    let rest: String = letters[k + 1..].iter().collect();
                    let rest = rest.strip_prefix('=').map(str::to_string).unwrap_or(rest);
                    found = Some((o, (!rest.is_empty()).then_some(rest)));
                    break;
                }
                apply(&mut out, o, None, cwd, a)?;
            }
            match found {
                Some(f) => f,
                None => continue,
            }
        };
        let value = if o.value {
            match value {
                Some(v) => Some(v),
                None => {
                    let v = args.get(i).cloned().ok_or_else(|| WrapError::Option {
                        option: a.clone(),
                        why: "needs a value".into(),
                    })?;
                    i += 1;
                    Some(v)
                }
            }
        } else if value.is_some() {
            return Err(WrapError::Option {
                option: a.clone(),
                why: "takes no value".into(),
            });
        } else {
            None
        };
        apply(&mut out, o, value, cwd, a)?;
    }
    Ok(out)
}

fn find_long<'a>(kind: ClientKind, table: &'a [Opt], name: &str) -> Result<&'a Opt, String> {
    if let Some(o) = table
        .iter()
        .find(|o| o.long.iter().any(|l| l[2..] == *name))
    {
        return Ok(o);
    }
    if kind == ClientKind::Pip {
        let hits: Vec<&Opt> = table
            .iter()
            .filter(|o| o.long.iter().any(|l| l[2..].starts_with(name)))
            .collect();
        match hits.as_slice() {
            [one] => return Ok(one),
            [] => {}
            many => {
                let names: Vec<&str> = many.iter().map(|o| o.long[0]).collect();
                return Err(format!("ambiguous: {}", names.join(", ")));
            }
        }
    }
    Err("not an option the wrapper knows (it passes on only options whose meaning it knows)".into())
}

fn apply(
    out: &mut UserArgs,
    o: &Opt,
    value: Option<String>,
    cwd: &Path,
    typed: &str,
) -> Result<(), WrapError> {
    let value = value.map(|v| if o.path { absolute(&v, cwd) } else { v });
    let spelled = match &value {
        Some(v) => format!("{}={v}", o.long[0]),
        None => o.long[0].to_string(),
    };
    match o.role {
        Role::Select => out.select.push(spelled),
        Role::Install => out.install.push(spelled),
        Role::Requirements => out
            .requirement_files
            .push(PathBuf::from(value.unwrap_or_default())),
        Role::Python => out.python = value,
        Role::NoDeps => out.no_deps = true,
        Role::DryRun => out.dry_run = true,
        Role::Implied => {}
        Role::Refuse(why) => {
            return Err(WrapError::Option {
                option: typed.to_string(),
                why: why.to_string(),
            })
        }
    }
    Ok(())
}

/// A requirement argument, made absolute when it is a path.
fn requirement_arg(a: &str, cwd: &Path) -> String {
    let is_path = Requirement::parse(a).is_err()
        && (a.starts_with('.') || a.contains('/') || cwd.join(a).exists());
    if is_path {
        absolute(a, cwd)
    } else {
        a.to_string()
    }
}

/// One distribution of the result.
#[derive(Debug, Clone, Serialize)]
pub struct Chosen {
    /// PEP 503 name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Asked for by the user.
    pub requested: bool,
    /// The extras it is installed with.
    pub extras: Vec<String>,
    /// Bytes of its wheel (pip); of its files (uv).
    pub bytes: u64,
    /// The wheel's SHA-256 (pip).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The wheel file (pip) or its `.dist-info` (uv).
    #[serde(skip)]
    pub file: PathBuf,
    #[serde(skip)]
    requires: Vec<Requirement>,
    #[serde(skip)]
    declared: Vec<String>,
    #[serde(skip)]
    followed: bool,
}

/// A requirement left out: it applies only through a device extra of a
/// target that is neither local nor named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftOut {
    /// The distribution that requires it.
    pub by: String,
    /// Through which extras.
    pub extras: Vec<String>,
    /// The requirement (`rocm-sdk-device-gfx90a==7.14`).
    pub requirement: String,
    /// The size of the wheel the plain command would download for it, when
    /// looked up (`--dry-run`, [`super::pip_sizes`]) and found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// The result: what is installed, and what plain pip would have added.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Plan {
    /// Which client.
    pub client: Option<ClientKind>,
    /// The local targets' device extras (`device-gfx942`).
    pub local_extras: Vec<String>,
    /// The distributions to install, in the order found.
    pub install: Vec<Chosen>,
    /// Bytes the install downloads (pip: the wheels; uv: their files).
    pub bytes: u64,
    /// What the plain command would also install: requirements through
    /// device extras of other targets, never fetched here.
    pub left_out: Vec<LeftOut>,
    /// The known sizes of the left-out wheels, added up, when looked up
    /// (`--dry-run`): what the plain command would download beyond
    /// [`Plan::bytes`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_out_bytes: Option<u64>,
    /// Things the user should know.
    pub warnings: Vec<String>,
}

/// How the client is run.
#[derive(Debug, Clone)]
pub struct Client {
    /// pip or uv.
    pub kind: ClientKind,
    /// The interpreter installed into (checked).
    pub python: Interpreter,
    /// The uv program.
    pub uv: String,
    /// The client prints only errors (`-q`, as the wrapper was asked).
    pub quiet: bool,
}

impl Client {
    pub(super) fn base(&self) -> Command {
        let mut c = match self.kind {
            ClientKind::Pip => {
                let mut c = self.python.command();
                c.args(["-m", "pip"]);
                c
            }
            ClientKind::Uv => {
                let mut c = Command::new(&self.uv);
                // uv is not Python, but runs the project's interpreter it
                // finds from its working directory unless told which.
                c.current_dir("/").arg("pip");
                c
            }
        };
        if self.quiet {
            c.arg("-q");
        }
        c
    }

    pub(super) fn python_arg(&self) -> String {
        format!(
            "--python={}",
            self.python.command().get_program().to_string_lossy()
        )
    }
}

/// The resolution, one level at a time.
struct Walk<'a> {
    client: &'a Client,
    user: &'a UserArgs,
    local: Vec<String>,
    dir: PathBuf,
    chosen: Vec<Chosen>,
    /// Requirements on each name seen so far (specifier texts).
    wanted: BTreeMap<String, Vec<Specifiers>>,
    /// Extras asked of each name.
    asked: BTreeMap<String, Vec<String>>,
    left_out: Vec<LeftOut>,
    warnings: Vec<String>,
}

/// Largest METADATA read from a wheel.
const MAX_METADATA: u64 = 4 << 20;

/// Reads the METADATA of each wheel (a path ending in `.whl`) or
/// `.dist-info` directory given, printed as JSON; run `-I -S`: no site,
/// nothing from the wheels runs.
const METADATA_SCRIPT: &str = r#"
import json, os, sys, zipfile
LIMIT = int(sys.argv[1])
out = []
for p in sys.argv[2:]:
    if p.endswith('.whl'):
        with zipfile.ZipFile(p) as z:
            names = [n for n in z.namelist() if n.count('/') == 1 and n.endswith('.dist-info/METADATA')]
            if len(names) != 1:
                out.append({'path': p, 'error': 'no single .dist-info/METADATA'})
                continue
            info = z.getinfo(names[0])
            if info.file_size > LIMIT:
                out.append({'path': p, 'error': 'METADATA too large'})
                continue
            text = z.read(names[0])
    else:
        with open(os.path.join(p, 'METADATA'), 'rb') as fh:
            text = fh.read(LIMIT + 1)
    out.append({'path': p, 'text': text.decode('utf-8', 'replace')})
print(json.dumps(out))
"#;

#[derive(Debug, serde::Deserialize)]
struct MetadataText {
    path: PathBuf,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// The headers of a METADATA file that matter here.
#[derive(Debug, Default)]
struct Metadata {
    name: String,
    version: String,
    requires: Vec<String>,
    extras: Vec<String>,
}

fn parse_metadata(text: &str) -> Metadata {
    let mut m = Metadata::default();
    for line in text.lines() {
        if line.is_empty() {
            break;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().to_string();
        match key.to_ascii_lowercase().as_str() {
            "name" => m.name = value,
            "version" => m.version = value,
            "requires-dist" => m.requires.push(value),
            "provides-extra" => m.extras.push(pep508::normalize(&value)),
            _ => {}
        }
    }
    m
}

impl Walk<'_> {
    /// The extras `name` is installed with: those asked for, with every
    /// device extra (`device-all`, another target's) replaced by the local
    /// targets' that it declares; the user's own requirements get the local
    /// ones whether or not they asked for a device extra.
    fn active_extras(&self, name: &str, declared: &[String], requested: bool) -> Vec<String> {
        let asked = self.asked.get(name).cloned().unwrap_or_default();
        let any_device = asked.iter().any(|e| e.starts_with(DEVICE_EXTRA_PREFIX));
        let mut out: Vec<String> = asked
            .into_iter()
            .filter(|e| !e.starts_with(DEVICE_EXTRA_PREFIX) && declared.contains(e))
            .collect();
        if any_device || requested {
            for e in &self.local {
                if declared.contains(e) && !out.contains(e) {
                    out.push(e.clone());
                }
            }
        }
        out
    }

    /// One round: the client selects and fetches `reqs` (and, first, the
    /// user's own), without dependencies; returns what it fetched.
    fn round(
        &mut self,
        reqs: &[String],
        first: bool,
    ) -> Result<Vec<(PathBuf, Metadata)>, WrapError> {
        let n = self.chosen.len();
        let round_dir = self.dir.join(format!("round-{n}"));
        let mut c = self.client.base();
        let reqfile = self.dir.join(format!("round-{n}.txt"));
        let text: String = reqs.iter().map(|r| format!("{r}\n")).collect();
        rocm_kpack_fs::write_atomically(&reqfile, text.as_bytes(), None)?;
        match self.client.kind {
            ClientKind::Pip => {
                c.args([
                    "download",
                    "--disable-pip-version-check",
                    "--no-deps",
                    "--only-binary=:all:",
                    "--progress-bar=off",
                ])
                .arg(format!("--dest={}", self.dir.join("wheels").display()));
            }
            ClientKind::Uv => {
                c.args(["install", "--no-deps", "--only-binary=:all:"])
                    .arg(self.client.python_arg())
                    .arg(format!("--target={}", round_dir.display()));
            }
        }
        c.args(&self.user.select);
        if first {
            for f in &self.user.requirement_files {
                c.arg("-r").arg(f);
            }
        }
        c.arg("-r").arg(&reqfile);
        if first {
            c.arg("--").args(&self.user.requirements);
        }
        c.stdout(std::process::Stdio::from(std::io::stderr()));
        tracing::info!("resolving: {}", describe(&c));
        passthrough(&mut c)?;
        let found: Vec<PathBuf> = match self.client.kind {
            ClientKind::Pip => list_dir(&self.dir.join("wheels"), ".whl")?
                .into_iter()
                .filter(|p| !self.chosen.iter().any(|ch| ch.file == *p))
                .collect(),
            ClientKind::Uv => list_dir(&round_dir, ".dist-info")?,
        };
        self.read_metadata(&found)
    }

    fn read_metadata(&self, paths: &[PathBuf]) -> Result<Vec<(PathBuf, Metadata)>, WrapError> {
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let mut c = self.client.python.command();
        c.args(["-S", "-c", METADATA_SCRIPT])
            .arg(MAX_METADATA.to_string())
            .args(paths);
        let text = checked(&mut c)?;
        let items: Vec<MetadataText> = serde_json::from_str(text.trim())
            .map_err(|e| WrapError::Input(format!("reading wheel metadata: {e}")))?;
        let mut out = Vec::new();
        for i in items {
            match (i.text, i.error) {
                (Some(t), _) => out.push((i.path, parse_metadata(&t))),
                (None, e) => {
                    return Err(WrapError::Input(format!(
                        "{}: {}",
                        i.path.display(),
                        e.unwrap_or_default()
                    )))
                }
            }
        }
        Ok(out)
    }

    /// Takes in what a round fetched: checks names and versions, records
    /// it, and returns the requirements of the next round.
    fn take(
        &mut self,
        fetched: Vec<(PathBuf, Metadata)>,
        first: bool,
    ) -> Result<Vec<String>, WrapError> {
        let mut next: Vec<String> = Vec::new();
        for (path, m) in fetched {
            pep508::check_name(&m.name)
                .map_err(|e| WrapError::Input(format!("{}: {e}", path.display())))?;
            let version = Version::parse(&m.version)
                .map_err(|e| WrapError::Input(format!("{}: {e}", path.display())))?;
            let name = pep508::normalize(&m.name);
            if let Some(other) = self.chosen.iter().find(|c| c.name == name) {
                return Err(WrapError::Input(format!(
                    "{name}: the client chose {} and {}; the requirements conflict",
                    other.version, m.version
                )));
            }
            for spec in self.wanted.get(&name).into_iter().flatten() {
                if !spec.contains(&version) {
                    return Err(WrapError::Input(format!(
                        "{name} {}: does not satisfy {spec}, which another requirement asks for",
                        m.version
                    )));
                }
            }
            let requested = first && !self.wanted.contains_key(&name);
            let mut requires = Vec::new();
            for text in &m.requires {
                let r = Requirement::parse(text)
                    .map_err(|e| WrapError::Input(format!("{name} {}: {e}", m.version)))?;
                if r.url.is_some() {
                    return Err(WrapError::Input(format!(
                        "{name} {}: requirement {} names a URL; the wrapper follows only index requirements",
                        m.version,
                        rocm_kpack_format::layout::names::shown(text)
                    )));
                }
                requires.push(r);
            }
            let (bytes, sha256) = match self.client.kind {
                ClientKind::Pip => {
                    let (size, sha) = rocm_kpack_fs::sha256_file(&path)?;
                    (size, Some(hex::encode(sha)))
                }
                ClientKind::Uv => (record_bytes(&path), None),
            };
            self.chosen.push(Chosen {
                name,
                version: m.version,
                requested,
                extras: Vec::new(),
                bytes,
                sha256,
                file: path,
                requires,
                declared: m.extras,
                followed: false,
            });
        }
        if self.user.no_deps {
            return Ok(next);
        }
        // Extras of each chosen distribution, then its requirements, until
        // no distribution's extras change (a later requirer may ask one
        // already chosen for another extra).
        let env = self.client.python.env.clone();
        loop {
            let mut changed = false;
            for k in 0..self.chosen.len() {
                let (name, declared, requested) = {
                    let c = &self.chosen[k];
                    (c.name.clone(), c.declared.clone(), c.requested)
                };
                let active = self.active_extras(&name, &declared, requested);
                if self.chosen[k].followed && self.chosen[k].extras == active {
                    continue;
                }
                changed = true;
                self.chosen[k].followed = true;
                self.chosen[k].extras = active.clone();
                let mut asked_all = self.asked.get(&name).cloned().unwrap_or_default();
                asked_all.retain(|e| declared.contains(e));
                for r in self.chosen[k].requires.clone() {
                    if r.key() == name {
                        continue;
                    }
                    if r.applies(&env, &active) {
                        self.want(&r, &mut next);
                    } else if r.applies(&env, &asked_all) {
                        let via: Vec<String> = r
                            .extras_requiring(&env, &declared)
                            .into_iter()
                            .filter(|e| asked_all.contains(e))
                            .collect();
                        let left = LeftOut {
                            by: name.clone(),
                            extras: via,
                            requirement: r.render(&[]),
                            bytes: None,
                        };
                        if !self.left_out.contains(&left) {
                            self.left_out.push(left);
                        }
                    }
                }
            }
            if !changed {
                break;
            }
        }
        Ok(next)
    }

    fn want(&mut self, r: &Requirement, next: &mut Vec<String>) {
        let key = r.key();
        let asked = self.asked.entry(key.clone()).or_default();
        for e in &r.extras {
            if !asked.contains(e) {
                asked.push(e.clone());
            }
        }
        let specs = self.wanted.entry(key.clone()).or_default();
        if !specs.contains(&r.specifiers) {
            specs.push(r.specifiers.clone());
        }
        if !self.chosen.iter().any(|c| c.name == key) {
            let line = r.render(&[]);
            if !next.contains(&line) {
                next.push(line);
            }
        }
    }
}

fn list_dir(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>, WrapError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(rocm_kpack_fs::PathError::new("cannot list", dir, e).into()),
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    out.sort();
    Ok(out)
}

/// Bytes of the files a `.dist-info`'s RECORD lists (uv's `--target`).
fn record_bytes(dist_info: &Path) -> u64 {
    let Ok(bytes) = rocm_kpack_fs::read_limited(&dist_info.join("RECORD"), 64 << 20) else {
        return 0;
    };
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| l.rsplit(',').next())
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .sum()
}

/// Resolves the user's command as the wrapper installs it (module docs);
/// fetches into `dir` (the caller's temporary directory), installs nothing.
pub fn resolve(
    client: &Client,
    user: &UserArgs,
    targets: &[TargetId],
    dir: &Path,
) -> Result<Plan, WrapError> {
    let local: Vec<String> = device_targets(targets)
        .into_iter()
        .map(|(dt, _)| device_extra(&dt))
        .collect();
    let mut walk = Walk {
        client,
        user,
        local: local.clone(),
        dir: dir.to_path_buf(),
        chosen: Vec::new(),
        wanted: BTreeMap::new(),
        asked: BTreeMap::new(),
        left_out: Vec::new(),
        warnings: Vec::new(),
    };
    // The user's requirements' own extras (typed, or in their files).
    let mut typed: Vec<String> = user.requirements.clone();
    for f in &user.requirement_files {
        if let Ok(bytes) = rocm_kpack_fs::read_limited_following(f, 16 << 20) {
            typed.extend(
                String::from_utf8_lossy(&bytes)
                    .lines()
                    .map(|l| l.split(" #").next().unwrap_or_default().trim().to_string()),
            );
        }
    }
    for t in &typed {
        if let Ok(r) = Requirement::parse(t) {
            walk.asked
                .entry(r.key())
                .or_default()
                .extend(r.extras.clone());
        }
    }
    let fetched = walk.round(&[], true)?;
    let mut next = walk.take(fetched, true)?;
    let mut rounds = 1;
    while !next.is_empty() {
        rounds += 1;
        if rounds > 64 {
            return Err(WrapError::Input(
                "more than 64 levels of requirements".into(),
            ));
        }
        let fetched = walk.round(&next, false)?;
        if fetched.is_empty() {
            return Err(WrapError::Input(format!(
                "the client fetched nothing for {}",
                next.join(" ")
            )));
        }
        next = walk.take(fetched, false)?;
    }
    for c in &walk.chosen {
        let declares_device = c
            .declared
            .iter()
            .any(|e| e.starts_with(DEVICE_EXTRA_PREFIX) && e != DEVICE_ALL_EXTRA);
        if c.requested && declares_device {
            for (dt, ts) in device_targets(targets) {
                let e = device_extra(&dt);
                if !c.declared.contains(&e) {
                    walk.warnings.push(format!(
                        "{} publishes no device code for {} (it declares no extra {e})",
                        c.name,
                        ts.join(", ")
                    ));
                }
            }
        }
    }
    // A requirement left out through one extra may be installed through
    // another (`device-all` and `device-gfx942` both name gfx942's wheel).
    let chosen: Vec<String> = walk.chosen.iter().map(|c| c.name.clone()).collect();
    walk.left_out.retain(|l| {
        Requirement::parse(&l.requirement).map_or(true, |r| !chosen.contains(&r.key()))
    });
    let bytes = walk.chosen.iter().map(|c| c.bytes).sum();
    Ok(Plan {
        client: Some(client.kind),
        local_extras: local,
        install: walk.chosen,
        bytes,
        left_out: walk.left_out,
        left_out_bytes: None,
        warnings: walk.warnings,
    })
}

/// The command that installs `plan` exactly (module docs, step 4);
/// writes its pinned requirements file into `dir`.
pub fn install_command(
    client: &Client,
    user: &UserArgs,
    plan: &Plan,
    dir: &Path,
) -> Result<Command, WrapError> {
    let pinned = dir.join("pinned.txt");
    let text: String = plan
        .install
        .iter()
        .map(|c| match &c.sha256 {
            Some(h) => format!("{}=={} --hash=sha256:{h}\n", c.name, c.version),
            None => format!("{}=={}\n", c.name, c.version),
        })
        .collect();
    rocm_kpack_fs::write_atomically(&pinned, text.as_bytes(), None)?;
    let mut c = client.base();
    match client.kind {
        ClientKind::Pip => {
            c.args([
                "install",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-index",
                "--only-binary=:all:",
                "--require-hashes",
            ])
            .arg(format!("--find-links={}", dir.join("wheels").display()));
            c.args(user.select.iter().filter(|o| !is_index_option(o)));
        }
        ClientKind::Uv => {
            c.args(["install", "--no-deps", "--only-binary=:all:"])
                .arg(client.python_arg())
                .args(&user.select);
        }
    }
    c.args(&user.install).arg("-r").arg(&pinned);
    Ok(c)
}

fn is_index_option(o: &str) -> bool {
    [
        "--index-url",
        "--extra-index-url",
        "--find-links",
        "--no-index",
        "--constraint",
        "--require-hashes",
    ]
    .iter()
    .any(|p| o == *p || o.starts_with(&format!("{p}=")))
}

/// After pip installed the pinned set, every distribution has pip's
/// `REQUESTED` marker (each was on its command line); the ones the user
/// did not ask for lose it again, so `prune` may later remove a device
/// distribution the user never named (PEP 376: `REQUESTED` means asked
/// for by name). Only in the interpreter's own site-packages.
pub fn unmark_dependencies(client: &Client, user: &UserArgs, plan: &Plan) -> Vec<String> {
    let mut notes = Vec::new();
    if client.kind != ClientKind::Pip
        || user.install.iter().any(|o| {
            ["--target", "--prefix", "--root", "--user"]
                .iter()
                .any(|p| o == *p || o.starts_with(&format!("{p}=")))
        })
    {
        return notes;
    }
    for c in plan.install.iter().filter(|c| !c.requested) {
        let Some(stem) = c
            .file
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split('-').take(2).collect::<Vec<_>>().join("-").into())
        else {
            continue;
        };
        for site in &client.python.sites {
            let marker = site.join(format!("{stem}.dist-info")).join("REQUESTED");
            match std::fs::remove_file(&marker) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => notes.push(format!("{}: {e}", marker.display())),
            }
        }
    }
    notes
}

/// Runs a command with its output passed through.
pub fn run(mut c: Command) -> Result<(), PmError> {
    c.stdout(std::process::Stdio::from(std::io::stderr()));
    passthrough(&mut c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn pip_reads_abbreviations_and_attached_values_as_pip_does() {
        let cwd = Path::new("/home/u/proj");
        let got = parse_args(
            ClientKind::Pip,
            &s(&[
                "--index-u",
                "http://a/simple",
                "-ihttp://b/simple",
                "--index=http://c/",
                "-qU",
                "-r",
                "req.txt",
                "torch",
                "--",
                "-weird",
            ]),
            cwd,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            got.select,
            [
                "--index-url=http://a/simple",
                "--index-url=http://b/simple",
                "--index-url=http://c/",
                "--quiet"
            ]
        );
        assert_eq!(got.install, ["--upgrade"]);
        assert_eq!(
            got.requirement_files,
            [PathBuf::from("/home/u/proj/req.txt")]
        );
        assert_eq!(got.requirements, ["torch", "-weird"]);
        let err = parse_args(ClientKind::Pip, &s(&["--no-b", "x"]), cwd).expect_err("ambiguous");
        assert!(err.to_string().contains("ambiguous"), "{err}");
        for refused in [&["-e", "."][..], &["--no-binary=:all:"], &["--frobnicate"]] {
            assert!(
                parse_args(ClientKind::Pip, &s(refused), cwd).is_err(),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn uv_options_keep_their_own_meaning() {
        let cwd = Path::new("/w");
        let got = parse_args(
            ClientKind::Uv,
            &s(&[
                "--python",
                "v/bin/python",
                "--index",
                "http://a/",
                "--default-index=http://b/",
                "--system",
                "-c",
                "c.txt",
                "torch",
            ]),
            cwd,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.python.as_deref(), Some("/w/v/bin/python"));
        assert_eq!(
            got.select,
            [
                "--index=http://a/",
                "--default-index=http://b/",
                "--constraints=/w/c.txt"
            ]
        );
        assert_eq!(got.install, ["--system"]);
        // uv takes no abbreviations.
        assert!(parse_args(ClientKind::Uv, &s(&["--ind", "http://a/"]), cwd).is_err());
    }

    #[test]
    fn metadata_headers_are_read_until_the_body() {
        let m = parse_metadata(
            "Metadata-Version: 2.1\nName: Torch\nVersion: 7.14\nProvides-Extra: Device_GFX942\nRequires-Dist: rocm[device-all]==7.14\n\nRequires-Dist: body\n",
        );
        assert_eq!(m.name, "Torch");
        assert_eq!(m.extras, ["device-gfx942"]);
        assert_eq!(m.requires, ["rocm[device-all]==7.14"]);
    }
}
