//! Logging to stderr: warnings and errors in the style of the error line
//! (`PROGRAM: warning: ...`), what is being done with `-v` as
//! `PROGRAM: ...`, and `-vv`'s debug lines with time and level, as
//! tracing-subscriber writes them.

use std::fmt;
use std::sync::OnceLock;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

use crate::invocation::invocation;
use crate::Verbosity;

static VERBOSITY: OnceLock<Verbosity> = OnceLock::new();

/// The verbosity [`init_tracing`] was given (the default before).
pub(crate) fn verbosity() -> Verbosity {
    VERBOSITY.get().copied().unwrap_or_default()
}

/// Logs to stderr, filtered by `RUST_LOG`, else by
/// [`Verbosity::default_filter`]; coloured only when
/// [`crate::stderr_colors`]. Records the verbosity for [`crate::quiet`].
/// A second call changes nothing.
pub fn init_tracing(verbosity: Verbosity) {
    let _ = VERBOSITY.set(verbosity);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(verbosity.default_filter()));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(crate::stderr_colors())
        .event_format(Style {
            program: invocation().program,
            detailed: format::format().with_target(false),
        })
        .try_init();
}

/// The event format: see the module docs.
struct Style {
    program: String,
    detailed: format::Format,
}

impl<S, N> FormatEvent<S, N> for Style
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let label = match *event.metadata().level() {
            Level::ERROR => "error: ",
            Level::WARN => "warning: ",
            Level::INFO => "",
            _ => return self.detailed.format_event(ctx, writer, event),
        };
        write!(writer, "{}: {label}", self.program)?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}
