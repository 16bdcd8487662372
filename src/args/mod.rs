//! The command line: the commands and their flags (each with a `TAPEDECK_*` variable), and a
//! refused command line told in one line that names the flag or variable the value came from.
//!
//! # Layout
//! - [`serve`]: `tapedeck serve`'s flags.
//! - [`settings`]: those flags checked together and turned into a `Config`.
//! - [`values`]: the values flags take (durations, sizes, addresses), parsed and shown.
pub(crate) mod serve;
pub(crate) mod settings;

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, Parser, Subcommand};

use crate::cli;

/// The whole command line.
#[derive(Parser)]
#[command(
    name = "tapedeck",
    version,
    about = "Durable recorder and replayer of streamed LLM responses"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What the binary is asked to do.
#[derive(Subcommand)]
pub(crate) enum Command {
    /// Serve the gRPC recorder until SIGINT/SIGTERM.
    Serve(Box<serve::ServeArgs>),
    /// Print a signed grant (an HS256 JWT) for a user, as an agent app would issue it.
    Token(cli::token::TokenArgs),
    /// Talk to a running server (record, replay, ls, inspect, rm, cancel, check, cluster).
    #[command(flatten)]
    Client(cli::ClientCommand),
    /// Offline tools on a stopped server's data dir: stats, check, compact.
    #[command(subcommand)]
    Db(cli::db::DbCommand),
}

/// What a command line that cannot be run gets instead of a command.
pub(crate) enum Refusal {
    /// `--help` or `--version`: printed as clap prints them.
    Shown(clap::Error),
    /// A bad command line: one line saying what is wrong.
    Usage(String),
}

/// The command of this process's command line (and environment).
///
/// Fails with a `Refusal`: what to print for `--help`, or one line naming what is wrong.
pub(crate) fn parse() -> Result<Command, Refusal> {
    let args: Vec<OsString> = std::env::args_os().collect();
    match Cli::try_parse_from(&args) {
        Ok(cli) => Ok(cli.command),
        Err(err) if !err.use_stderr() => Err(Refusal::Shown(err)),
        Err(err) => Err(Refusal::Usage(describe(&err, &args))),
    }
}

/// Exit code of a command line that cannot be run as given (clap's own, for usage errors).
pub(crate) const USAGE_EXIT: u8 = 2;

/// Says what is wrong with the command line, on one line, and exits with code 2.
pub(crate) fn usage_error(message: &str) -> std::process::ExitCode {
    eprintln!("tapedeck: error: {message}");
    std::process::ExitCode::from(USAGE_EXIT)
}

/// clap's refusal `err` of `args` as one line. A bad value names where it came from, the
/// flag or its variable, and the other too; a choice lists the values it takes; a secret's
/// value is never repeated.
fn describe(err: &clap::Error, args: &[OsString]) -> String {
    let setting = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => Setting::find(arg),
        _ => None,
    };
    let reason = match err.kind() {
        ErrorKind::ValueValidation => std::error::Error::source(err).map(|e| e.to_string()),
        ErrorKind::InvalidValue => match err.get(ContextKind::ValidValue) {
            Some(ContextValue::Strings(values)) => {
                Some(format!("possible values: {}", values.join(", ")))
            }
            _ => None,
        },
        _ => None,
    };
    let value = match err.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(value)) => Some(value.as_str()),
        _ => None,
    };
    match (&setting, reason, value) {
        (Some(setting), Some(reason), Some(value)) => {
            let from_variable = setting.variable.is_some() && !setting.given_in(args);
            let (named, other) = match (&setting.variable, from_variable) {
                (Some(variable), true) => (
                    variable.clone(),
                    format!(" ({variable}, the variable of {})", setting.flag),
                ),
                (Some(variable), false) => (
                    setting.flag.clone(),
                    format!(" ({} or {variable})", setting.flag),
                ),
                (None, _) => (setting.flag.clone(), String::new()),
            };
            let value = match setting.secret || value.is_empty() {
                true => String::new(),
                false => format!(" '{value}'"),
            };
            format!("invalid value{value} for {named}: {reason}{other}")
        }
        _ => {
            // clap's message up to its usage, on one line: what is wrong, the flags it names
            // on the lines below (a missing one), and its tip (a similar flag to a typo).
            let text = err.to_string();
            let mut message = String::new();
            let lines = text.lines().take_while(|line| !line.starts_with("Usage:"));
            for line in lines.map(str::trim).filter(|line| !line.is_empty()) {
                if !message.is_empty() {
                    message.push_str(if message.ends_with(':') { " " } else { "; " });
                }
                message.push_str(line);
            }
            let message = message.trim_start_matches("error: ");
            let named = match (setting, err.get(ContextKind::InvalidArg)) {
                (Some(setting), _) => vec![setting],
                (None, Some(ContextValue::Strings(args))) => {
                    args.iter().filter_map(|arg| Setting::find(arg)).collect()
                }
                _ => Vec::new(),
            };
            let variables: Vec<String> = named
                .into_iter()
                .filter_map(|s| Some(s.flag).zip(s.variable))
                .filter(|(_, variable)| !message.contains(variable))
                .map(|(flag, variable)| format!("{flag} or {variable}"))
                .collect();
            match variables.is_empty() {
                true => message.to_string(),
                false => format!("{message} ({})", variables.join("; ")),
            }
        }
    }
}

/// A flag as the command line declares it.
struct Setting {
    /// `--name`.
    flag: String,
    /// Its `TAPEDECK_*` variable, if it has one.
    variable: Option<String>,
    /// Whether its value is a secret, never to be repeated.
    secret: bool,
}

impl Setting {
    /// The flag clap names `arg` (`--retention <RETENTION>`), in any command.
    fn find(arg: &str) -> Option<Setting> {
        let long = arg.split_whitespace().next()?.strip_prefix("--")?;
        fn within(command: &clap::Command, long: &str) -> Option<Setting> {
            command
                .get_arguments()
                .find(|a| a.get_long() == Some(long))
                .map(|a| Setting {
                    flag: format!("--{long}"),
                    variable: a.get_env().map(|env| env.to_string_lossy().into_owned()),
                    secret: a.is_hide_env_values_set(),
                })
                .or_else(|| command.get_subcommands().find_map(|sub| within(sub, long)))
        }
        within(&Cli::command(), long)
    }

    /// Whether `args` give the flag (`--name VALUE` or `--name=VALUE`): if not, a value it
    /// has came from its variable.
    fn given_in(&self, args: &[OsString]) -> bool {
        let with_value = format!("{}=", self.flag);
        args.iter()
            .skip(1)
            .map(|arg| arg.to_string_lossy())
            .take_while(|arg| arg != "--")
            .any(|arg| arg == self.flag.as_str() || arg.starts_with(&with_value))
    }
}
