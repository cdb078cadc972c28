//! The `--users` file: one `NAME:VERIFIER` a line (blank lines and `#` comments allowed).

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context};

use super::scram::Verifier;

/// The users who may log in, by name.
#[derive(Debug, Default)]
pub struct Users {
    verifiers: HashMap<String, Verifier>,
}

impl Users {
    /// Reads `path`, refusing a file that group or others may read or write (it holds what
    /// an attacker would brute-force offline).
    pub fn load(path: &Path) -> anyhow::Result<Users> {
        let metadata = std::fs::metadata(path)
            .with_context(|| format!("--users {}: cannot read it", path.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                bail!(
                    "--users {}: the file may be read or written by others (mode {mode:03o}); \
                     make it private with chmod 600",
                    path.display()
                );
            }
        }
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--users {}: cannot read it", path.display()))?;
        Users::parse(&text).with_context(|| format!("--users {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Users> {
        let mut verifiers = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let number = i + 1;
            let Some((name, verifier)) = line.split_once(':') else {
                bail!("line {number}: expected NAME:VERIFIER");
            };
            let name = name.trim();
            if name.is_empty() {
                bail!("line {number}: the user name is empty");
            }
            let verifier: Verifier = verifier
                .trim()
                .parse()
                .map_err(|e| anyhow::anyhow!("line {number} (user {name}): {e}"))?;
            if verifiers.insert(name.to_string(), verifier).is_some() {
                bail!("line {number}: user {name} is given twice");
            }
        }
        if verifiers.is_empty() {
            bail!("no user in the file; add a line NAME:VERIFIER (calibsql hash-password)");
        }
        Ok(Users { verifiers })
    }

    pub fn get(&self, name: &str) -> Option<&Verifier> {
        self.verifiers.get(name)
    }

    pub fn len(&self) -> usize {
        self.verifiers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_comments_and_errors() {
        let verifier = Verifier::new("pw", b"0123456789abcdef", 4096).to_string();
        let users =
            Users::parse(&format!("# team\n\nalice:{verifier}\n bob : {verifier} \n")).unwrap();
        assert_eq!(users.len(), 2);
        assert!(users.get("alice").is_some() && users.get("bob").is_some());
        assert!(users.get("carol").is_none());
        let error = |text: &str| format!("{:#}", Users::parse(text).unwrap_err());
        assert!(error("alice").contains("line 1"));
        assert!(error("alice:md5abc").contains("SCRAM-SHA-256$"));
        assert!(error(&format!("a:{verifier}\na:{verifier}")).contains("twice"));
        assert!(error("# nobody\n").contains("no user"));
    }
}
