//! Transfer progress as indicatif bars on a terminal: the library's
//! [`Reporter`], rendered by this binary.

use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use rocm_kpack_fetcher::progress::{line, Reporter, Transfer};

/// indicatif bars on stderr, one per transfer.
pub struct Bars {
    multi: MultiProgress,
}

impl Bars {
    /// Bars drawn on stderr (callers check that it is a terminal).
    pub fn new() -> Bars {
        Bars {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
        }
    }
}

impl Default for Bars {
    fn default() -> Self {
        Bars::new()
    }
}

struct BarTransfer {
    bar: ProgressBar,
    multi: MultiProgress,
    name: String,
}

impl Reporter for Bars {
    fn start(&self, name: &str, _url: &str, total: u64, already: u64) -> Box<dyn Transfer> {
        let bar = self.multi.add(ProgressBar::new(total));
        let style = ProgressStyle::with_template(
            "{msg:30!} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
        )
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_message(name.to_string());
        bar.set_position(already);
        bar.enable_steady_tick(Duration::from_millis(200));
        Box::new(BarTransfer {
            bar,
            multi: self.multi.clone(),
            name: name.to_string(),
        })
    }
    fn note(&self, message: &str) {
        if self.multi.println(message).is_err() {
            line(message);
        }
    }
    fn close(&self) {
        // Finished bars would share a line with what is printed next.
        let _ = self.multi.clear();
    }
}

impl Transfer for BarTransfer {
    fn advance(&self, bytes: u64) {
        self.bar.inc(bytes);
    }
    fn reset(&self, position: u64) {
        self.bar.set_position(position);
    }
    fn finish(&self, outcome: Result<(), &str>) {
        match outcome {
            Ok(()) => self.bar.finish_with_message(format!("{} ok", self.name)),
            Err(why) => {
                self.bar
                    .abandon_with_message(format!("{} failed", self.name));
                let _ = self.multi.println(format!("failed {}: {why}", self.name));
            }
        }
    }
}
