//! `calibsql`: an interactive SQL shell and batch runner with the calibration functions built in.
//! See `calibsql --help` for flags and exit codes.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
