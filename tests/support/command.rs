//! Shared by the test binaries that run the `calibsql` binary (`#[path]`-included).

use std::path::Path;
use std::time::Duration;

use assert_cmd::Command;

/// How long one run of the binary may take before it is killed and its test fails (a hang
/// guard, not a speed check: the slowest command of the tests takes seconds).
pub const DEADLINE: Duration = Duration::from_secs(300);

/// The binary, run in `dir` with `dir` as a private `HOME` (so no user configuration or
/// history file is read or written), killed after [`DEADLINE`].
pub fn calibsql(dir: &Path) -> Command {
    let mut command = assert_cmd::cargo::cargo_bin_cmd!("calibsql");
    command.current_dir(dir).env("HOME", dir).timeout(DEADLINE);
    command
}
