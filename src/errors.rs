//! The one-line error messages users see, from the CLI (`Error: …`) and from Python
//! (`calibsql.Error`): the same text in both.

use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::parser::ParserError;

/// The message of `error` on one line, without an `Error:` prefix.
pub fn message(error: &anyhow::Error) -> String {
    one_line(&describe(error))
}

/// [`message`] of a DataFusion error.
pub fn datafusion_message(error: &DataFusionError) -> String {
    one_line(&dedup_segments(&describe_datafusion(error)))
}

/// The error and its causes, each said once: a DataFusion error already includes its
/// source's text, an `anyhow` context does not.
fn describe(error: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in error.chain() {
        if let Some(error) = cause.downcast_ref::<DataFusionError>() {
            parts.push(describe_datafusion(error));
            break;
        }
        parts.push(cause.to_string());
    }
    dedup_segments(&parts.join(": "))
}

/// What to do when a query needs more memory than `--memory-limit` allows.
const MEMORY_HINT: &str = "raise --memory-limit; auc, ece_debiased and 'quantile' bins keep 8 bytes per \
row (16 with a weight) per group, so filter or sample the rows, or use a fixed-edge strategy such as 'uniform' \
or 'sklearn'; see docs/SEMANTICS.md#metrics-that-keep-rows";

fn describe_datafusion(error: &DataFusionError) -> String {
    // An S3 failure deep in a query says it all (endpoint, object, what to change), without
    // DataFusion's and object_store's wrapping ("Object Store error: Generic S3 error: …").
    if let Some(s3) = crate::s3::find_error(error) {
        return s3.to_string();
    }
    if let DataFusionError::ResourcesExhausted(_) = error.find_root() {
        return format!("{error} (hint: {MEMORY_HINT})");
    }
    match error {
        // `SQL error: ParserError("…")` → `SQL error: …`
        DataFusionError::SQL(error, _) => match error.as_ref() {
            ParserError::ParserError(text) | ParserError::TokenizerError(text) => {
                format!("SQL error: {text}")
            }
            other => format!("SQL error: {other}"),
        },
        other => other.to_string(),
    }
}

/// `Parquet error: Parquet error: x` → `Parquet error: x` (DataFusion nests some errors in
/// their own kind).
fn dedup_segments(message: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    for segment in message.split(": ") {
        if kept.last() != Some(&segment) {
            kept.push(segment);
        }
    }
    kept.join(": ")
}

/// Folds a multi-line message (DataFusion's "caused by" chains, memory reports) into one line.
pub fn one_line(message: &str) -> String {
    message
        .replace("\ncaused by\n", ": ")
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::{dedup_segments, one_line};

    #[test]
    fn messages_fold_to_one_line() {
        assert_eq!(
            one_line("reading x\ncaused by\nParquet error: bad\n  footer\n"),
            "reading x: Parquet error: bad footer"
        );
        assert_eq!(
            dedup_segments("cannot read x: Parquet error: Parquet error: bad"),
            "cannot read x: Parquet error: bad"
        );
    }
}
