//! The loader cache: archives stay open (memory-mapped, TOC parsed) keyed by
//! canonical path, and the search of docs/runtime.md orders the archives a
//! request may load from; the first that has the kernel serves it. The map lock is held only to look up or insert an `Arc`, never
//! while opening a file or decompressing, so loads on many threads proceed in
//! parallel.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::{Error, Result};
use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::layout;
use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_format::marker::Marker;

use super::config::LoaderConfig;
use super::select::{choices, lists_any, Archives, Choice};

/// One archive a request may load from, and the arch key to load.
type Offered = Choice<PathBuf, Arc<Archive>>;

/// Thread-safe loader state: configuration plus the archives opened so far.
pub struct Cache {
    config: LoaderConfig,
    archives: RwLock<HashMap<PathBuf, Arc<Archive>>>,
}

/// The archive that serves a request, before anything is decompressed.
#[derive(Clone)]
pub struct Resolved {
    /// The archive.
    pub archive: Arc<Archive>,
    /// Its path as searched (not canonicalized).
    pub archive_path: PathBuf,
    /// TOC binary key: `<kernel_name>#<co_index>`.
    pub binary_key: String,
    /// The arch key matched in that archive (a compatible variant).
    pub arch: String,
}

impl fmt::Debug for Resolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolved")
            .field("archive_path", &self.archive_path)
            .field("binary_key", &self.binary_key)
            .field("arch", &self.arch)
            .finish()
    }
}

/// A loaded code object and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeObject {
    /// The code object bytes (an AMDGPU ELF for real archives).
    pub data: Vec<u8>,
    /// Archive it was read from.
    pub archive_path: PathBuf,
    /// Arch key it was stored under.
    pub arch: String,
}

/// One entry of the candidate list built from the environment and marker.
#[derive(Debug, Clone)]
enum Source {
    /// A direct archive path.
    Plain(PathBuf),
    /// A path containing `@GFXARCH@`.
    Pattern(PathBuf),
    /// A `.kpm` manifest naming archives in its own directory.
    Manifest(PathBuf),
}

impl Cache {
    /// A cache configured from the process environment (read now, once).
    pub fn from_env() -> Self {
        Self::with_config(LoaderConfig::from_env())
    }

    /// A cache with explicit settings.
    pub fn with_config(config: LoaderConfig) -> Self {
        let cache = Cache {
            config,
            archives: RwLock::new(HashMap::new()),
        };
        cache.debug(format_args!(
            "cache created: disabled={}, override_paths={}, prefix_paths={}, arch_override={:?}",
            cache.config.disabled,
            cache.config.path_override.as_ref().map_or(0, Vec::len),
            cache.config.path_prefix.len(),
            cache.config.arch_override
        ));
        cache
    }

    /// The settings this cache was created with.
    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// Number of archives currently held open.
    pub fn open_archive_count(&self) -> usize {
        self.archives.read().map_or(0, |m| m.len())
    }

    /// Open `path` through the cache: an archive already open under the same
    /// canonical path is shared, otherwise it is opened and kept.
    pub fn open_archive(&self, path: &Path) -> Result<Arc<Archive>> {
        let canonical = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
        if let Some(found) = self.lookup(&canonical) {
            return Ok(found);
        }
        // Opened outside the lock; if another thread wins the race its
        // archive is kept and ours dropped.
        let archive = Arc::new(Archive::open(&canonical)?);
        self.debug(format_args!(
            "opened archive {} (arches: {})",
            path.display(),
            archive.gfx_arches().join(", ")
        ));
        let mut map = self
            .archives
            .write()
            .map_err(|_| Error::InvalidArgument("loader cache lock poisoned".into()))?;
        Ok(map.entry(canonical).or_insert(archive).clone())
    }

    fn lookup(&self, canonical: &Path) -> Option<Arc<Archive>> {
        self.archives.read().ok()?.get(canonical).cloned()
    }

    /// Load the code object of wrapper `co_index` of the binary at
    /// `binary_path`, whose marker is `marker`, for the first target of
    /// `arch_list` (priority order) that some archive can serve.
    pub fn load_code_object<S: AsRef<str>>(
        &self,
        marker: &Marker,
        binary_path: &Path,
        co_index: u32,
        arch_list: &[S],
    ) -> Result<CodeObject> {
        let (binary_key, offered) = self.offered(marker, binary_path, co_index, arch_list)?;
        let (data, from) =
            self.first_that_loads(binary_key, offered, |key, c| c.hit.kernel(key, &c.key))?;
        Ok(CodeObject {
            data,
            archive_path: from.archive_path,
            arch: from.arch,
        })
    }

    /// [`Self::load_code_object`] decompressing into a buffer from
    /// `alloc(len)` (see [`Archive::kernel_with`]) instead of a `Vec`, e.g.
    /// memory handed to a C caller. Returns the buffer, the code object's
    /// length, and where it came from.
    pub fn load_code_object_with<S, B, F>(
        &self,
        marker: &Marker,
        binary_path: &Path,
        co_index: u32,
        arch_list: &[S],
        mut alloc: F,
    ) -> Result<(B, usize, Resolved)>
    where
        S: AsRef<str>,
        B: AsMut<[MaybeUninit<u8>]>,
        F: FnMut(usize) -> Result<B>,
    {
        let (binary_key, offered) = self.offered(marker, binary_path, co_index, arch_list)?;
        let ((buf, len), from) = self.first_that_loads(binary_key, offered, |key, c| {
            c.hit.kernel_with(key, &c.key, &mut alloc)
        })?;
        Ok((buf, len, from))
    }

    /// Tries the choices in turn, as AMD's loader does: one that lacks the
    /// kernel, or whose copy cannot be read, hands on to the next, and the
    /// last one's error is the result when none serves (docs/runtime.md,
    /// "Code-object selection rule").
    fn first_that_loads<T>(
        &self,
        binary_key: String,
        offered: Vec<Offered>,
        mut load: impl FnMut(&str, &Offered) -> Result<T>,
    ) -> Result<(T, Resolved)> {
        let mut last = None;
        for c in offered {
            match load(&binary_key, &c) {
                Ok(loaded) => {
                    self.debug(format_args!(
                        "loaded {binary_key} for {} from {}",
                        c.key,
                        c.candidate.display(),
                    ));
                    return Ok((loaded, resolved(c, binary_key)));
                }
                Err(e) => {
                    self.debug(format_args!(
                        "{} under {}: {e}; trying the next archive",
                        c.candidate.display(),
                        c.key
                    ));
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or(Error::KernelNotFound {
            binary: binary_key,
            arch: String::new(),
        }))
    }

    /// The search of docs/runtime.md without the decompression: the first
    /// archive and arch key that hold the kernel.
    pub fn resolve<S: AsRef<str>>(
        &self,
        marker: &Marker,
        binary_path: &Path,
        co_index: u32,
        arch_list: &[S],
    ) -> Result<Resolved> {
        let (binary_key, offered) = self.offered(marker, binary_path, co_index, arch_list)?;
        let keys: Vec<String> = offered.iter().map(|c| c.key.clone()).collect();
        for c in offered {
            if c.hit.entry(&binary_key, &c.key).is_some() {
                return Ok(resolved(c, binary_key));
            }
            self.debug(format_args!(
                "{} has no {binary_key} under {}; trying the next archive",
                c.candidate.display(),
                c.key
            ));
        }
        Err(Error::KernelNotFound {
            binary: binary_key,
            arch: keys.join(", "),
        })
    }

    /// What a request may load from, in the order to try: the choices of
    /// the selection rule over the archives its search paths offer, with
    /// the TOC key of the kernel. `ARCH_NOT_FOUND` when some archive (or a
    /// manifest) shows the arches are absent, `ARCHIVE_NOT_FOUND` when
    /// nothing could be opened.
    fn offered<S: AsRef<str>>(
        &self,
        marker: &Marker,
        binary_path: &Path,
        co_index: u32,
        arch_list: &[S],
    ) -> Result<(String, Vec<Offered>)> {
        if self.config.disabled {
            self.debug(format_args!("disabled by ROCM_KPACK_DISABLE"));
            return Err(Error::Disabled);
        }
        let wanted: Vec<String> = match &self.config.arch_override {
            Some(list) => list.clone(),
            None => arch_list.iter().map(|a| a.as_ref().to_owned()).collect(),
        };
        if wanted.is_empty() {
            return Err(Error::InvalidArgument("empty architecture list".into()));
        }
        let binary_key = format!("{}#{co_index}", marker.kernel_name);
        self.debug(format_args!(
            "request {binary_key} from {}: wanted [{}]",
            binary_path.display(),
            wanted.join(", ")
        ));
        let sources = self.sources(marker, binary_path);

        let mut search = Search {
            cache: self,
            sources,
            searched: Vec::new(),
            available: Vec::new(),
            opened_any: false,
            manifest_read: false,
            listed_missing: false,
            listed: HashSet::new(),
            manifests: HashMap::new(),
            failed: HashSet::new(),
        };
        let offered = choices(&mut search, &wanted);
        if !offered.is_empty() {
            return Ok((binary_key, offered));
        }
        // An opened archive, or a readable manifest that lists no archive
        // for these arches, shows the arch is absent (not the archive).
        if search.opened_any || (search.manifest_read && !search.listed_missing) {
            self.debug(format_args!(
                "no compatible architecture: wanted [{}], available [{}]",
                wanted.join(", "),
                search.available.join(", ")
            ));
            Err(Error::ArchNotFound {
                wanted,
                available: search.available,
            })
        } else {
            let searched = search.searched_list();
            self.debug(format_args!(
                "no archive found; searched: {}",
                searched.join(", ")
            ));
            Err(Error::ArchiveNotFound { searched })
        }
    }

    /// Candidate list: `ROCM_KPACK_PATH` alone, or the prefix entries then the
    /// marker's paths resolved against the binary's directory.
    fn sources(&self, marker: &Marker, binary_path: &Path) -> Vec<Source> {
        if let Some(paths) = &self.config.path_override {
            return paths.iter().cloned().map(Source::Plain).collect();
        }
        let base = binary_path.parent().unwrap_or(Path::new(""));
        let mut out: Vec<Source> = self
            .config
            .path_prefix
            .iter()
            .cloned()
            .map(Source::Plain)
            .collect();
        for entry in &marker.kpack_search_paths {
            let resolved = super::config::resolve_search_path(base, entry);
            self.debug(format_args!(
                "search path {entry} -> {}",
                resolved.display()
            ));
            out.push(if layout::is_archive_pattern(entry) {
                Source::Pattern(resolved)
            } else if layout::is_manifest_path(entry) {
                Source::Manifest(resolved)
            } else {
                Source::Plain(resolved)
            });
        }
        out
    }

    fn debug(&self, args: fmt::Arguments<'_>) {
        tracing::debug!("{args}");
        if self.config.debug {
            eprintln!("kpack: {args}");
        }
    }
}

fn resolved(c: Offered, binary_key: String) -> Resolved {
    Resolved {
        archive: c.hit,
        archive_path: c.candidate,
        binary_key,
        arch: c.key,
    }
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("config", &self.config)
            .field("open_archives", &self.open_archive_count())
            .finish()
    }
}

/// State of one request's search: what was tried, what was seen.
struct Search<'c> {
    cache: &'c Cache,
    /// Where to look, from [`Cache::sources`].
    sources: Vec<Source>,
    /// Every path tried, in order, without repeats, with the reason it was
    /// skipped unless it was simply missing (for ARCHIVE_NOT_FOUND).
    searched: Vec<(String, Option<String>)>,
    /// Arches of every archive opened, first-seen order (for ARCH_NOT_FOUND).
    available: Vec<String>,
    opened_any: bool,
    /// Some manifest was read (it tells which arches the component has).
    manifest_read: bool,
    /// An archive a manifest listed for a wanted arch could not be opened.
    listed_missing: bool,
    /// Paths that came from manifests.
    listed: HashSet<PathBuf>,
    /// Manifests read during this request; `None` if unreadable.
    manifests: HashMap<PathBuf, Option<Manifest>>,
    /// Paths that could not be opened during this request (not retried).
    failed: HashSet<PathBuf>,
}

/// The loader's side of the selection rule: candidates are the archives the
/// search paths offer, opened (through the cache) when first probed.
impl Archives for Search<'_> {
    type Candidate = PathBuf;
    type Hit = Arc<Archive>;

    /// Every source expanded for the variants, in source order, without
    /// repeats.
    fn candidates(&mut self, variants: &[String]) -> Vec<PathBuf> {
        let sources = std::mem::take(&mut self.sources);
        let mut candidates: Vec<PathBuf> = Vec::new();
        for source in &sources {
            for path in self.expand(source, variants) {
                if !candidates.contains(&path) {
                    candidates.push(path);
                }
            }
        }
        self.sources = sources;
        candidates
    }

    fn trying(&mut self, arch: &str, variant: &str) {
        self.cache
            .debug(format_args!("trying {variant} (for {arch})"));
    }

    fn holds(&mut self, path: &PathBuf, variant: &str) -> Option<Arc<Archive>> {
        let archive = self.open(path)?;
        if archive.has_arch(variant) {
            self.cache
                .debug(format_args!("{} holds {variant}", path.display()));
            return Some(archive);
        }
        self.cache.debug(format_args!(
            "{} has no {variant} (has {})",
            path.display(),
            archive.gfx_arches().join(", ")
        ));
        None
    }
}

impl Search<'_> {
    /// Archive paths a source offers for any of `variants` (in variant
    /// order for patterns, in manifest order for manifests).
    fn expand(&mut self, source: &Source, variants: &[String]) -> Vec<PathBuf> {
        match source {
            Source::Plain(p) => vec![p.clone()],
            Source::Pattern(p) => {
                let text = p.to_string_lossy();
                variants
                    .iter()
                    .map(|v| PathBuf::from(layout::expand_pattern(&text, v)))
                    .collect()
            }
            Source::Manifest(m) => {
                let dir = m.parent().unwrap_or(Path::new("")).to_path_buf();
                let paths: Vec<PathBuf> = self
                    .manifest(m)
                    .map(|man| {
                        man.kpack_files
                            .iter()
                            .filter(|f| lists_any(&f.architectures, variants))
                            .map(|f| dir.join(&f.filename))
                            .collect()
                    })
                    .unwrap_or_default();
                self.listed.extend(paths.iter().cloned());
                paths
            }
        }
    }

    fn manifest(&mut self, path: &Path) -> Option<&Manifest> {
        if !self.manifests.contains_key(path) {
            let read = match Manifest::read(path) {
                Ok(m) => {
                    self.cache
                        .debug(format_args!("read manifest {}", path.display()));
                    self.manifest_read = true;
                    for f in &m.kpack_files {
                        for arch in &f.architectures {
                            if !self.available.contains(arch) {
                                self.available.push(arch.clone());
                            }
                        }
                    }
                    Some(m)
                }
                Err(e) => {
                    // Missing or unreadable manifests fall through to the
                    // next search path (normally the @GFXARCH@ pattern).
                    match &e {
                        Error::FileNotFound { .. } => {
                            self.cache
                                .debug(format_args!("manifest {}: not found", path.display()));
                        }
                        _ => self
                            .cache
                            .debug(format_args!("skipping manifest {}: {e}", path.display())),
                    }
                    self.note_searched(path, Some(&e));
                    None
                }
            };
            self.manifests.insert(path.to_owned(), read);
        }
        self.manifests.get(path).and_then(Option::as_ref)
    }

    /// Open `path` through the cache; missing or unopenable files are
    /// skipped (and remembered for the error message).
    fn open(&mut self, path: &Path) -> Option<Arc<Archive>> {
        if self.failed.contains(path) {
            return None;
        }
        match self.cache.open_archive(path) {
            Ok(archive) => {
                self.note_searched(path, None);
                self.opened_any = true;
                for arch in archive.gfx_arches() {
                    if !self.available.contains(arch) {
                        self.available.push(arch.clone());
                    }
                }
                Some(archive)
            }
            Err(e) => {
                match &e {
                    Error::FileNotFound { .. } => {
                        self.cache
                            .debug(format_args!("{}: not found", path.display()));
                    }
                    _ => self
                        .cache
                        .debug(format_args!("skipping {}: {e}", path.display())),
                }
                self.note_searched(path, Some(&e));
                self.failed.insert(path.to_owned());
                if self.listed.contains(path) {
                    self.listed_missing = true;
                }
                None
            }
        }
    }

    /// Remember a tried path once; failures other than "missing" keep
    /// their reason so the final message explains a rejected archive.
    fn note_searched(&mut self, path: &Path, error: Option<&Error>) {
        let shown = path.display().to_string();
        if self.searched.iter().any(|(p, _)| p == &shown) {
            return;
        }
        let reason = match error {
            None | Some(Error::FileNotFound { .. }) => None,
            Some(e) => Some(e.to_string()),
        };
        self.searched.push((shown, reason));
    }

    fn searched_list(&self) -> Vec<String> {
        self.searched
            .iter()
            .map(|(p, reason)| match reason {
                Some(r) => format!("{p} ({r})"),
                None => p.clone(),
            })
            .collect()
    }
}
