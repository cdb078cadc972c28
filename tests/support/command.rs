//! Shared by the test binaries that run the `calibsql` binary (`#[path]`-included).

use std::path::Path;

use assert_cmd::Command;

/// The binary, run in `dir` with `dir` as a private `HOME` (so no user configuration or
/// history file is read or written).
pub fn calibsql(dir: &Path) -> Command {
    let mut command = assert_cmd::cargo::cargo_bin_cmd!("calibsql");
    command.current_dir(dir).env("HOME", dir);
    command
}
