//! `completions SHELL` and `man --out DIR`: the two subcommands both
//! programs add by flattening [`DocsCommand`] into their command enum, so
//! shell completions (`clap_complete`) and man pages (`clap_mangen`) are
//! generated one way from each program's own `clap::Command`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap_mangen::roff::{roman, Roff};

use crate::{help_footer, print_stdout, ExitStatus};

/// Subcommands that describe the program itself; flatten into a
/// `#[derive(Subcommand)]` enum with `#[command(flatten)]`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum DocsCommand {
    /// Print a shell completion script on stdout, to source or to save in
    /// the shell's completion directory.
    Completions(CompletionsArgs),
    /// Write the man pages (one per command and subcommand) to a directory;
    /// read one with `man -l`.
    Man(ManArgs),
}

/// `completions` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `man` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ManArgs {
    /// Directory for the pages (created if missing).
    #[arg(long, value_name = "DIR", value_parser = crate::out_dir)]
    pub out: PathBuf,
    /// Replace pages that already exist in DIR (otherwise `man` refuses
    /// before writing any).
    #[arg(long)]
    pub force: bool,
}

impl DocsCommand {
    /// Runs the subcommand for the program whose command line is `cmd`
    /// (`Cli::command()`).
    pub fn run(&self, cmd: clap::Command) -> anyhow::Result<ExitStatus> {
        match self {
            DocsCommand::Completions(args) => print_stdout(&completions(cmd, args.shell))?,
            DocsCommand::Man(args) => {
                let mut listing = String::new();
                for path in write_man_pages(cmd, &args.out, args.force)? {
                    listing.push_str(&format!("{}\n", path.display()));
                }
                // The pages written: a report, which -q silences.
                if !crate::quiet() {
                    print_stdout(&listing)?;
                }
            }
        }
        Ok(ExitStatus::Success)
    }
}

/// `cmd` with the help footers of its `completions` and `man`
/// subcommands, which name the program ([`crate::parse`] and
/// [`man_pages`] add them).
pub(crate) fn with_footers(mut cmd: clap::Command) -> clap::Command {
    use ExitStatus::{Failure, Success, Usage};
    let program = cmd.get_name().to_owned();
    if cmd.find_subcommand("completions").is_some() {
        let footer = help_footer(
            &program,
            &[Success, Usage],
            &[
                (
                    "Load completions into the running bash:",
                    &format!("source <({program} completions bash)"),
                ),
                (
                    "Install them for zsh:",
                    &format!("{program} completions zsh > ~/.zfunc/_{program}"),
                ),
            ],
        );
        cmd = cmd.mut_subcommand("completions", |c| c.after_help(footer));
    }
    if cmd.find_subcommand("man").is_some() {
        let footer = help_footer(
            &program,
            &[Success, Failure, Usage],
            &[(
                "Write the pages and read the first:",
                &format!("{program} man --out man && man -l man/{program}.1"),
            )],
        );
        cmd = cmd.mut_subcommand("man", |c| c.after_help(footer));
    }
    cmd
}

/// The completion script of `cmd` for `shell`.
pub fn completions(mut cmd: clap::Command, shell: clap_complete::Shell) -> String {
    let name = cmd.get_name().to_owned();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Writes [`man_pages`] to `dir` (created if missing) and returns the
/// files written. A page that exists is replaced only with `replace` (the
/// commands' overwrite rule); otherwise nothing is written.
pub fn write_man_pages(
    cmd: clap::Command,
    dir: &Path,
    replace: bool,
) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let pages = man_pages(cmd);
    if !replace {
        if let Some((name, _)) = pages.iter().find(|(name, _)| dir.join(name).exists()) {
            anyhow::bail!(
                "refusing to replace {}: it already exists (--force replaces it)",
                dir.join(name).display()
            );
        }
    }
    pages
        .into_iter()
        .map(|(name, page)| {
            let path = dir.join(name);
            std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        })
        .collect()
}

/// Every man page of `cmd`, as (file name, roff source): `PROGRAM.1`, then
/// `PROGRAM-SUB.1` for each visible subcommand (and `PROGRAM-SUB-SUB.1`
/// below). The top page has an EXIT STATUS section with
/// [`ExitStatus::table`]; a `--help` epilogue becomes sections of its own
/// (a paragraph headed `Environment:` becomes ENVIRONMENT, and so on).
pub fn man_pages(cmd: clap::Command) -> Vec<(String, String)> {
    let mut cmd = with_footers(cmd).disable_help_subcommand(true);
    cmd.build();
    let program = cmd.get_name().to_owned();
    let version = cmd.get_version().unwrap_or_default().to_owned();
    let mut pages = Vec::new();
    collect_pages(&cmd, &program, &version, None, &mut pages);
    pages
}

fn collect_pages(
    cmd: &clap::Command,
    program: &str,
    version: &str,
    parent: Option<&str>,
    pages: &mut Vec<(String, String)>,
) {
    let page_name = cmd
        .get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_owned();
    pages.push((
        format!("{page_name}.1"),
        man_page(cmd, program, version, parent),
    ));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect_pages(sub, program, version, Some(&page_name), pages);
    }
}

/// One page: clap_mangen's sections, then the epilogue's sections.
fn man_page(cmd: &clap::Command, program: &str, version: &str, parent: Option<&str>) -> String {
    let epilogue = cmd
        .get_after_long_help()
        .or_else(|| cmd.get_after_help())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let bare = cmd
        .clone()
        .after_help(None::<&str>)
        .after_long_help(None::<&str>)
        .version(None::<&str>)
        .long_version(None::<&str>);
    let man = clap_mangen::Man::new(bare).source(format!("{program} {version}"));
    let mut out = Vec::new();
    // Rendering into a Vec cannot fail.
    let _ = man.render(&mut out);
    let mut roff = Roff::new();
    let mut epilogue = epilogue;
    if parent.is_none() {
        let table = ExitStatus::table();
        epilogue = epilogue.replace(&table, "");
        section(&mut roff, "EXIT STATUS", table.lines().skip(1));
    }
    for block in epilogue
        .split("\n\n")
        .map(str::trim_end)
        .filter(|b| !b.trim().is_empty())
    {
        let mut lines = block.lines();
        let first = lines.next().unwrap_or_default();
        match first.strip_suffix(':') {
            Some(heading) if !first.starts_with(' ') && heading.split(' ').count() <= 3 => {
                section(&mut roff, &heading.to_uppercase(), lines);
            }
            _ => section(&mut roff, "NOTES", block.lines()),
        }
    }
    section(
        &mut roff,
        "VERSION",
        [format!("{program} {version}").as_str()],
    );
    if let Some(parent) = parent {
        section(&mut roff, "SEE ALSO", [format!("{parent}(1)").as_str()]);
    }
    let mut page = String::from_utf8_lossy(&out).into_owned();
    page.push_str(&roff.to_roff());
    page
}

/// A section whose lines are kept as they are (tables, aligned lists),
/// their common indentation removed.
fn section<'a>(roff: &mut Roff, heading: &str, lines: impl IntoIterator<Item = &'a str>) {
    let lines: Vec<&str> = lines.into_iter().collect();
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    roff.control("SH", [heading]);
    roff.control("nf", []);
    for line in lines {
        roff.text([roman(line.get(indent..).unwrap_or(line.trim_start()))]);
    }
    roff.control("fi", []);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, clap::Parser)]
    #[command(name = "prog", version, after_help = after())]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    fn after() -> String {
        format!("{}\n\nEnvironment:\n  X  a variable", ExitStatus::table())
    }

    #[derive(Debug, clap::Subcommand)]
    enum Command {
        /// Do a thing.
        #[command(after_help = ExitStatus::summary("prog", &[ExitStatus::Success]))]
        Thing,
        /// Nested.
        #[command(subcommand)]
        Nest(Nested),
        #[command(flatten)]
        Docs(DocsCommand),
    }

    #[derive(Debug, clap::Subcommand)]
    enum Nested {
        /// Inner.
        Inner,
    }

    fn command() -> clap::Command {
        <Cli as clap::CommandFactory>::command()
    }

    #[test]
    fn one_page_per_visible_command_and_the_table_on_the_top_page() {
        let pages = man_pages(command());
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "prog.1",
                "prog-thing.1",
                "prog-nest.1",
                "prog-nest-inner.1",
                "prog-completions.1",
                "prog-man.1"
            ]
        );
        let top = &pages[0].1;
        assert!(
            top.contains(".SH \"EXIT STATUS\"") || top.contains(".SH EXIT\\ STATUS"),
            "{top}"
        );
        for status in ExitStatus::ALL {
            assert!(top.contains(status.name()), "{top}");
        }
        assert_eq!(top.matches("Exit status:").count(), 0, "{top}");
        assert!(top.contains(".SH ENVIRONMENT"), "{top}");
        let thing = &pages[1].1;
        assert!(
            thing.contains("0  success") && thing.contains("prog(1)"),
            "{thing}"
        );
    }

    #[test]
    fn completions_name_the_program_and_its_subcommands() {
        let bash = completions(command(), clap_complete::Shell::Bash);
        assert!(bash.contains("complete") && bash.contains("prog") && bash.contains("thing"));
    }

    #[test]
    fn man_writes_the_pages() {
        let dir = std::env::temp_dir().join(format!("rocm-kpack-cli-man-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let written = write_man_pages(command(), &dir, false).expect("write");
        assert_eq!(written.len(), 6);
        assert!(written.iter().all(|p| p.is_file()));
        // The overwrite rule: refused, then replaced with `replace`.
        let err = write_man_pages(command(), &dir, false).expect_err("exists");
        assert!(err.to_string().contains("--force"), "{err}");
        write_man_pages(command(), &dir, true).expect("replace");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
