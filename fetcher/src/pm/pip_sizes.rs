//! What the plain command would also download, in bytes: the wheel each
//! left-out requirement ([`Plan::left_out`]) would bring, found the way
//! the client finds it, and sized without being fetched (`--dry-run`).
//!
//! - pip: pip's own finder, built from the user's options, pip's
//!   configuration files and `PIP_*` variables, and the options inside the
//!   user's requirements files, picks the wheel for this interpreter from
//!   the index pages; a `HEAD` through pip's own session (its
//!   credentials, certificates and proxies) gives its size.
//! - uv: `uv pip compile --no-deps --format=pylock.toml` with the user's
//!   options picks the version from the index pages and lists its wheels
//!   (with PEP 700 sizes where the index serves them); the one that fits
//!   this interpreter's tags is taken, and a `HEAD` sizes it when the
//!   index gave no size.
//!
//! Only index pages are read and only `HEAD` requests sent: no wheel or
//! metadata file of a left-out target is fetched. A size that cannot be
//! found is reported as unknown, never guessed.

use std::path::Path;

use rocm_kpack_pkgspec::pep508::{self, MarkerEnv, WheelFileName};
use serde::Deserialize;

use super::checked;
use super::pip_install::{Client, ClientKind, Plan, UserArgs, WrapError};

/// Finds the wheel pip would choose for each requirement and `HEAD`s it.
/// Arguments: pip options, `--`, requirements files, `--`, requirements.
/// pip's logging is not set up, so only errors reach stderr.
const PIP_FINDER_SCRIPT: &str = r#"
import json, sys
from pip._internal.commands import create_command
from pip._internal.req.req_file import parse_requirements
from pip._vendor.packaging.requirements import Requirement
args = sys.argv[1:]
a = args.index('--')
b = args.index('--', a + 1)
opts, files, reqs = args[:a], args[a + 1:b], args[b + 1:]
cmd = create_command('download')
options, _ = cmd.parse_args(opts + ['--only-binary=:all:'])
out = []
with cmd.main_context():
    session = cmd.get_default_session(options)
    finder = cmd._build_package_finder(options=options, session=session)
    for f in files:
        for _ in parse_requirements(f, session, finder=finder, options=options):
            pass
    for text in reqs:
        item = {'requirement': text}
        out.append(item)
        try:
            r = Requirement(text)
            best = finder.find_best_candidate(r.name, r.specifier).best_candidate
        except Exception as e:
            item['error'] = str(e)
            continue
        if best is None:
            item['error'] = 'no wheel for this interpreter on the indexes'
            continue
        item['url'] = best.link.url_without_fragment
        try:
            resp = session.head(item['url'], allow_redirects=True, timeout=options.timeout)
            if resp.ok and 'Content-Length' in resp.headers:
                item['bytes'] = int(resp.headers['Content-Length'])
        except Exception as e:
            item['error'] = str(e)
print(json.dumps(out))
"#;

/// `HEAD`s each URL given (stdlib only, run `-I -S`); prints their sizes.
const HEAD_SCRIPT: &str = r#"
import json, sys, urllib.request
out = []
for url in sys.argv[1:]:
    item = {'url': url}
    out.append(item)
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method='HEAD'), timeout=30) as r:
            n = r.headers.get('Content-Length')
            if n is not None:
                item['bytes'] = int(n)
    except Exception as e:
        item['error'] = str(e)
print(json.dumps(out))
"#;

/// One answer of either script.
#[derive(Debug, Deserialize)]
struct Found {
    #[serde(default)]
    requirement: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    bytes: Option<u64>,
    #[serde(default)]
    error: Option<String>,
}

/// The part of a PEP 751 lock file read here.
#[derive(Debug, Deserialize)]
struct Lock {
    #[serde(default)]
    packages: Vec<LockedPackage>,
}

#[derive(Debug, Deserialize)]
struct LockedPackage {
    name: String,
    #[serde(default)]
    wheels: Vec<LockedWheel>,
}

#[derive(Debug, Deserialize)]
struct LockedWheel {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    url: Option<String>,
    /// A local wheel, relative to the lock file or absolute.
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    size: Option<u64>,
}

/// Fills in [`crate::pm::pip_install::LeftOut::bytes`] and
/// [`Plan::left_out_bytes`]. `dir` is the resolution's scratch directory.
/// A failed lookup is a warning on the plan, not an error: the sizes only
/// inform.
pub fn size_left_out(client: &Client, user: &UserArgs, plan: &mut Plan, dir: &Path) {
    if plan.left_out.is_empty() {
        plan.left_out_bytes = Some(0);
        return;
    }
    let reqs: Vec<String> = plan
        .left_out
        .iter()
        .map(|l| l.requirement.clone())
        .collect();
    let sizes = match client.kind {
        ClientKind::Pip => pip_sizes(client, user, &reqs),
        ClientKind::Uv => uv_sizes(client, user, &reqs, dir),
    };
    let sizes = match sizes {
        Ok(s) => s,
        Err(e) => {
            plan.warnings.push(format!(
                "the sizes of the left-out wheels could not be looked up: {e}"
            ));
            vec![None; reqs.len()]
        }
    };
    let mut total = 0u64;
    for (l, size) in plan.left_out.iter_mut().zip(sizes) {
        l.bytes = size;
        total = total.saturating_add(size.unwrap_or(0));
    }
    plan.left_out_bytes = Some(total);
}

fn pip_sizes(
    client: &Client,
    user: &UserArgs,
    reqs: &[String],
) -> Result<Vec<Option<u64>>, WrapError> {
    let mut c = client.python.command();
    c.args(["-c", PIP_FINDER_SCRIPT])
        .args(&user.select)
        .arg("--")
        .args(&user.requirement_files)
        .arg("--")
        .args(reqs);
    let found = read_found(&checked(&mut c)?)?;
    Ok(reqs
        .iter()
        .map(|r| {
            found
                .iter()
                .find(|f| f.requirement.as_deref() == Some(r))
                .and_then(|f| {
                    if let Some(e) = &f.error {
                        tracing::info!("{r}: no size: {e}");
                    }
                    f.bytes
                })
        })
        .collect())
}

fn uv_sizes(
    client: &Client,
    user: &UserArgs,
    reqs: &[String],
    dir: &Path,
) -> Result<Vec<Option<u64>>, WrapError> {
    let reqfile = dir.join("left-out.txt");
    // uv insists on the name pylock.*.toml.
    let lockfile = dir.join("pylock.left-out.toml");
    let text: String = reqs.iter().map(|r| format!("{r}\n")).collect();
    rocm_kpack_fs::write_atomically(&reqfile, text.as_bytes(), None)?;
    let mut c = client.base();
    c.args([
        "compile",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--no-header",
        "--format=pylock.toml",
    ])
    .arg(client.python_arg())
    .arg(format!("--output-file={}", lockfile.display()))
    .args(&user.select);
    // compile reads its requirements files as operands, not `-r`.
    c.arg("--").args(&user.requirement_files).arg(&reqfile);
    checked(&mut c)?;
    let text = rocm_kpack_fs::read_limited(&lockfile, 16 << 20)?;
    let lock: Lock = toml::from_str(&String::from_utf8_lossy(&text))
        .map_err(|e| WrapError::Input(format!("uv's lock file: {e}")))?;
    let env = &client.python.env;
    // (size, url to HEAD) for each requirement.
    let mut picked: Vec<(Option<u64>, Option<String>)> = Vec::new();
    for r in reqs {
        // Our own rendering of a parsed requirement: it parses again.
        let key = pep508::Requirement::parse(r).ok().map(|r| r.key());
        let wheel = lock
            .packages
            .iter()
            .find(|p| key.as_deref() == Some(pep508::normalize(&p.name).as_str()))
            .and_then(|p| {
                p.wheels.iter().find(|w| {
                    let file = w.name.clone().or_else(|| {
                        w.url
                            .as_deref()
                            .or(w.path.as_deref())
                            .and_then(|u| u.rsplit('/').next())
                            .map(str::to_string)
                    });
                    file.is_some_and(|f| wheel_fits(&f, env))
                })
            });
        picked.push(match wheel {
            Some(w) if w.size.is_some() => (w.size, None),
            Some(LockedWheel {
                path: Some(p),
                url: None,
                ..
            }) => {
                let base = lockfile.parent().unwrap_or(dir);
                (std::fs::metadata(base.join(p)).ok().map(|m| m.len()), None)
            }
            Some(w) => (None, w.url.clone()),
            None => (None, None),
        });
    }
    let urls: Vec<String> = picked.iter().filter_map(|(_, u)| u.clone()).collect();
    let heads = if urls.is_empty() {
        Vec::new()
    } else {
        let mut c = client.python.command();
        c.args(["-S", "-c", HEAD_SCRIPT]).args(&urls);
        read_found(&checked(&mut c)?)?
    };
    Ok(picked
        .into_iter()
        .map(|(size, url)| {
            size.or_else(|| {
                let url = url?;
                heads
                    .iter()
                    .find(|h| h.url.as_deref() == Some(url.as_str()))
                    .and_then(|h| h.bytes)
            })
        })
        .collect())
}

fn read_found(text: &str) -> Result<Vec<Found>, WrapError> {
    serde_json::from_str(text.trim())
        .map_err(|e| WrapError::Input(format!("reading the size lookup's answer: {e}")))
}

/// Whether a wheel file name's tags (PEP 425) fit the interpreter whose
/// marker environment is `env`: a pure or stable-ABI wheel of its Python,
/// for any platform or its OS and machine. Narrower than the client's own
/// tag list (no glibc version check), which is enough to tell one
/// target's device wheel for Linux from the same version's others.
fn wheel_fits(file: &str, env: &MarkerEnv) -> bool {
    let Some(name) = WheelFileName::parse(file) else {
        return false;
    };
    let get = |k: &str| env.get(k).map(String::as_str).unwrap_or_default();
    let version = get("python_version").replace('.', "");
    let major = version.get(..1).unwrap_or("3");
    let minor: Option<u32> = version.get(1..).and_then(|m| m.parse().ok());
    let cpython = get("implementation_name") == "cpython";
    let machine = get("platform_machine");
    name.tags().iter().any(|tag| {
        let [py, abi, plat] = tag.split('-').collect::<Vec<_>>()[..] else {
            return false;
        };
        let stable_abi = cpython && abi == "abi3";
        // A stable-ABI wheel built for 3.N runs on every later 3.x.
        let py_ok = py == format!("py{major}")
            || py == format!("py{version}")
            || (cpython && py == format!("cp{version}"))
            || (stable_abi
                && py
                    .strip_prefix("cp3")
                    .and_then(|m| m.parse::<u32>().ok())
                    .zip(minor)
                    .is_some_and(|(m, ours)| m <= ours));
        let abi_ok =
            abi == "none" || abi == "abi3" || (cpython && abi.starts_with(&format!("cp{version}")));
        let plat_ok = plat == "any"
            || match get("sys_platform") {
                "linux" => {
                    (plat.starts_with("linux_")
                        || plat.starts_with("manylinux")
                        || plat.starts_with("musllinux"))
                        && plat.ends_with(&format!("_{machine}"))
                }
                "win32" => plat == format!("win_{}", machine.to_ascii_lowercase()),
                _ => false,
            };
        py_ok && abi_ok && plat_ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linux_311() -> MarkerEnv {
        [
            ("python_version", "3.11"),
            ("implementation_name", "cpython"),
            ("platform_machine", "x86_64"),
            ("sys_platform", "linux"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn wheels_fit_by_python_abi_and_platform() {
        let env = linux_311();
        for fits in [
            "rocm_sdk_device_gfx942-7.14-py3-none-linux_x86_64.whl",
            "x-1.0-py2.py3-none-any.whl",
            "torch-2.9-cp311-cp311-manylinux_2_28_x86_64.whl",
            "x-1.0-1build-cp39-abi3-manylinux2014_x86_64.whl",
        ] {
            assert!(wheel_fits(fits, &env), "{fits}");
        }
        for misfit in [
            "x-1.0-py3-none-win_amd64.whl",
            "x-1.0-py3-none-manylinux_2_28_aarch64.whl",
            "torch-2.9-cp312-cp312-manylinux_2_28_x86_64.whl",
            "x-1.0-py2-none-any.whl",
            "x-1.0.tar.gz",
            "x-any.whl",
        ] {
            assert!(!wheel_fits(misfit, &env), "{misfit}");
        }
    }
}
