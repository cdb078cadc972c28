//! Registering files, directories and globs as tables.
//!
//! [`register_table`] turns a location string — a file, a directory or a glob such as
//! `logs/2026-*/part-*.parquet` — into a DataFusion [`ListingTable`]. The format comes from
//! the file extension (for a directory: from the files in it) unless it is given.
//!
//! Every location string goes through `resolve`, the one place that knows about paths and
//! URLs; each scheme (local paths, `file://`, object stores) is an arm there that returns the
//! listing URLs and the file names to infer the format from; object store listing itself is
//! `crate::stores::list_location`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::Session;
use datafusion::common::{not_impl_err, plan_datafusion_err, plan_err, DataFusionError, Result};
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::context::SessionState;
use datafusion::prelude::SessionContext;
use futures::TryStreamExt;
use url::Url;

/// The file formats a table can be read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TableFormat {
    /// Apache Parquet (`.parquet`, `.parq`).
    Parquet,
    /// Comma-separated values with a header line (`.csv`, optionally `.gz`/`.bz2`/`.xz`/`.zst`).
    Csv,
    /// Newline-delimited JSON, one object per line (`.json`, `.ndjson`, `.jsonl`, optionally
    /// compressed like CSV).
    NdJson,
}

impl TableFormat {
    /// All formats, in the order they are listed in messages.
    pub const ALL: [TableFormat; 3] = [TableFormat::Parquet, TableFormat::Csv, TableFormat::NdJson];

    /// The canonical lower-case name (`parquet`, `csv`, `ndjson`).
    pub fn name(self) -> &'static str {
        match self {
            TableFormat::Parquet => "parquet",
            TableFormat::Csv => "csv",
            TableFormat::NdJson => "ndjson",
        }
    }

    /// The format called `name` (case-insensitive): `parquet`, `csv`, `ndjson` or `json`.
    pub fn from_name(name: &str) -> Option<TableFormat> {
        match name.to_ascii_lowercase().as_str() {
            "parquet" => Some(TableFormat::Parquet),
            "csv" => Some(TableFormat::Csv),
            "ndjson" | "json" | "jsonl" => Some(TableFormat::NdJson),
            _ => None,
        }
    }

    /// The format of a file, judged by its extension (case-insensitive); a compression
    /// suffix (`.gz`, `.bz2`, `.xz`, `.zst`) after `.csv`/`.json`/`.ndjson`/`.jsonl` is allowed.
    ///
    /// ```
    /// use calibsql::tables::TableFormat;
    /// assert_eq!(TableFormat::from_path("logs/part-0.parquet"), Some(TableFormat::Parquet));
    /// assert_eq!(TableFormat::from_path("events.jsonl.gz"), Some(TableFormat::NdJson));
    /// assert_eq!(TableFormat::from_path("notes.txt"), None);
    /// ```
    pub fn from_path(path: &str) -> Option<TableFormat> {
        FileKind::detect(path).map(|kind| kind.format)
    }

    /// The name DataFusion registers this format's factory under.
    fn factory_name(self) -> &'static str {
        match self {
            TableFormat::Parquet => "parquet",
            TableFormat::Csv => "csv",
            TableFormat::NdJson => "json",
        }
    }
}

impl fmt::Display for TableFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of parsing a [`TableFormat`] name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownTableFormat(pub String);

impl fmt::Display for UnknownTableFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown table format '{}' (expected parquet, csv, json or ndjson)",
            self.0
        )
    }
}

impl std::error::Error for UnknownTableFormat {}

impl FromStr for TableFormat {
    type Err = UnknownTableFormat;

    /// Parses `parquet`, `csv`, `json`, `ndjson` or `jsonl` (case-insensitive).
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "parquet" | "parq" => Ok(TableFormat::Parquet),
            "csv" => Ok(TableFormat::Csv),
            "json" | "ndjson" | "jsonl" => Ok(TableFormat::NdJson),
            _ => Err(UnknownTableFormat(s.to_string())),
        }
    }
}

/// What a file name says about its contents: format, compression, and the full suffix
/// (e.g. `.csv.gz`) used to filter a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileKind {
    format: TableFormat,
    compression: FileCompressionType,
    suffix: String,
}

impl FileKind {
    fn detect(path: &str) -> Option<FileKind> {
        let file_name = path.rsplit(['/', '\\']).next().unwrap_or(path);
        let lower = file_name.to_ascii_lowercase();
        let (stem, compression) = match lower.rsplit_once('.') {
            Some((stem, "gz")) => (stem, FileCompressionType::GZIP),
            Some((stem, "bz2")) => (stem, FileCompressionType::BZIP2),
            Some((stem, "xz")) => (stem, FileCompressionType::XZ),
            Some((stem, "zst")) => (stem, FileCompressionType::ZSTD),
            _ => (lower.as_str(), FileCompressionType::UNCOMPRESSED),
        };
        let (_, extension) = stem.rsplit_once('.')?;
        let format = match extension {
            "parquet" | "parq" if !compression.is_compressed() => TableFormat::Parquet,
            "csv" => TableFormat::Csv,
            "json" | "ndjson" | "jsonl" => TableFormat::NdJson,
            _ => return None,
        };
        // ASCII lower-casing keeps byte offsets, so the suffix keeps the file's own case
        // (listing filters compare it case-sensitively).
        let suffix = file_name[stem.rfind('.')?..].to_string();
        Some(FileKind {
            format,
            compression,
            suffix,
        })
    }
}

/// A location resolved to what a listing table needs.
#[derive(Debug)]
struct Resolved {
    /// The URLs the table lists (one per file for a glob).
    urls: Vec<ListingTableUrl>,
    /// Whether the location is a directory (then the listing is filtered by extension and
    /// `key=value` sub-directories become partition columns).
    directory: bool,
    /// Names of the data files found, to infer the format from.
    files: Vec<String>,
}

impl From<crate::stores::StoreListing> for Resolved {
    fn from(listing: crate::stores::StoreListing) -> Self {
        Resolved {
            urls: listing.urls,
            directory: listing.directory,
            files: listing.files,
        }
    }
}

/// Registers `location` as table `name` on `ctx`.
///
/// `name` is read as in SQL: unquoted letters are lower-cased and `schema.table` names a
/// table in another (existing) schema.
///
/// `location` is a file, a directory (its data files, plus those in `key=value`
/// sub-directories, which become partition columns), or a glob (`data/*.parquet`,
/// `logs/2026-*/part-*.parquet`; `*`, `?` and `[…]` as in a shell, matching across one
/// path segment each). Relative paths are resolved against the current directory and
/// `file://` URLs are accepted.
///
/// Object store locations work the same way (an object, a prefix — with or without the
/// trailing `/` — or a glob such as `s3://logs/2026-11-*/*.parquet`): `s3://`, `az://`,
/// `abfss://container@account.dfs.core.windows.net/…`, `gs://`, and read-only `http(s)://`
/// files, on a session with object store support ([`crate::new_context`],
/// [`crate::register_object_stores`]).
///
/// `format` overrides the format the file extensions imply; it is needed for files whose
/// extension says nothing (e.g. `part-00000`). The schema is inferred now, from all matched
/// files (Parquet footers are read, CSV/JSON files sampled), so an unreadable file fails here.
///
/// Errors are planning errors with a message naming the location: a missing path, a glob that
/// matches no file, an unknown extension, a directory without data files or with several
/// formats, or a table name already in use.
pub async fn register_table(
    ctx: &SessionContext,
    name: &str,
    location: &str,
    format: Option<TableFormat>,
) -> Result<()> {
    if name.trim().is_empty() {
        return plan_err!("table name for {location} is empty");
    }
    let location = crate::stores::canonical_location(location);
    let location = location.as_ref();
    // A directory with a transaction log is a Delta table (unless a file format is named):
    // its files include deleted and replaced ones that only the log tells apart.
    if format.is_none() && crate::delta::holds_delta_log(&ctx.state(), location).await? {
        let table = crate::delta::DeltaTableProvider::open(
            &ctx.state(),
            location,
            crate::delta::At::Latest,
        )
        .await?;
        if ctx.table_exist(name)? {
            return plan_err!("table '{name}' already exists");
        }
        ctx.register_table(name, Arc::new(table))?;
        return Ok(());
    }
    let resolved = resolve(&ctx.state(), location).await?;
    let (format, compression, suffix) = choose_format(location, &resolved, format)?;

    let state = ctx.state();
    let file_format = make_file_format(&state, format, compression)?;
    // A directory listing only keeps files with the data files' suffix (so `_SUCCESS`,
    // `.crc` and the like are skipped); files named explicitly (a path or a glob match) are
    // all read, whatever their extension.
    let extension = if resolved.directory {
        suffix
    } else {
        String::new()
    };
    let mut options = ListingOptions::new(file_format).with_file_extension(extension);

    if resolved.directory {
        let partitions = options
            .infer_partitions(&state, &resolved.urls[0])
            .await
            .map_err(|e| with_location(location, e))?;
        let dictionary = DataType::Dictionary(Box::new(DataType::UInt16), Box::new(DataType::Utf8));
        options = options.with_table_partition_cols(
            partitions
                .into_iter()
                .map(|column| (column, dictionary.clone()))
                .collect(),
        );
    }

    let schema = infer_schema(&state, &options, &resolved.urls)
        .await
        .map_err(|e| with_location(location, e))?;
    let config = ListingTableConfig::new_with_multi_paths(resolved.urls)
        .with_listing_options(options)
        .with_schema(schema);
    let table = ListingTable::try_new(config)?
        .with_cache(state.runtime_env().cache_manager.get_file_statistic_cache());

    if ctx.table_exist(name)? {
        return plan_err!("table '{name}' already exists");
    }
    ctx.register_table(name, Arc::new(table))?;
    Ok(())
}

/// Turns a location string into listing URLs. The only place that interprets paths and URLs.
async fn resolve(state: &SessionState, location: &str) -> Result<Resolved> {
    if location.trim().is_empty() {
        return plan_err!("empty table location");
    }
    if let Some((scheme, _)) = location.split_once("://") {
        let url = Url::parse(location)
            .map_err(|e| plan_datafusion_err!("invalid URL {location}: {e}"))?;
        return match url.scheme() {
            "file" => {
                let path = url
                    .to_file_path()
                    .map_err(|()| plan_datafusion_err!("invalid file URL {location}"))?;
                resolve_local(&path.to_string_lossy())
            }
            _ if crate::stores::store_root(&url).is_some() => {
                crate::stores::list_location(state, location)
                    .await
                    .map(Resolved::from)
            }
            _ => not_impl_err!(
                "unsupported location {location}: '{scheme}://' URLs are not supported (local \
                 paths, file://, s3://, az://, abfss://, gs:// and http(s):// URLs are)"
            ),
        };
    }
    resolve_local(location)
}

fn resolve_local(location: &str) -> Result<Resolved> {
    let path = Path::new(location);
    // An existing path is taken literally, even if its name contains glob characters.
    if !path.exists() && location.contains(['*', '?', '[']) {
        return resolve_glob(location);
    }
    let metadata = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            plan_datafusion_err!("no such file or directory: {location}")
        }
        _ => plan_datafusion_err!("cannot read {location}: {e}"),
    })?;
    let absolute = std::path::absolute(path)
        .map_err(|e| plan_datafusion_err!("cannot resolve {location}: {e}"))?;
    if metadata.is_dir() {
        let mut files = Vec::new();
        collect_directory_files(&absolute, &mut files)
            .map_err(|e| plan_datafusion_err!("cannot list directory {location}: {e}"))?;
        let url = Url::from_directory_path(&absolute)
            .map_err(|()| plan_datafusion_err!("cannot turn {location} into a URL"))?;
        Ok(Resolved {
            urls: vec![ListingTableUrl::try_new(url, None)?],
            directory: true,
            files,
        })
    } else {
        Ok(Resolved {
            urls: vec![file_url(&absolute)?],
            directory: false,
            files: vec![location.to_string()],
        })
    }
}

fn resolve_glob(pattern: &str) -> Result<Resolved> {
    let options = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: true,
    };
    let entries = glob::glob_with(pattern, options)
        .map_err(|e| plan_datafusion_err!("invalid glob {pattern}: {e}"))?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| {
            plan_datafusion_err!("cannot read {}: {}", e.path().display(), e.error())
        })?;
        if path.is_file() {
            paths.push(path);
        }
    }
    if paths.is_empty() {
        return plan_err!("no files match {pattern}");
    }
    paths.sort();
    let mut urls = Vec::with_capacity(paths.len());
    let mut files = Vec::with_capacity(paths.len());
    for path in paths {
        let absolute = std::path::absolute(&path)
            .map_err(|e| plan_datafusion_err!("cannot resolve {}: {e}", path.display()))?;
        urls.push(file_url(&absolute)?);
        files.push(path.to_string_lossy().into_owned());
    }
    Ok(Resolved {
        urls,
        directory: false,
        files,
    })
}

/// A listing URL for one local file, built without glob interpretation of its name.
fn file_url(absolute: &Path) -> Result<ListingTableUrl> {
    let url = Url::from_file_path(absolute)
        .map_err(|()| plan_datafusion_err!("cannot turn {} into a URL", absolute.display()))?;
    ListingTableUrl::try_new(url, None)
}

/// The files DataFusion will list in a directory: its own files plus, recursively, those of
/// `key=value` (Hive partition) sub-directories; hidden (`.x`) and marker (`_x`) files are
/// skipped.
fn collect_directory_files(dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    entries.sort();
    for path in entries {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.starts_with('.') || name.starts_with('_') {
            continue;
        }
        if path.is_dir() {
            if name.contains('=') {
                collect_directory_files(&path, out)?;
            }
        } else {
            out.push(path.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// Picks the format, compression and listing suffix from the explicit format or the files.
fn choose_format(
    location: &str,
    resolved: &Resolved,
    explicit: Option<TableFormat>,
) -> Result<(TableFormat, FileCompressionType, String)> {
    let kinds: Vec<Option<FileKind>> = resolved.files.iter().map(|f| FileKind::detect(f)).collect();

    if let Some(format) = explicit {
        // For a directory, list the files whose suffix says `format` if they share one
        // suffix, else every file. Named files are read as given, decompressed only if all
        // of them carry the same compression suffix.
        let matching: Vec<&FileKind> = kinds
            .iter()
            .flatten()
            .filter(|k| k.format == format)
            .collect();
        let shared = matching
            .first()
            .filter(|first| matching.iter().all(|k| k.suffix == first.suffix));
        return Ok(match shared {
            Some(kind) if resolved.directory => (format, kind.compression, kind.suffix.clone()),
            Some(kind) if matching.len() == kinds.len() => {
                (format, kind.compression, String::new())
            }
            _ => (format, FileCompressionType::UNCOMPRESSED, String::new()),
        });
    }

    if resolved.directory && resolved.files.is_empty() {
        return plan_err!("directory {location} has no data files");
    }
    let mut found: Vec<&FileKind> = Vec::new();
    for (file, kind) in resolved.files.iter().zip(&kinds) {
        match kind {
            Some(kind) => {
                if !found.iter().any(|k| k.suffix == kind.suffix) {
                    found.push(kind);
                }
            }
            // Stray files in a directory are left out by the suffix filter.
            None if resolved.directory => {}
            None => {
                return plan_err!(
                    "cannot tell the format of {file} from its extension; \
                     name it with --table-format parquet|csv|ndjson"
                )
            }
        }
    }
    let first = match found.first() {
        Some(first) => *first,
        None => {
            return plan_err!(
                "directory {location} has no .parquet, .csv or .json files; \
                 name the format with --table-format parquet|csv|ndjson"
            )
        }
    };
    let same_kind = found
        .iter()
        .all(|k| k.format == first.format && k.compression == first.compression);
    if found.len() == 1 || (same_kind && !resolved.directory) {
        // Named files need no suffix filter.
        let suffix = if resolved.directory {
            first.suffix.clone()
        } else {
            String::new()
        };
        return Ok((first.format, first.compression, suffix));
    }
    let suffixes: Vec<&str> = found.iter().map(|k| k.suffix.as_str()).collect();
    let suffixes_list = suffixes.join(", ");
    if resolved.directory {
        plan_err!(
            "directory {location} mixes file types ({suffixes_list}); \
             pick one with a glob such as {}/*{}",
            location.trim_end_matches('/'),
            suffixes[0]
        )
    } else {
        plan_err!("{location} matches several file types ({suffixes_list}); narrow it to one")
    }
}

/// The session's file format for `format` (so `SET datafusion.…` table options apply), with
/// `compression` for CSV and JSON.
fn make_file_format(
    state: &SessionState,
    format: TableFormat,
    compression: FileCompressionType,
) -> Result<Arc<dyn FileFormat>> {
    let factory = state
        .get_file_format_factory(format.factory_name())
        .ok_or_else(|| {
            plan_datafusion_err!("the {format} format is not available in this session")
        })?;
    let mut options = std::collections::HashMap::new();
    if compression.is_compressed() {
        let variant = match compression.get_variant() {
            datafusion::common::parsers::CompressionTypeVariant::GZIP => "gzip",
            datafusion::common::parsers::CompressionTypeVariant::BZIP2 => "bzip2",
            datafusion::common::parsers::CompressionTypeVariant::XZ => "xz",
            datafusion::common::parsers::CompressionTypeVariant::ZSTD => "zstd",
            datafusion::common::parsers::CompressionTypeVariant::UNCOMPRESSED => "uncompressed",
        };
        options.insert("format.compression".to_string(), variant.to_string());
    }
    factory.create(state, &options)
}

/// The schema of all files behind `urls`, merged (DataFusion's own inference uses only the
/// first URL, which would drop columns that appear only in later files of a glob).
async fn infer_schema(
    state: &SessionState,
    options: &ListingOptions,
    urls: &[ListingTableUrl],
) -> Result<datafusion::arrow::datatypes::SchemaRef> {
    let store = state.runtime_env().object_store(&urls[0])?;
    let mut objects = Vec::new();
    for url in urls {
        let listed: Vec<_> = url
            .list_all_files(
                state as &dyn Session,
                store.as_ref(),
                &options.file_extension,
            )
            .await?
            .try_collect()
            .await?;
        objects.extend(listed);
    }
    if objects.is_empty() {
        return plan_err!("no data files found");
    }
    // Empty files cannot contribute to the schema and some readers reject them.
    objects.retain(|object| object.size > 0);
    if objects.is_empty() {
        return plan_err!("all data files are empty");
    }
    match options.format.infer_schema(state, &store, &objects).await {
        Ok(schema) => Ok(schema),
        Err(error) if crate::stores::find_error(&error).is_none() => {
            // Name the file that cannot be read (e.g. a text file called `x.parquet`).
            for object in &objects {
                if let Err(single) = options
                    .format
                    .infer_schema(state, &store, std::slice::from_ref(object))
                    .await
                {
                    let url = format!("{}{}", urls[0].object_store().as_str(), object.location);
                    let message = single.message().to_string();
                    return if options.format.get_ext() == "parquet" {
                        plan_err!("{url} is not a Parquet file ({})", one_line(&message))
                    } else {
                        plan_err!("cannot read {url}: {}", one_line(&message))
                    };
                }
            }
            Err(error)
        }
        Err(error) => Err(error),
    }
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Adds the location to an error from reading files, keeping messages on one line.
fn with_location(location: &str, error: DataFusionError) -> DataFusionError {
    match error {
        // Our own messages already say what is wrong; name the location in them.
        DataFusionError::Plan(message) if message.contains(location) => {
            DataFusionError::Plan(message)
        }
        DataFusionError::Plan(message) => DataFusionError::Plan(format!("{location}: {message}")),
        // S3 explanations name the object and what to change.
        other if crate::stores::find_error(&other).is_some() => {
            let message = crate::stores::find_error(&other).map(|e| e.to_string());
            DataFusionError::Execution(message.unwrap_or_default())
        }
        other => DataFusionError::Execution(format!("cannot read {location}: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_from_names() {
        assert_eq!("parquet".parse(), Ok(TableFormat::Parquet));
        assert_eq!("CSV".parse(), Ok(TableFormat::Csv));
        assert_eq!("json".parse(), Ok(TableFormat::NdJson));
        assert_eq!("ndjson".parse(), Ok(TableFormat::NdJson));
        assert!("avro".parse::<TableFormat>().is_err());
    }

    #[test]
    fn formats_and_compression_come_from_extensions() {
        let kind = FileKind::detect("a/b/x.CSV.gz").unwrap();
        assert_eq!(kind.format, TableFormat::Csv);
        assert_eq!(kind.compression, FileCompressionType::GZIP);
        assert_eq!(kind.suffix, ".CSV.gz");
        assert_eq!(TableFormat::from_path("x.parq"), Some(TableFormat::Parquet));
        assert_eq!(TableFormat::from_path("x.jsonl"), Some(TableFormat::NdJson));
        assert_eq!(TableFormat::from_path("x.parquet.gz"), None);
        assert_eq!(TableFormat::from_path("parquet"), None);
        assert_eq!(TableFormat::from_path("x.txt"), None);
    }
}
