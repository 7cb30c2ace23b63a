//! Progress of long operations (split, split-package, publish), reported
//! through a small trait so the libraries stay free of terminal code: the
//! command line picks the implementation (indicatif bars on a terminal, a
//! one-line summary otherwise), tests and library callers pass nothing.

use std::fmt;
use std::sync::Arc;

/// Receives progress events. Called from worker threads; implementations
/// must be cheap (`code_objects` is called once per code object, `bytes`
/// once per buffer read).
///
/// A stage counts items to the total `begin` gives; an item that takes
/// long is named while it runs ([`Progress::item_started`]) and counts
/// the bytes it handles ([`Progress::bytes`]), so a display never stands
/// still without saying what it waits for.
pub trait Progress: Send + Sync {
    /// A stage begins: `stage` (`split`, `package`) is done to `total`
    /// items of kind `unit` (`files`, `packages`; 0: not known ahead).
    fn begin(&self, stage: &str, unit: &str, total: u64);
    /// An item of the current stage begins; `item` names it.
    fn item_started(&self, _item: &str) {}
    /// `n` more bytes of the item in work were handled (read into a
    /// package being compressed).
    fn bytes(&self, _n: u64) {}
    /// One item of the current stage is done; `item` names it.
    fn item_done(&self, item: &str);
    /// `n` more code objects were moved into archives.
    fn code_objects(&self, n: u64);
}

/// Reports nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn begin(&self, _: &str, _: &str, _: u64) {}
    fn item_done(&self, _: &str) {}
    fn code_objects(&self, _: u64) {}
}

/// A shared [`Progress`] to put in options structs (cloneable, `Debug`).
#[derive(Clone)]
pub struct ProgressHandle(Arc<dyn Progress>);

impl ProgressHandle {
    /// Wraps a reporter.
    pub fn new(progress: Arc<dyn Progress>) -> Self {
        ProgressHandle(progress)
    }
}

impl Default for ProgressHandle {
    fn default() -> Self {
        ProgressHandle(Arc::new(NoProgress))
    }
}

impl fmt::Debug for ProgressHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProgressHandle")
    }
}

impl std::ops::Deref for ProgressHandle {
    type Target = dyn Progress;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}
