//! Every default an operator reads in `--help` is the value the code uses: each is
//! shown from the constant the code runs with, never written again as text, and the
//! tests here read each command's help and look for it. (The lock default in
//! `--help` once drifted from the code's; these tests are why it cannot again.)

use crate::config::{DEFAULT_CACHE_DIR, DEFAULT_DATA_DIR, DEFAULT_LOCK_FILE};
use crate::operator::args::{LOCK_TIMEOUT_SECONDS, StoreArgs};
use crate::operator::cli::Cli;
use crate::operator::modules::oci::pull::DEFAULT_MODULE_DIR;
use crate::operator::repair::{leaks, migrate, release_node::DEFAULT_WINDOW};
use crate::operator::setup::install::GC_EVERY;
use clap::CommandFactory;
use std::path::Path;

/// What `--help` shows of `flag` (`--grace`) of the command at `path` (`["store",
/// "migrate"]`): its help and, unless hidden, `[default: …]` as clap renders it from
/// the argument's default values, read from the argument rather than parsed back
/// out of the rendered text.
fn flag_help(path: &[&str], flag: &str) -> String {
    let mut command = Cli::command();
    for name in path {
        command = command
            .find_subcommand(name)
            .unwrap_or_else(|| panic!("no command {path:?}"))
            .clone();
    }
    let long = flag.strip_prefix("--").expect("a long flag");
    let arg = command
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .unwrap_or_else(|| panic!("`wasm-ipam {}` has no {flag}", path.join(" ")));
    let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
    let defaults: Vec<_> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy())
        .collect();
    match defaults.is_empty() || arg.is_hide_default_value_set() {
        true => help,
        false => format!("{help} [default: {}]", defaults.join(" ")),
    }
}

fn humantime(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// Each flag whose default a constant names: its help shows that constant's value.
#[test]
fn each_default_in_help_is_the_constant_the_code_uses() {
    let lock_timeout = format!("[default: {LOCK_TIMEOUT_SECONDS}]");
    let shown: Vec<(&[&str], &str, String)> = vec![
        (&["list"], "--lock-timeout", lock_timeout.clone()),
        (&["gc"], "--lock-timeout", lock_timeout.clone()),
        (&["release-node"], "--lock-timeout", lock_timeout),
        (
            &["gc"],
            "--grace",
            format!("[default: {}]", humantime(leaks::DEFAULT_GRACE)),
        ),
        (
            &["stats"],
            "--grace",
            format!("[default: {}]", humantime(leaks::DEFAULT_GRACE)),
        ),
        (
            &["gc"],
            "--timeout",
            format!("[default: {}]", humantime(leaks::DEFAULT_TIMEOUT)),
        ),
        (
            &["release-node"],
            "--window",
            format!("[default: {}]", humantime(DEFAULT_WINDOW)),
        ),
        (
            &["store", "migrate"],
            "--idle",
            format!("[default: {}]", migrate::DEFAULT_IDLE),
        ),
        (
            &["store", "migrate"],
            "--timeout",
            format!("[default: {}]", migrate::DEFAULT_TIMEOUT),
        ),
        (
            &["precompile"],
            "--cache-dir",
            format!("[default: {DEFAULT_CACHE_DIR}]"),
        ),
        (
            &["install"],
            "--cache-dir",
            format!("[default: {DEFAULT_CACHE_DIR}]"),
        ),
        (
            &["install"],
            "--module-dir",
            format!("[default: {DEFAULT_MODULE_DIR}]"),
        ),
        (
            &["pull"],
            "--module-dir",
            format!("[default: {DEFAULT_MODULE_DIR}]"),
        ),
        (
            &["import-host-local"],
            "--store-dir",
            format!("[default: {DEFAULT_DATA_DIR}]"),
        ),
        (
            &["import-host-local"],
            "--lock-file",
            format!("[default: {DEFAULT_LOCK_FILE}]"),
        ),
        (&["install"], "--gc-timer", format!("every {GC_EVERY}")),
    ];
    for (path, flag, expected) in shown {
        let text = flag_help(path, flag);
        assert!(
            text.contains(&expected),
            "`wasm-ipam {} --help`, {flag}: {text:?} does not show {expected:?}",
            path.join(" ")
        );
    }
}

/// Every command that takes the store and lock: its `--help` shows the defaults
/// the code uses, from their constants, and a command given none uses them.
#[test]
fn help_shows_the_store_and_lock_defaults_the_code_uses() {
    let mut cli = Cli::command();
    let mut shown = 0;
    let mut commands: Vec<clap::Command> = cli.get_subcommands_mut().map(|c| c.clone()).collect();
    while let Some(mut command) = commands.pop() {
        commands.extend(command.get_subcommands().cloned());
        if !command
            .get_arguments()
            .any(|a| a.get_long() == Some("lock-file"))
        {
            continue;
        }
        let help = command.render_help().to_string();
        for default in [DEFAULT_LOCK_FILE, DEFAULT_DATA_DIR] {
            assert!(
                help.contains(&format!("else {default}]"))
                    || help.contains(&format!("use {default}]"))
                    || help.contains(&format!("[default: {default}]")),
                "{}: {help}",
                command.get_name()
            );
        }
        shown += 1;
    }
    assert!(shown >= 5, "only {shown} commands take --lock-file");
    let access = StoreArgs {
        data_dir: None,
        lock_file: None,
        lock_timeout: LOCK_TIMEOUT_SECONDS,
    }
    .access_for(None)
    .unwrap();
    assert_eq!(access.lock_file, Path::new(DEFAULT_LOCK_FILE));
    assert_eq!(access.data_dir, Path::new(DEFAULT_DATA_DIR));
}
