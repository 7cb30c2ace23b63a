//! The splitter's progress display: an indicatif bar on stderr when it is
//! a terminal (not with `-q`), with the stage's total, the running count of
//! code objects, and the item in work with the bytes written for it (a
//! package being compressed is named while it takes its time); and a
//! one-line summary that ends the command's text report, terminal or not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rocm_kpack_cli::{iec_size, plural};
use rocm_kpack_package::progress::{Progress, ProgressHandle};

/// What a command shows while it works; [`CommandProgress::finish`] ends it.
pub struct CommandProgress {
    /// The current stage's bar (a new one per stage, so that no frame
    /// mixes one stage's template with another's figures); `None` off a
    /// terminal.
    bar: Option<Mutex<ProgressBar>>,
    started: Instant,
    /// (stage, unit, items done) in order, for the summary line.
    stages: Mutex<Vec<(String, String, u64)>>,
    /// The item in work and the bytes written for it.
    current: Mutex<Option<(String, u64)>>,
    code_objects: AtomicU64,
}

/// How the summary says a stage's items were handled: `2 files split`,
/// `11 packages built`.
fn done_verb(stage: &str) -> &str {
    match stage {
        "package" => "built",
        "publish" => "written",
        other => other,
    }
}

/// `unit` (a plural noun) for `n` items: `1 file`, `2 files`.
fn counted(n: u64, unit: &str) -> String {
    let one = unit
        .strip_suffix("ies")
        .map(|stem| format!("{stem}y"))
        .or_else(|| unit.strip_suffix('s').map(str::to_owned))
        .unwrap_or_else(|| unit.to_owned());
    plural(usize::try_from(n).unwrap_or(usize::MAX), &one, unit)
}

impl CommandProgress {
    /// A bar when stderr is a terminal (and not `-q`), else nothing until
    /// the summary.
    pub fn new() -> Arc<CommandProgress> {
        // Hidden until the first stage begins.
        let bar = rocm_kpack_cli::progress_bars().then(|| {
            Mutex::new(ProgressBar::with_draw_target(
                None,
                ProgressDrawTarget::hidden(),
            ))
        });
        Arc::new(CommandProgress {
            bar,
            started: Instant::now(),
            stages: Mutex::new(Vec::new()),
            current: Mutex::new(None),
            code_objects: AtomicU64::new(0),
        })
    }

    /// For options structs.
    pub fn handle(self: &Arc<Self>) -> ProgressHandle {
        ProgressHandle::new(self.clone())
    }

    /// Clears the bar and returns the one-line summary the command ends its
    /// text report with (stdout, so a closed pipe or `--json` keeps stderr
    /// quiet): `12 files split, 8 packages built, 777 code objects moved
    /// in 3.4s`. Empty when no stage ran.
    pub fn finish(&self) -> String {
        self.with_bar(ProgressBar::finish_and_clear);
        let stages = self.stages.lock().map(|s| s.clone()).unwrap_or_default();
        if stages.is_empty() {
            return String::new();
        }
        let mut parts: Vec<String> = stages
            .iter()
            .map(|(stage, unit, n)| format!("{} {}", counted(*n, unit), done_verb(stage)))
            .collect();
        let cos = self.code_objects.load(Ordering::Relaxed);
        if cos > 0 {
            parts.push(format!("{} moved", counted(cos, "code objects")));
        }
        format!(
            "{} in {:.1}s\n",
            parts.join(", "),
            self.started.elapsed().as_secs_f64()
        )
    }

    /// The bar's message: the item in work (with the bytes written for
    /// it) or the last one done, then the code objects moved so far.
    fn message(&self, item: &str) -> String {
        let current = self.current.lock().ok().and_then(|c| c.clone());
        let item = match current {
            Some((name, 0)) => name,
            Some((name, bytes)) => format!("{name} {}", iec_size(bytes)),
            None => item.to_owned(),
        };
        let cos = self.code_objects.load(Ordering::Relaxed);
        if cos > 0 {
            format!("{item}; {}", counted(cos, "code objects"))
        } else {
            item
        }
    }
}

impl CommandProgress {
    /// Calls `f` with the current bar, if there is one.
    fn with_bar(&self, f: impl FnOnce(&ProgressBar)) {
        if let Some(bar) = self.bar.as_ref().and_then(|b| b.lock().ok()) {
            f(&bar);
        }
    }
}

impl Drop for CommandProgress {
    fn drop(&mut self) {
        // A command that returns early (an error, --dry-run) leaves no bar.
        self.with_bar(ProgressBar::finish_and_clear);
    }
}

impl Progress for CommandProgress {
    fn begin(&self, stage: &str, unit: &str, total: u64) {
        if let Ok(mut stages) = self.stages.lock() {
            stages.push((stage.to_string(), unit.to_string(), 0));
        }
        if let Ok(mut current) = self.current.lock() {
            *current = None;
        }
        let Some(slot) = &self.bar else { return };
        // Short fixed parts, so that on 80 columns the message (the item
        // in work) still has room.
        let template = if total > 0 {
            format!("{{spinner}} {{prefix}} [{{bar:16}}] {{pos}}/{{len}} {unit} {{elapsed}} {{wide_msg}}")
        } else {
            format!("{{spinner}} {{prefix}} {{pos}} {unit} {{elapsed}} {{wide_msg}}")
        };
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(stage.to_string());
        if let Ok(mut current) = slot.lock() {
            current.finish_and_clear();
            *current = bar.clone();
        }
        // Drawn only now, complete.
        bar.set_draw_target(ProgressDrawTarget::stderr());
        bar.enable_steady_tick(Duration::from_millis(120));
    }

    fn item_started(&self, item: &str) {
        if let Ok(mut current) = self.current.lock() {
            *current = Some((item.to_string(), 0));
        }
        self.with_bar(|bar| bar.set_message(self.message(item)));
    }

    fn bytes(&self, n: u64) {
        if let Ok(mut current) = self.current.lock() {
            if let Some((_, bytes)) = current.as_mut() {
                *bytes += n;
            }
        }
        self.with_bar(|bar| bar.set_message(self.message("")));
    }

    fn item_done(&self, item: &str) {
        if let Ok(mut stages) = self.stages.lock() {
            if let Some(last) = stages.last_mut() {
                last.2 += 1;
            }
        }
        if let Ok(mut current) = self.current.lock() {
            if current.as_ref().is_some_and(|(name, _)| name == item) {
                *current = None;
            }
        }
        self.with_bar(|bar| {
            bar.inc(1);
            bar.set_message(self.message(item));
        });
    }

    fn code_objects(&self, n: u64) {
        self.code_objects.fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::counted;

    #[test]
    fn units_are_counted_in_the_singular_and_plural() {
        assert_eq!(counted(1, "files"), "1 file");
        assert_eq!(counted(2, "files"), "2 files");
        assert_eq!(counted(1, "repositories"), "1 repository");
        assert_eq!(counted(1, "code objects"), "1 code object");
        assert_eq!(counted(0, "packages"), "0 packages");
    }
}
