//! What a client may do: read-only queries over the server's tables unless `--allow-writes`;
//! files named by a client (a path in FROM, CREATE EXTERNAL TABLE, COPY TO, INSERT into a
//! file table) only under an `--allow-path` prefix.
//!
//! Two checks: [`PathCheckedUrlTables`] refuses a path in FROM before anything is read (the
//! schema inference that resolving it starts would read the file), and [`Policy::check`]
//! walks a statement's plan before it runs.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{TableProvider, UrlTableFactory};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::listing::ListingTable;
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, Statement as PlanStatement};

/// A statement or path the server's policy refuses; the message says which flag allows it.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// A refusal as the DataFusion error planning returns (found again by [`refusal`]).
fn refused(message: String) -> DataFusionError {
    DataFusionError::External(Box::new(Refused(message)))
}

/// The refusal inside `error`, if it is one.
pub fn refusal(error: &DataFusionError) -> Option<&Refused> {
    let mut current: &dyn std::error::Error = error;
    loop {
        if let Some(refused) = current.downcast_ref::<Refused>() {
            return Some(refused);
        }
        if let Some(DataFusionError::External(inner)) = current.downcast_ref::<DataFusionError>() {
            current = inner.as_ref();
            continue;
        }
        if let Some(DataFusionError::Context(_, inner)) = current.downcast_ref::<DataFusionError>()
        {
            current = inner.as_ref();
            continue;
        }
        current = current.source()?;
    }
}

/// A prefix clients may read and write under.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Prefix {
    /// A local directory or file, canonical (symbolic links resolved).
    Local(PathBuf),
    /// An object store URL prefix such as `s3://bucket/data/`.
    Url(String),
}

#[derive(Debug, Default)]
pub struct Policy {
    allow_writes: bool,
    prefixes: Vec<Prefix>,
    /// The `--table`s (by address): reading them is what the server is for.
    own_tables: HashSet<usize>,
}

fn address(table: &Arc<dyn TableProvider>) -> usize {
    Arc::as_ptr(table) as *const () as usize
}

/// Whether `location` is a URL with a scheme other than `file` (e.g. `s3://`), in the
/// canonical form the stores read it in (an Azure `https://` URL as `abfss://`), so that one
/// location written two ways is one prefix.
fn object_store_url(location: &str) -> Option<url::Url> {
    let url = url::Url::parse(&calibsql::stores::canonical_location(location)).ok()?;
    // A Windows drive letter parses as a one-letter scheme.
    (url.scheme() != "file" && url.scheme().len() > 1).then_some(url)
}

/// `path` absolute, with symbolic links and `..` resolved as far as it exists, the rest
/// (a file to be written, a glob) appended; `None` when the rest has `..` or is unreadable.
fn resolve_local(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let mut existing = absolute.clone();
    let mut rest = Vec::new();
    loop {
        if let Ok(canonical) = existing.canonicalize() {
            let mut resolved = canonical;
            for part in rest.iter().rev() {
                resolved.push(part);
            }
            return Some(resolved);
        }
        let name = existing.file_name()?.to_owned();
        if Path::new(&name)
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            return None;
        }
        rest.push(name);
        if !existing.pop() {
            return None;
        }
    }
}

/// The local path of `location` (a path or a `file://` URL), up to its first glob character.
fn local_path(location: &str) -> Option<PathBuf> {
    let text = match location.strip_prefix("file://") {
        Some(_) => url::Url::parse(location).ok()?.to_file_path().ok()?,
        None => PathBuf::from(location),
    };
    let text = text.to_str()?.to_string();
    let cut = text.find(['*', '?', '[', '{']).unwrap_or(text.len());
    let head = &text[..cut];
    // A glob's directory part: up to the last separator before the first glob character.
    let head = if cut < text.len() {
        &head[..head.rfind('/').map_or(0, |i| i + 1)]
    } else {
        head
    };
    if head.is_empty() {
        return Some(PathBuf::from("."));
    }
    // `..` in it is resolved against what exists (resolve_local).
    Some(PathBuf::from(head))
}

impl Policy {
    /// The policy of `--allow-writes` and `--allow-path`s (each local prefix must exist).
    pub fn new(allow_writes: bool, allow_paths: &[String]) -> anyhow::Result<Policy> {
        let mut prefixes = Vec::new();
        for prefix in allow_paths {
            if let Some(url) = object_store_url(prefix) {
                if url.path().split('/').any(|segment| segment == "..") {
                    anyhow::bail!("--allow-path {prefix}: '..' is not allowed in a URL prefix");
                }
                let mut text = url.to_string();
                if !text.ends_with('/') {
                    text.push('/');
                }
                prefixes.push(Prefix::Url(text));
            } else {
                let path = local_path(prefix)
                    .and_then(|p| p.canonicalize().ok())
                    .ok_or_else(|| {
                        anyhow::anyhow!("--allow-path {prefix}: no such file or directory")
                    })?;
                prefixes.push(Prefix::Local(path));
            }
        }
        Ok(Policy {
            allow_writes,
            prefixes,
            own_tables: HashSet::new(),
        })
    }

    /// Marks `table` as one of the server's own (`--table`): queries may read it.
    pub fn add_own_table(&mut self, table: &Arc<dyn TableProvider>) {
        self.own_tables.insert(address(table));
    }

    /// Whether `location` (a path, a glob, a `file://` or `s3://` URL) is under a prefix.
    pub fn path_allowed(&self, location: &str) -> bool {
        if let Some(url) = object_store_url(location) {
            if url.path().split('/').any(|segment| segment == "..") {
                return false;
            }
            let mut text = url.to_string();
            if !text.ends_with('/') {
                text.push('/');
            }
            return self.prefixes.iter().any(|prefix| match prefix {
                Prefix::Url(prefix) => text.starts_with(prefix.as_str()),
                Prefix::Local(_) => false,
            });
        }
        let Some(path) = local_path(location).and_then(|p| resolve_local(&p)) else {
            return false;
        };
        self.prefixes.iter().any(|prefix| match prefix {
            Prefix::Local(prefix) => path.starts_with(prefix),
            Prefix::Url(_) => false,
        })
    }

    fn path_hint(&self) -> &'static str {
        if self.prefixes.is_empty() {
            "this server lets clients name no file (start it with --allow-path PREFIX)"
        } else {
            "it is not under an --allow-path prefix of this server"
        }
    }

    fn check_path(&self, what: &str, location: &str) -> Result<()> {
        if self.path_allowed(location) {
            return Ok(());
        }
        Err(refused(format!(
            "permission denied: {what} '{location}': {}",
            self.path_hint()
        )))
    }

    /// Refuses reading `location` unless it is under a prefix (for `delta_scan`, which reads a
    /// table's log while it is planned).
    pub fn check_read(&self, location: &str) -> Result<()> {
        self.check_path("reading", location)
    }

    fn check_writes(&self, what: &str) -> Result<()> {
        if self.allow_writes {
            return Ok(());
        }
        Err(refused(format!(
            "permission denied: {what}: this server is read-only (start it with --allow-writes)"
        )))
    }

    /// Checks every node of `plan` (subqueries included) before it runs.
    pub fn check(&self, plan: &LogicalPlan) -> Result<()> {
        plan.apply_with_subqueries(|node| {
            self.check_node(node)?;
            Ok(TreeNodeRecursion::Continue)
        })
        .map(|_| ())
    }

    fn check_node(&self, node: &LogicalPlan) -> Result<()> {
        match node {
            LogicalPlan::Ddl(DdlStatement::CreateExternalTable(create)) => {
                for location in &create.locations {
                    self.check_path("CREATE EXTERNAL TABLE reads", location)?;
                }
                Ok(())
            }
            // Views are names for queries, private to the session; their queries are checked.
            LogicalPlan::Ddl(DdlStatement::CreateView(_) | DdlStatement::DropView(_)) => Ok(()),
            LogicalPlan::Ddl(ddl) => self.check_writes(&ddl_name(ddl)),
            LogicalPlan::Dml(dml) => {
                self.check_writes(&format!(
                    "{} {}",
                    dml.op.to_string().to_uppercase(),
                    dml.table_name
                ))?;
                if let Ok(table) = source_as_provider(&dml.target) {
                    self.check_file_table("writing", &table)?;
                }
                Ok(())
            }
            LogicalPlan::Copy(copy) => {
                self.check_writes("COPY … TO")?;
                self.check_path("COPY TO writes", &copy.output_url)
            }
            LogicalPlan::Statement(PlanStatement::SetVariable(set)) => {
                let variable = set.variable.to_ascii_lowercase();
                if variable.starts_with("datafusion.runtime.")
                    || variable.starts_with("datafusion.catalog.")
                {
                    return Err(refused(format!(
                        "permission denied: SET {}: the server's runtime and catalog settings \
                         are fixed at its start",
                        set.variable
                    )));
                }
                Ok(())
            }
            LogicalPlan::TableScan(scan) => {
                if let Ok(table) = source_as_provider(&scan.source) {
                    self.check_file_table("reading", &table)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A file table that is not one of the server's own must be under a prefix.
    fn check_file_table(&self, what: &str, table: &Arc<dyn TableProvider>) -> Result<()> {
        if self.own_tables.contains(&address(table)) {
            return Ok(());
        }
        if let Some(delta) = table.downcast_ref::<calibsql::delta::DeltaTableProvider>() {
            return self.check_path(what, delta.location());
        }
        let Some(listing) = table.downcast_ref::<ListingTable>() else {
            return Ok(());
        };
        for url in listing.table_paths() {
            self.check_path(what, url.as_str())?;
        }
        Ok(())
    }
}

/// A DDL statement as SQL names it.
fn ddl_name(ddl: &DdlStatement) -> String {
    match ddl {
        DdlStatement::CreateMemoryTable(create) => format!("CREATE TABLE {}", create.name),
        DdlStatement::DropTable(drop) => format!("DROP TABLE {}", drop.name),
        DdlStatement::CreateCatalogSchema(create) => {
            format!("CREATE SCHEMA {}", create.schema_name)
        }
        DdlStatement::DropCatalogSchema(drop) => format!("DROP SCHEMA {}", drop.name),
        DdlStatement::CreateCatalog(create) => format!("CREATE DATABASE {}", create.catalog_name),
        DdlStatement::CreateIndex(_) => "CREATE INDEX".to_string(),
        DdlStatement::CreateFunction(create) => format!("CREATE FUNCTION {}", create.name),
        DdlStatement::DropFunction(drop) => format!("DROP FUNCTION {}", drop.name),
        other => other.name().to_string(),
    }
}

/// Resolves a path or URL in FROM (`SELECT * FROM 'data/x.parquet'`) as DataFusion's URL
/// tables do, but only under an `--allow-path` prefix: anything else that looks like a path
/// is refused before it is read, and plain names are left to "table not found".
#[derive(Debug)]
pub struct PathCheckedUrlTables {
    pub inner: Arc<dyn UrlTableFactory>,
    pub policy: Arc<Policy>,
}

fn looks_like_a_path(name: &str) -> bool {
    name.contains(['/', '\\', '.', ':', '*', '?', '~'])
}

#[async_trait]
impl UrlTableFactory for PathCheckedUrlTables {
    async fn try_new(&self, url: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if !looks_like_a_path(url) {
            return Ok(None);
        }
        self.policy.check_path("reading", url)?;
        self.inner.try_new(url).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        let dir = tempfile::tempdir().unwrap();
        let allowed = dir.path().join("allowed");
        std::fs::create_dir_all(allowed.join("sub")).unwrap();
        std::fs::write(allowed.join("a.csv"), "x\n1\n").unwrap();
        std::fs::create_dir_all(dir.path().join("allowed2")).unwrap();
        std::fs::write(dir.path().join("secret.csv"), "x\n1\n").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(dir.path().join("secret.csv"), allowed.join("link.csv"))
            .unwrap();
        let policy = Policy::new(
            false,
            &[
                allowed.display().to_string(),
                "s3://bucket/data".to_string(),
                "https://acme.blob.core.windows.net/logs/2026".to_string(),
                "gs://exports/day/".to_string(),
            ],
        )
        .unwrap();
        let a = |p: &Path| p.display().to_string();
        assert!(policy.path_allowed(&a(&allowed.join("a.csv"))));
        assert!(policy.path_allowed(&a(&allowed.join("sub/new.parquet"))));
        assert!(policy.path_allowed(&a(&allowed.join("sub/*.csv"))));
        assert!(policy.path_allowed(&format!("file://{}", a(&allowed.join("a.csv")))));
        assert!(!policy.path_allowed(&a(&dir.path().join("secret.csv"))));
        assert!(!policy.path_allowed(&a(&allowed.join("../secret.csv"))));
        assert!(!policy.path_allowed(&a(&allowed.join("sub/../../secret.csv"))));
        assert!(!policy.path_allowed(&a(&allowed.join("nosuch/../../secret.csv"))));
        assert!(!policy.path_allowed(&a(&dir.path().join("allowed2/x.csv"))));
        #[cfg(unix)]
        assert!(!policy.path_allowed(&a(&allowed.join("link.csv"))));
        assert!(!policy.path_allowed("/etc/passwd"));
        assert!(policy.path_allowed("s3://bucket/data/x.parquet"));
        assert!(policy.path_allowed("s3://bucket/data/"));
        assert!(!policy.path_allowed("s3://bucket/database/x.parquet"));
        assert!(!policy.path_allowed("s3://bucket/data/../other/x"));
        assert!(!policy.path_allowed("s3://other/data/x"));
        // One Azure location written either way is one prefix.
        assert!(policy.path_allowed("abfss://logs@acme.dfs.core.windows.net/2026/x.parquet"));
        assert!(policy.path_allowed("https://acme.blob.core.windows.net/logs/2026/x.parquet"));
        assert!(!policy.path_allowed("abfss://logs@acme.dfs.core.windows.net/2025/x.parquet"));
        assert!(!policy.path_allowed("abfss://logs@other.dfs.core.windows.net/2026/x.parquet"));
        assert!(policy.path_allowed("gs://exports/day/part-0.parquet"));
        assert!(!policy.path_allowed("gs://exports/daylight/part-0.parquet"));
        assert!(Policy::new(false, &["/no/such/dir".to_string()]).is_err());
        assert!(!Policy::default().path_allowed(&a(&allowed.join("a.csv"))));
    }

    #[test]
    fn names_and_paths() {
        assert!(!looks_like_a_path("clicks"));
        assert!(looks_like_a_path("/etc/passwd"));
        assert!(looks_like_a_path("x.csv"));
        assert!(looks_like_a_path("s3://b/k"));
    }
}
