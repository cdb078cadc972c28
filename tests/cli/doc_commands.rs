//! Every command of the README and of the guide (`docs/*.md`) runs, so a documented example
//! that breaks fails the tests.
//!
//! The files are read in order, the README first, then `docs/*.md` by name; `docs/functions.md`
//! is left to `tests/sql/docs_examples.rs`, which runs each of its examples and compares the
//! table. Every ```` ```sh ```` block runs with `bash -euo pipefail` and every ```` ```sql ````
//! block with `calibsql -f`, all in one scratch directory (the README's demo writes the
//! `calibsql-demo/` the later pages read) holding a link to the repository's `sql/`. A block
//! fails when it exits non-zero, and an `sql` block followed by a table (a block without a
//! language, starting with `+-`) fails unless it prints that table.
//!
//! - `calibsql` on the blocks' `PATH` is the binary the tests built, and `cargo run --release
//!   --` stands for it (a stand-in `cargo` refuses anything else). The debug build is many
//!   times slower than a release one, so `--rows N` runs as `--rows 20K`, and `demo` without
//!   `--rows` as `demo --rows 20K`.
//! - An ```` ```sql ```` block's tables come from its info string: `tables=NAME=PATH,…`.
//! - An ```` ```sh server ```` block starts a server: the test goes on once the port takes
//!   connections, and stops the server after the page's last block. Every `5432` of a page
//!   runs as a port that was free, and `ANALYST_PASSWORD` and `PGPASSWORD` hold one password.
//! - A block whose info string says `no-run` is skipped, and must be in [`NOT_RUN`] with the
//!   reason; a listed block that is not marked, or marked and not listed, fails the test.
//!   Blocks fenced as `bash`, `shell`, `console` or `zsh` fail it too: they would be skipped
//!   unnoticed.
//! - Each block runs in its own process group, killed when the block or its page is done, when
//!   the test fails, and at [`DEADLINE`].

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::child;

/// The blocks that cannot run in a test: (file, the start of the block's first line, why).
const NOT_RUN: &[(&str, &str, &str)] = &[
    (
        "README.md",
        "bash tests/run-all.sh",
        "the test command itself: it runs this test",
    ),
    (
        "docs/README.md",
        "cargo test --workspace --features calibsql/distributed --test cli doc_commands",
        "this test itself",
    ),
    (
        "docs/distributed.md",
        "cargo install --path . --features distributed",
        "a release build and an install into ~/.cargo",
    ),
    (
        "docs/distributed.md",
        "calibsql scheduler --bind 127.0.0.1:50050",
        "a cluster: roles that run until stopped, one terminal each (tests/cluster_cli.rs runs them as processes)",
    ),
    (
        "docs/duckdb.md",
        "bash duckdb/build.sh",
        "a release build (python/run-tests.sh builds and tests the extension with --dev)",
    ),
    (
        "docs/performance.md",
        "cargo bench --bench aggregates",
        "release benches that run for many minutes",
    ),
    (
        "docs/python.md",
        "pip install ./python          # builds",
        "a release build of the extension (python/run-tests.sh builds and tests a debug one)",
    ),
    (
        "docs/python.md",
        "pip install ./python            # from the repository",
        "a release build of the extension (python/run-tests.sh builds and tests a debug one)",
    ),
    (
        "docs/serving.md",
        "cargo install --path . --features serve",
        "a release build and an install into ~/.cargo",
    ),
    (
        "docs/tables.md",
        "# a named profile, as the AWS CLI uses it",
        "an S3 bucket and an AWS profile (tests/s3.rs and python/tests/test_object_stores.py run \
         the same flags, profiles and keys against local S3 servers)",
    ),
    (
        "docs/tables.md",
        "AZURE_STORAGE_ACCOUNT_NAME=acme",
        "an Azure account (python/tests/test_object_stores.py runs these settings against Azurite)",
    ),
    (
        "docs/tables.md",
        "GOOGLE_APPLICATION_CREDENTIALS=~/keys/calibration.json",
        "a GCS bucket and a service account (python/tests/test_object_stores.py reads gs:// \
         from fake-gcs-server)",
    ),
    (
        "docs/tables.md",
        "CREATE EXTERNAL TABLE clicks STORED AS PARQUET LOCATION 's3://",
        "an S3-compatible server on 127.0.0.1:9000 (tests/s3.rs runs these options against one)",
    ),
];

/// How long one block may run before its processes are killed and the test fails: a hang
/// guard, many times what a block takes here.
const DEADLINE: Duration = Duration::from_secs(600);

/// The row count the blocks' `--rows` and `demo` run with.
const ROWS: &str = "20K";

/// How long a `server` block may take to listen.
const SERVER_STARTUP: Duration = Duration::from_secs(120);

/// The password of the pages' users files (`$ANALYST_PASSWORD`) and psql's (`PGPASSWORD`).
const PASSWORD: &str = "doc-test-password";

/// The README stays a front door.
const README_MAX_LINES: usize = 250;

/// A fenced code block of a Markdown file.
#[derive(Clone)]
struct Block {
    /// Path from the repository's root.
    file: String,
    /// 1-based line of the opening fence.
    line: usize,
    lang: String,
    attrs: Vec<String>,
    body: String,
}

impl Block {
    fn no_run(&self) -> bool {
        self.attrs.iter().any(|a| a == "no-run")
    }

    fn first_line(&self) -> &str {
        self.body
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
    }

    fn place(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README, then `docs/*.md` by name, without `docs/functions.md`.
fn files() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md") && n != "functions.md")
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    let mut files = vec!["README.md".to_string()];
    files.extend(docs);
    files
}

/// The fenced blocks of `text` (fences of three backticks at the start of a line).
fn blocks(file: &str, text: &str) -> Vec<Block> {
    let mut out = vec![];
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let Some(info) = line.strip_prefix("```") else {
            if let Some(block) = open.as_mut() {
                block.body.push_str(line);
                block.body.push('\n');
            }
            continue;
        };
        match open.take() {
            Some(block) => out.push(block),
            None => {
                let mut words = info.split_whitespace().map(str::to_string);
                open = Some(Block {
                    file: file.to_string(),
                    line: i + 1,
                    lang: words.next().unwrap_or_default(),
                    attrs: words.collect(),
                    body: String::new(),
                });
            }
        }
    }
    assert!(open.is_none(), "{file}: a code block is not closed");
    out
}

/// `script` as the test runs it: `--rows N` as `--rows 20K`, `demo` given `--rows 20K`, and
/// the server's port 5432 as `port`.
fn for_test(script: &str, port: u16) -> String {
    let joined = script.replace("\\\n", " ");
    let mut out = String::new();
    for line in joined.lines() {
        let mut words: Vec<&str> = line.split(' ').collect();
        for i in 1..words.len() {
            if words[i - 1] == "--rows" {
                words[i] = ROWS;
            }
        }
        let demo = (1..words.len())
            .find(|&i| (words[i - 1] == "calibsql" || words[i - 1] == "--") && words[i] == "demo");
        if let Some(i) = demo {
            if !words.contains(&"--rows") {
                words.splice(i + 1..i + 1, ["--rows", ROWS]);
            }
        }
        let line = words.join(" ");
        out.push_str(&line.replace("5432", &port.to_string()));
        out.push('\n');
    }
    out
}

/// A directory for the blocks' `PATH`: `calibsql` is the binary under test, `cargo` a
/// stand-in that runs `cargo run --release -- …` as that binary and refuses anything else.
fn tools(dir: &Path) {
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_calibsql"), dir.join("calibsql")).unwrap();
    let cargo = dir.join("cargo");
    std::fs::write(
        &cargo,
        "#!/bin/sh\n\
         # The documented-command test's cargo: `cargo run --release -- ARGS` is the calibsql\n\
         # the tests built; anything else must be marked no-run.\n\
         if [ \"$1 $2 $3\" = \"run --release --\" ]; then shift 3; exec calibsql \"$@\"; fi\n\
         echo \"cargo $*: not run by the documented-command test; mark its block no-run\" >&2\n\
         exit 97\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A block's shell, in a process group of its own: the group is killed and the shell reaped
/// when dropped, so nothing a block started outlives it.
struct Running {
    child: std::process::Child,
    err: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        // SAFETY: a plain kill(2) of the process group this test started.
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

fn read(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

/// Starts `command` in its own process group, in `work` (also its `HOME`), its output into
/// `logs/NAME.out` and `logs/NAME.err`.
fn spawn(mut command: std::process::Command, work: &Path, logs: &Path, name: &str) -> Running {
    use std::os::unix::process::CommandExt;
    let out = logs.join(format!("{name}.out"));
    let err = logs.join(format!("{name}.err"));
    command
        .current_dir(work)
        .env("HOME", work)
        .process_group(0)
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err).unwrap()));
    Running {
        child: command.spawn().unwrap(),
        err,
    }
}

/// Runs `command` as [`spawn`] until it exits or [`DEADLINE`]: its standard output, or Err
/// with all it wrote when it fails.
fn run(command: std::process::Command, work: &Path, logs: &Path) -> Result<String, String> {
    let mut running = spawn(command, work, logs, "block");
    let out = logs.join("block.out");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = running.child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > DEADLINE {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    match status {
        Some(s) if s.success() => Ok(read(&out)),
        Some(s) => Err(format!(
            "{s}\n--- stdout:\n{}--- stderr:\n{}",
            read(&out),
            read(&running.err)
        )),
        None => Err(format!(
            "still running after {DEADLINE:?}, killed\n--- stderr:\n{}",
            read(&running.err)
        )),
    }
}

/// Starts a `server` block and returns once `port` on 127.0.0.1 takes connections.
fn start_server(
    command: std::process::Command,
    work: &Path,
    logs: &Path,
    port: u16,
) -> Result<Running, String> {
    let mut running = spawn(command, work, logs, "server");
    let started = Instant::now();
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    loop {
        if std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
            return Ok(running);
        }
        if let Some(status) = running.child.try_wait().unwrap() {
            return Err(format!(
                "exited ({status}) before listening on {port}\n--- stderr:\n{}",
                read(&running.err)
            ));
        }
        if started.elapsed() > SERVER_STARTUP {
            return Err(format!(
                "not listening on {port} after {SERVER_STARTUP:?}\n--- stderr:\n{}",
                read(&running.err)
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn every_documented_command_runs() {
    let work = child::scratch_dir("doc-commands-");
    let bin = child::scratch_dir("doc-tools-");
    std::os::unix::fs::symlink(repo().join("sql"), work.path().join("sql")).unwrap();
    tools(bin.path());
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let mut failures = vec![];
    let mut marked = vec![];
    let mut ran = 0;
    for file in files() {
        // The servers a page starts run until its last block has run.
        let mut servers: Vec<Running> = vec![];
        let port = child::free_port();
        let text = std::fs::read_to_string(repo().join(&file)).unwrap();
        if file == "README.md" {
            let lines = text.lines().count();
            if lines >= README_MAX_LINES {
                failures.push(format!(
                    "README.md has {lines} lines: keep it under {README_MAX_LINES}, move the rest to docs/"
                ));
            }
        }
        let blocks = blocks(&file, &text);
        for (i, block) in blocks.iter().enumerate() {
            // An `sql` block followed by a table (a block without a language whose first line
            // starts with `+-`) must print that table.
            let table = blocks
                .get(i + 1)
                .filter(|next| block.lang == "sql" && next.lang.is_empty())
                .map(|next| next.body.as_str())
                .filter(|body| body.starts_with("+-"));
            match block.lang.as_str() {
                "sh" | "sql" => {}
                "bash" | "shell" | "console" | "zsh" => {
                    failures.push(format!(
                        "{}: fence commands as ```sh (or ```sh no-run), not ```{}",
                        block.place(),
                        block.lang
                    ));
                    continue;
                }
                _ => continue,
            }
            if block.no_run() {
                marked.push(block.clone());
                continue;
            }
            let unknown: Vec<&String> = block
                .attrs
                .iter()
                .filter(|a| {
                    !(block.lang == "sql" && a.starts_with("tables=")
                        || block.lang == "sh" && *a == "server")
                })
                .collect();
            if !unknown.is_empty() {
                failures.push(format!("{}: unknown attributes {unknown:?}", block.place()));
                continue;
            }
            let mut command;
            if block.lang == "sh" {
                command = child::command("bash");
                command.args(["-euo", "pipefail", "-c", &for_test(&block.body, port)]);
            } else {
                let sql = bin.path().join("block.sql");
                std::fs::write(&sql, &block.body).unwrap();
                command = child::command(env!("CARGO_BIN_EXE_calibsql"));
                for attr in &block.attrs {
                    for table in attr["tables=".len()..].split(',') {
                        command.args(["--table", table]);
                    }
                }
                if table.is_some() {
                    command.args(["--format", "table"]);
                }
                command.arg("-f").arg(&sql);
            }
            command
                .env("PATH", &path)
                .env("ANALYST_PASSWORD", PASSWORD)
                .env("PGPASSWORD", PASSWORD);
            let started = Instant::now();
            let result = if block.attrs.iter().any(|a| a == "server") {
                start_server(command, work.path(), bin.path(), port).map(|server| {
                    servers.push(server);
                    String::new()
                })
            } else {
                run(command, work.path(), bin.path())
            };
            let result = result.and_then(|stdout| {
                let printed: String = stdout
                    .lines()
                    .filter(|l| l.starts_with('+') || l.starts_with('|'))
                    .map(|l| format!("{l}\n"))
                    .collect();
                match table {
                    Some(want) if printed != want => {
                        Err(format!("printed\n{printed}where the page shows\n{want}"))
                    }
                    _ => Ok(()),
                }
            });
            eprintln!(
                "{} ```{}: {} in {:.1} s",
                block.place(),
                block.lang,
                if result.is_ok() { "ok" } else { "FAILED" },
                started.elapsed().as_secs_f64()
            );
            ran += 1;
            if let Err(e) = result {
                failures.push(format!(
                    "{} ```{}:\n{}\n{e}",
                    block.place(),
                    block.lang,
                    block.body
                ));
            }
        }
    }

    // The blocks not run: each marked in its file and listed here, with its reason.
    for block in &marked {
        let listed = NOT_RUN
            .iter()
            .find(|(f, start, _)| *f == block.file && block.first_line().starts_with(start));
        match listed {
            Some((_, _, why)) => eprintln!("{} not run: {why}", block.place()),
            None => failures.push(format!(
                "{}: marked no-run but not in NOT_RUN (say why there): {}",
                block.place(),
                block.first_line()
            )),
        }
    }
    for (file, start, _) in NOT_RUN {
        let hits = marked
            .iter()
            .filter(|b| b.file == *file && b.first_line().starts_with(start))
            .count();
        if hits != 1 {
            failures.push(format!(
                "NOT_RUN lists {file}: {start:?}, which matches {hits} blocks marked no-run (want 1)"
            ));
        }
    }
    assert!(ran >= 10, "only {ran} blocks ran: is the parser right?");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_test_shrinks_sizes_and_moves_the_port() {
    let sized = |script| for_test(script, 40123);
    assert_eq!(
        sized("calibsql generate --rows 1M --out data --drift-day 10\n"),
        "calibsql generate --rows 20K --out data --drift-day 10\n"
    );
    assert_eq!(
        sized("cargo run --release -- demo\n"),
        "cargo run --release -- demo --rows 20K\n"
    );
    assert_eq!(
        sized("calibsql demo --rows 2M\n"),
        "calibsql demo --rows 20K\n"
    );
    assert_eq!(
        sized("calibsql --table t=x \\\n  -c \"SELECT 1\"\n"),
        "calibsql --table t=x    -c \"SELECT 1\"\n"
    );
    assert_eq!(
        sized("calibsql serve --bind 127.0.0.1:5432\npsql \"port=5432\"\n"),
        "calibsql serve --bind 127.0.0.1:40123\npsql \"port=40123\"\n"
    );
}
