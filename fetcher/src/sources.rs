//! Where archives come from, and in what order they are tried.
//!
//! Sources, in order (first that has the file wins; a 404 moves on):
//! 1. `--source URL` options, in the order given; or only `--offline DIR`
//!    (then nothing else, no network);
//! 2. `/etc/rocm-kpack/sources.d/*.toml` (below `--root`), files in name
//!    order, entries in file order: the administrator's choice;
//! 3. files shipped by generic packages next to their manifest:
//!    `<prefix>/.kpack/<component>.sources.toml`, applying to that
//!    component only.
//!
//! Both files use the same schema:
//!
//! ```toml
//! [[source]]
//! url = "https://repo.example.com/rocm/kpack/"   # https, file://, or http with --allow-http
//! components = ["rocrand", "rocsparse"]          # optional: only for these
//! ```
//!
//! Layout of a source (the kpack store that `publish` writes): an archive
//! is looked up first by content, `<url>/by-hash/sha256/<hex>` (immutable,
//! cache-friendly, and immune to two versions sharing a file name), then by
//! name, `<url>/<filename>` (a plain directory of archives, as a mirror made
//! with `cp` or an `--offline` directory has). The store's `index.json` is
//! not needed here: the installed manifest already gives name, size and hash.

use std::fs;
use std::path::{Path, PathBuf};

use reqwest::Url;

use crate::client::{masked, scheme_allowed};

use crate::config::{SourcesFile, SOURCES_EXT};
use rocm_kpack_format::layout::fetch::{component_sources_file_name, SOURCES_D};
use rocm_kpack_format::layout::store;

/// One configured source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Base URL (always ends in `/`).
    pub url: Url,
    /// Only for these components (`None`: all).
    pub components: Option<Vec<String>>,
    /// Where it was configured (`--source`, a file path).
    pub origin: String,
}

impl Source {
    /// Whether this source serves `component`.
    pub fn serves(&self, component: &str) -> bool {
        self.components
            .as_ref()
            .is_none_or(|c| c.iter().any(|x| x == component))
    }

    /// The URL of the store object at `rel` (a database file's encoded
    /// object, an archive's transport form: only stores have them).
    fn object_url(&self, rel: &str) -> Option<Url> {
        join_below(&self.url, rel)
            .map_err(|e| tracing::warn!("{}: {e}", self.origin))
            .ok()
    }

    /// Candidate URLs for an archive: by hash, then by name. A name that
    /// cannot be joined below the source (see [`join_below`]) is skipped
    /// with a warning in the log; manifests already refuse such names.
    pub fn urls_for(&self, filename: &str, sha256: &[u8; 32]) -> Vec<Url> {
        let by_hash = store::by_hash_path(sha256);
        [by_hash.as_str(), filename]
            .iter()
            .filter_map(|rel| match join_below(&self.url, rel) {
                Ok(url) => Some(url),
                Err(e) => {
                    tracing::warn!("{}: {e}", self.origin);
                    None
                }
            })
            .collect()
    }
}

/// A relative path that may not be joined onto a source URL.
#[derive(Debug, thiserror::Error)]
#[error("refusing to join {rel} onto {base}: {reason}")]
pub struct JoinError {
    /// The masked base URL.
    pub base: String,
    /// The path, escaped.
    pub rel: String,
    /// Why.
    pub reason: &'static str,
}

/// `base` with the `/`-separated `rel` appended as path segments, which can
/// only name something below `base`: each segment must be a plain name (no
/// empty, `.` or `..` segment, no `%`, `\`, control characters), each is
/// percent-encoded as a segment (never parsed as a URL, so `http:host` or
/// `//host/x` stay names), and the result must keep `base`'s scheme, host,
/// port and path prefix. Query and fragment of `base` are dropped, as
/// `Url::join` does.
pub fn join_below(base: &Url, rel: &str) -> Result<Url, JoinError> {
    let refuse = |reason| JoinError {
        base: masked(base),
        rel: rocm_kpack_format::layout::names::shown(rel),
        reason,
    };
    for seg in rel.split('/') {
        if seg.is_empty() || seg == "." || seg == ".." {
            return Err(refuse("empty, `.` or `..` segment"));
        }
        if seg.contains(['%', '\\']) || seg.chars().any(char::is_control) {
            return Err(refuse("`%`, `\\` or a control character in a segment"));
        }
    }
    let mut url = base.clone();
    url.set_query(None);
    url.set_fragment(None);
    url.path_segments_mut()
        .map_err(|()| refuse("the base URL cannot have a path"))?
        .pop_if_empty()
        .extend(rel.split('/'));
    let same_origin = url.scheme() == base.scheme()
        && url.host() == base.host()
        && url.port_or_known_default() == base.port_or_known_default()
        && url.username() == base.username()
        && url.password() == base.password();
    let base_path = base.path();
    let below = url.path().len() > base_path.len()
        && url.path().starts_with(base_path)
        && (base_path.ends_with('/') || url.path().as_bytes().get(base_path.len()) == Some(&b'/'));
    if !same_origin || !below {
        return Err(refuse("the result is not below the source"));
    }
    Ok(url)
}

/// A sources problem.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A URL that cannot be parsed.
    #[error("{origin}: bad source URL {url:?}: {detail}")]
    BadUrl {
        /// Where it was configured.
        origin: String,
        /// The text given (credentials masked).
        url: String,
        /// Parser message.
        detail: String,
    },
    /// A scheme that is not allowed (http without --allow-http, ftp, ...).
    #[error("{origin}: refusing source {url}: only https:// and file:// sources are allowed (http:// needs --allow-http)")]
    Scheme {
        /// Where it was configured.
        origin: String,
        /// Masked URL.
        url: String,
    },
    /// A sources file that cannot be read or parsed.
    #[error("{}: {detail}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

/// Parses a source URL; a directory path or `file:` URL becomes a `file://`
/// URL, and the base always ends in `/` so that joining keeps its path.
pub fn parse_source_url(text: &str, origin: &str, allow_http: bool) -> Result<Url, SourceError> {
    let bad = |detail: String| SourceError::BadUrl {
        origin: origin.to_string(),
        url: crate::client::masked_text(text),
        detail,
    };
    let directory = |path: &std::path::Path| {
        Url::from_directory_path(path).map_err(|()| bad("not a usable directory path".into()))
    };
    let mut url = if text.starts_with('/') {
        directory(std::path::Path::new(text))?
    } else {
        match Url::parse(text) {
            Ok(url) => url,
            // `mirror/` or `./kpack`: a directory relative to the current
            // one, as a user typing a path means.
            Err(url::ParseError::RelativeUrlWithoutBase) => {
                let cwd = std::env::current_dir().map_err(|e| {
                    bad(format!(
                        "relative path, and the current directory is unknown: {e}"
                    ))
                })?;
                directory(&cwd.join(text))?
            }
            Err(e) => return Err(bad(e.to_string())),
        }
    };
    if !scheme_allowed(&url, allow_http) {
        return Err(SourceError::Scheme {
            origin: origin.to_string(),
            url: masked(&url),
        });
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

/// The ordered source list.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Sources in the order they are tried.
    pub list: Vec<Source>,
    /// Configured sources that were skipped, one sentence each.
    pub warnings: Vec<String>,
}

impl Sources {
    /// Builds the list. `cli` are `--source` values (errors are fatal:
    /// the user typed them); `offline` replaces everything; bad entries in
    /// files are skipped with a warning so one broken file does not stop
    /// every install. `kpack_dirs` and `components` locate package-shipped
    /// files.
    pub fn load(
        cli: &[String],
        offline: Option<&Path>,
        root: &Path,
        package_files: &[(PathBuf, String)],
        allow_http: bool,
    ) -> Result<Sources, SourceError> {
        let mut out = Sources::default();
        if let Some(dir) = offline {
            let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
            let url = Url::from_directory_path(&abs).map_err(|()| SourceError::BadUrl {
                origin: "--offline".into(),
                url: dir.display().to_string(),
                detail: "not a directory path".into(),
            })?;
            out.list.push(Source {
                url,
                components: None,
                origin: "--offline".into(),
            });
            return Ok(out);
        }
        for text in cli {
            out.list.push(Source {
                url: parse_source_url(text, "--source", allow_http)?,
                components: None,
                origin: "--source".into(),
            });
        }
        let dir = root.join(SOURCES_D);
        let mut files: Vec<PathBuf> = fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == SOURCES_EXT))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        for file in files {
            out.add_file(&file, None, allow_http);
        }
        for (file, component) in package_files {
            out.add_file(file, Some(component), allow_http);
        }
        Ok(out)
    }

    /// The configured sources alone (`sources.d` below `root`, the files
    /// packages ship beside these manifests), read as `install` without
    /// `--source`, `--offline` or `--allow-http` reads them: for `status`
    /// and `doctor`, which fetch nothing but say what `install` would skip.
    pub fn configured(root: &Path, manifests: &[crate::resolve::InstalledManifest]) -> Sources {
        // Without command-line sources nothing here can fail: bad files
        // become warnings.
        Sources::load(&[], None, root, &package_files(manifests), false).unwrap_or_default()
    }

    /// The configured sources that were skipped, and why, in one sentence
    /// (`None`: none was). `install` adds it to "no source serves ...",
    /// `status` and `doctor` report it.
    pub fn skipped(&self) -> Option<String> {
        (!self.warnings.is_empty())
            .then(|| format!("configured but skipped: {}", self.warnings.join("; ")))
    }

    fn add_file(&mut self, path: &Path, component: Option<&str>, allow_http: bool) {
        match read_file(path, component, allow_http) {
            Ok((sources, warnings)) => {
                self.list.extend(sources);
                self.warnings.extend(warnings);
            }
            Err(e) => self.warnings.push(format!("{e}; ignoring this file")),
        }
    }

    /// Whether any source serves `component` (else none of its archives
    /// has a URL to try).
    pub fn serve(&self, component: &str) -> bool {
        self.list.iter().any(|s| s.serves(component))
    }

    /// Candidate URLs for one database file of `component`, by the hash
    /// of its installed bytes, in the order to try.
    pub fn database_urls_for(&self, component: &str, sha256: &[u8; 32]) -> Vec<Url> {
        self.object_urls_for(component, &store::database_object_path(sha256))
    }

    /// Candidate URLs for the transport form of an archive of `component`,
    /// by the hash of its decoded stream, in the order to try (a plain
    /// directory of archives has none: a 404 there sends the fetcher to
    /// the archive itself).
    pub fn transport_urls_for(&self, component: &str, sha256: &[u8; 32]) -> Vec<Url> {
        self.object_urls_for(component, &store::transport_object_path(sha256))
    }

    /// Candidate URLs for a database set of `component` (one
    /// processor's database files as one stream), by the hash of its
    /// decoded stream, in the order to try.
    pub fn database_set_urls_for(&self, component: &str, sha256: &[u8; 32]) -> Vec<Url> {
        self.object_urls_for(component, &store::database_set_object_path(sha256))
    }

    /// The `index.json` of every source serving `component`, in order:
    /// where its database sets are listed.
    pub fn index_urls_for(&self, component: &str) -> Vec<Url> {
        self.object_urls_for(component, store::INDEX_FILE)
    }

    /// Candidate URLs for the store object at `rel` of `component`.
    fn object_urls_for(&self, component: &str, rel: &str) -> Vec<Url> {
        let mut urls: Vec<Url> = Vec::new();
        for url in self
            .list
            .iter()
            .filter(|s| s.serves(component))
            .filter_map(|s| s.object_url(rel))
        {
            if !urls.contains(&url) {
                urls.push(url);
            }
        }
        urls
    }

    /// Candidate URLs for one archive of `component`, in the order to try.
    pub fn urls_for(&self, component: &str, filename: &str, sha256: &[u8; 32]) -> Vec<Url> {
        let mut urls: Vec<Url> = Vec::new();
        for source in self.list.iter().filter(|s| s.serves(component)) {
            for url in source.urls_for(filename, sha256) {
                if !urls.contains(&url) {
                    urls.push(url);
                }
            }
        }
        urls
    }
}

/// Package-shipped sources files present for these manifests:
/// `(<kpack_dir>/<component>.sources.toml, component)`.
pub fn package_files(manifests: &[crate::resolve::InstalledManifest]) -> Vec<(PathBuf, String)> {
    manifests
        .iter()
        .filter_map(|m| {
            let component = &m.manifest.component;
            let path = m.kpack_dir.join(component_sources_file_name(component));
            path.is_file().then(|| (path, component.clone()))
        })
        .collect()
}

fn read_file(
    path: &Path,
    component: Option<&str>,
    allow_http: bool,
) -> Result<(Vec<Source>, Vec<String>), SourceError> {
    let file_err = |detail: String| SourceError::File {
        path: path.to_path_buf(),
        detail,
    };
    let bytes = rocm_kpack_fs::read_limited(path, rocm_kpack_format::layout::MAX_SOURCES_FILE)
        .map_err(|e| file_err(e.source.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| file_err("not UTF-8 text".into()))?;
    let parsed: SourcesFile = toml::from_str(&text).map_err(|e| file_err(e.to_string()))?;
    let origin = path.display().to_string();
    let mut sources = Vec::new();
    let mut warnings = Vec::new();
    for entry in parsed.source {
        let url = match parse_source_url(&entry.url, &origin, allow_http) {
            Ok(u) => u,
            Err(e) => {
                warnings.push(format!("{e}; skipped"));
                continue;
            }
        };
        let components = match (component, entry.components) {
            // A package's file speaks for its own component only.
            (Some(c), Some(list)) => Some(list.into_iter().filter(|x| x == c).collect()),
            (Some(c), None) => Some(vec![c.to_string()]),
            (None, list) => list,
        };
        sources.push(Source {
            url,
            components,
            origin: origin.clone(),
        });
    }
    Ok((sources, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_by_hash_then_by_name() {
        let url = parse_source_url("https://m.example/kpack", "--source", false).expect("url");
        assert_eq!(url.as_str(), "https://m.example/kpack/");
        let s = Source {
            url,
            components: None,
            origin: "--source".into(),
        };
        let sha = [0xab; 32];
        let urls: Vec<String> = s
            .urls_for("r_gfx90X.kpack", &sha)
            .iter()
            .map(|u| u.to_string())
            .collect();
        assert_eq!(
            urls,
            vec![
                format!("https://m.example/kpack/by-hash/sha256/{}", "ab".repeat(32)),
                "https://m.example/kpack/r_gfx90X.kpack".to_string(),
            ]
        );
    }

    #[test]
    fn joins_stay_below_the_source() {
        for base in [
            "https://m.example/kpack/",
            "file:///srv/mirror/",
            "http://127.0.0.1:8/a/b/",
        ] {
            let base = Url::parse(base).expect("url");
            let ok = join_below(&base, "x_gfx90a:xnack-.kpack").expect("join");
            assert!(ok.as_str().starts_with(base.as_str()), "{ok}");
            assert_eq!(ok.scheme(), base.scheme());
            // Spellings that would leave the source if parsed as URLs stay
            // plain names (encoded) or are refused.
            for rel in [
                "http:host",
                "file:x",
                "javascript:x",
                "//evil.example/x",
                "@evil.example",
            ] {
                match join_below(&base, rel) {
                    Ok(u) => {
                        assert_eq!(
                            (u.scheme(), u.host()),
                            (base.scheme(), base.host()),
                            "{rel}: {u}"
                        );
                        assert!(u.path().starts_with(base.path()), "{rel}: {u}");
                    }
                    Err(e) => assert!(e.to_string().contains("refusing"), "{e}"),
                }
            }
            for rel in [
                "..",
                "../x",
                "a/../../x",
                "%2e%2e/x",
                "%2F..",
                "a\\..",
                "x\n",
                "x\0",
                "",
                "a//b",
                "/etc/passwd",
            ] {
                assert!(
                    join_below(&base, rel).is_err(),
                    "{base} + {rel:?} must be refused"
                );
            }
        }
        let signed = Url::parse("https://m.example/k/?token=s").expect("url");
        assert_eq!(
            join_below(&signed, "a.kpack").expect("join").as_str(),
            "https://m.example/k/a.kpack"
        );
        assert!(join_below(&Url::parse("mailto:x@y").expect("url"), "a").is_err());
    }

    #[test]
    fn schemes_and_paths() {
        assert!(matches!(
            parse_source_url("http://m.example/", "--source", false),
            Err(SourceError::Scheme { .. })
        ));
        assert!(parse_source_url("http://127.0.0.1:8/", "--source", true).is_ok());
        assert!(matches!(
            parse_source_url("ftp://m.example/", "--source", true),
            Err(SourceError::Scheme { .. })
        ));
        let f = parse_source_url("/srv/mirror", "--source", false).expect("path");
        assert_eq!(f.as_str(), "file:///srv/mirror/");
        let err = parse_source_url("https://u:pw@m.example/", "x.toml", false).map(|u| masked(&u));
        assert_eq!(err.expect("url"), "https://****@m.example/");
    }

    #[test]
    fn files_order_and_component_scoping() {
        let root = tempfile::tempdir().expect("tempdir");
        let d = root.path().join(SOURCES_D);
        fs::create_dir_all(&d).expect("mkdir");
        fs::write(
            d.join("20-b.toml"),
            "[[source]]\nurl = \"https://b.example/\"\n[[source]]\nurl = \"http://insecure.example/\"\n",
        )
        .expect("write");
        fs::write(
            d.join("10-a.toml"),
            "[[source]]\nurl = \"https://a.example/\"\ncomponents = [\"rocrand\"]\n",
        )
        .expect("write");
        fs::write(d.join("30-broken.toml"), "[[source]]\nurl = 3\n").expect("write");
        let pkg = root.path().join("rocsparse.sources.toml");
        fs::write(&pkg, "[[source]]\nurl = \"https://pkg.example/\"\n").expect("write");

        let s = Sources::load(
            &["https://cli.example/".to_string()],
            None,
            root.path(),
            &[(pkg, "rocsparse".into())],
            false,
        )
        .expect("load");
        let urls: Vec<&str> = s.list.iter().map(|x| x.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "https://cli.example/",
                "https://a.example/",
                "https://b.example/",
                "https://pkg.example/"
            ]
        );
        assert_eq!(s.warnings.len(), 2, "{:?}", s.warnings);
        let sha = [1; 32];
        let for_rocrand = s.urls_for("rocrand", "x.kpack", &sha);
        assert!(for_rocrand
            .iter()
            .any(|u| u.host_str() == Some("a.example")));
        assert!(!for_rocrand
            .iter()
            .any(|u| u.host_str() == Some("pkg.example")));
        let for_sparse = s.urls_for("rocsparse", "x.kpack", &sha);
        assert!(!for_sparse.iter().any(|u| u.host_str() == Some("a.example")));
        assert!(for_sparse
            .iter()
            .any(|u| u.host_str() == Some("pkg.example")));

        let off = Sources::load(&[], Some(Path::new("/srv/m")), root.path(), &[], false)
            .expect("offline");
        assert_eq!(off.list.len(), 1);
        assert_eq!(
            off.list.first().map(|s| s.url.as_str()),
            Some("file:///srv/m/")
        );
    }
}
