//! The interactive shell: line editing and history (rustyline), statements spanning lines until
//! a `;`, a few backslash commands, errors printed without leaving.

use std::io::{self, Write};
use std::path::PathBuf;

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use rustyline::config::Config;
use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;

use super::output::{print_error, stdout_closed, Interrupted};
use super::session::Session;

const HELP: &str = "\
End each statement with ';' (it may span lines).
  \\d          list tables
  \\d NAME     describe table NAME
  \\?, help    this help
  \\q, quit    leave (or Ctrl-D); Ctrl-C cancels the current line or query";

/// `$HOME/.calibsql_history`, if there is a home.
pub fn history_file() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .map(|home| PathBuf::from(home).join(".calibsql_history"))
}

pub async fn run(session: &mut Session) -> anyhow::Result<()> {
    let config = Config::builder()
        .max_history_size(10_000)?
        .history_ignore_dups(true)?
        .auto_add_history(false)
        .build();
    let mut editor = DefaultEditor::with_config(config)?;
    let history = history_file();
    if let Some(path) = &history {
        // A missing or unreadable history is not worth stopping for.
        let _ = editor.load_history(path);
    }
    let _ = writeln!(
        io::stderr(),
        "calibsql {} — end statements with ';', \\? for help, \\q to quit",
        env!("CARGO_PKG_VERSION")
    );

    let mut buffer = String::new();
    loop {
        let prompt = if buffer.is_empty() {
            "calibsql> "
        } else {
            "      ... "
        };
        // At the prompt Ctrl-C edits the line; only one after it cancels a statement.
        super::interrupt::forget();
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                buffer.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        };
        if buffer.is_empty() {
            match Command::parse(&line) {
                Some(Command::Quit) => break,
                Some(command) => {
                    let _ = editor.add_history_entry(line.trim());
                    save(&mut editor, &history);
                    run_command(session, command).await;
                    if stdout_closed() {
                        break;
                    }
                    continue;
                }
                None if line.trim().is_empty() => continue,
                None => {}
            }
        }
        buffer.push_str(&line);
        buffer.push('\n');
        if !is_complete(&buffer) {
            continue;
        }
        let sql = std::mem::take(&mut buffer);
        let _ = editor.add_history_entry(sql.trim_end());
        save(&mut editor, &history);
        run_cancellable(session, &sql).await;
        if stdout_closed() {
            break;
        }
    }
    Ok(())
}

fn save(editor: &mut DefaultEditor, history: &Option<PathBuf>) {
    if let Some(path) = history {
        let _ = editor.save_history(path);
    }
}

/// Runs `sql`, printing an error instead of returning it; Ctrl-C cancels it.
async fn run_cancellable(session: &mut Session, sql: &str) {
    // Ctrl-C first: the statement it cancelled may fail at the same moment.
    let result = tokio::select! {
        biased;
        _ = super::interrupt::interrupted() => Err(Interrupted.into()),
        result = session.run_sql(sql) => result,
    };
    let _ = session.flush();
    match result {
        Err(error) if error.is::<Interrupted>() => {
            let _ = writeln!(io::stderr(), "cancelled");
        }
        Err(error) if !stdout_closed() => print_error(&error),
        _ => {}
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Command {
    Quit,
    Help,
    Tables,
    Describe(String),
}

impl Command {
    fn parse(line: &str) -> Option<Command> {
        let line = line.trim().trim_end_matches(';').trim();
        match line {
            "\\q" | "quit" | "exit" => Some(Command::Quit),
            "\\?" | "\\h" | "help" => Some(Command::Help),
            "\\d" => Some(Command::Tables),
            _ => line
                .strip_prefix("\\d ")
                .map(|name| Command::Describe(name.trim().to_string())),
        }
    }
}

async fn run_command(session: &mut Session, command: Command) {
    match command {
        Command::Quit => {}
        Command::Help => {
            let _ = writeln!(io::stderr(), "{HELP}");
        }
        Command::Tables => {
            run_cancellable(
                session,
                "SELECT table_schema, table_name, table_type FROM information_schema.tables \
                 WHERE table_schema <> 'information_schema' ORDER BY 1, 2;",
            )
            .await
        }
        Command::Describe(name) => run_cancellable(session, &format!("DESCRIBE {name};")).await,
    }
}

/// Whether `sql` ends with a `;` outside any string or comment.
fn is_complete(sql: &str) -> bool {
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        // An unterminated string or comment: keep reading.
        return false;
    };
    tokens
        .iter()
        .rev()
        .find(|token| !matches!(token, Token::Whitespace(_)))
        .is_some_and(|token| *token == Token::SemiColon)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_end_at_a_semicolon_outside_strings_and_comments() {
        assert!(is_complete("SELECT 1;"));
        assert!(is_complete("SELECT 1;  -- done\n"));
        assert!(!is_complete("SELECT 1"));
        assert!(!is_complete("SELECT 'a;\n"));
        assert!(!is_complete("SELECT 1 /* ; \n"));
        assert!(!is_complete("SELECT 1 -- ;\n"));
        assert!(is_complete("SELECT ';'\n;"));
    }

    #[test]
    fn backslash_commands() {
        assert_eq!(Command::parse("\\q"), Some(Command::Quit));
        assert_eq!(Command::parse("quit;"), Some(Command::Quit));
        assert_eq!(Command::parse(" \\d "), Some(Command::Tables));
        assert_eq!(
            Command::parse("\\d clicks"),
            Some(Command::Describe("clicks".into()))
        );
        assert_eq!(Command::parse("SELECT 1;"), None);
    }
}
