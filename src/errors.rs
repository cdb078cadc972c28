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

/// What to do when a calibsql aggregate that keeps rows is among the consumers that ran out
/// of `--memory-limit`.
const KEPT_ROWS_HINT: &str = "raise --memory-limit; auc, auc_test, ece_debiased and 'quantile' bins spill \
their rows to disk, but the fits' states stay in memory, so \
filter or sample the rows, round the scores (repeated scores are counted instead of kept), or use a fixed-edge \
strategy such as 'uniform' or 'sklearn'; see docs/SEMANTICS.md#metrics-that-keep-rows";

/// What to do when any other query runs out of `--memory-limit`.
const MEMORY_HINT: &str =
    "raise --memory-limit, or make the query hold less at once: fewer groups \
or rows (a filter), smaller values, or a join whose smaller side is built";

/// The hint for a "Resources exhausted" message: calibsql's own advice only when one of
/// its aggregates is a consumer the message names (their reservations are named
/// `"<function> state"`, see `calibsql_udfs::spill_to`).
fn memory_hint(message: &str) -> &'static str {
    let names_a_calibsql_aggregate = calibsql_udfs::all_aggregate_functions()
        .iter()
        .any(|f| message.contains(&format!("{} state", f.name())));
    if names_a_calibsql_aggregate {
        KEPT_ROWS_HINT
    } else {
        MEMORY_HINT
    }
}

/// What to do when DataFusion 55's `push_down_leaf_projections` rule fails on valid SQL: the
/// same expression twice (`sum(x) AS a, sum(x) AS b`) beneath a struct field read plans to
/// "duplicate unqualified field name" (the rule's known faults: apache/datafusion#25459).
const LEAF_PUSHDOWN_HINT: &str = "this is a DataFusion 55 optimizer fault on valid SQL, met when the same \
expression appears twice beneath a struct field read (such as model['slope']): compute each expression once, or \
run SET datafusion.optimizer.enable_leaf_expression_pushdown = false first";

/// An error whose text is the whole message users see, with no kind prefix
/// ("Execution error: …"): wrap it in `DataFusionError::External`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plain(pub String);

impl std::fmt::Display for Plain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Plain {}

impl Plain {
    /// `message` as a DataFusion error that prints as `message`.
    pub fn error(message: impl Into<String>) -> DataFusionError {
        DataFusionError::External(Box::new(Plain(message.into())))
    }
}

/// The [`Plain`] error behind `error`, if any.
fn find_plain<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Plain> {
    let mut cause: Option<&'a (dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = cause {
        if let Some(found) = current.downcast_ref::<Plain>() {
            return Some(found);
        }
        if let Some(DataFusionError::External(inner)) = current.downcast_ref::<DataFusionError>() {
            if let Some(found) = inner.downcast_ref::<Plain>() {
                return Some(found);
            }
        }
        cause = current.source();
    }
    None
}

/// A gRPC status as Ballista passes it on (`Status { code: Internal, message: "…", metadata:
/// … }`) → its message.
fn grpc_status_message(text: &str) -> Option<String> {
    let start = text.find("Status { code: ")?;
    let rest = &text[start..];
    let message_start = rest.find("message: \"")? + "message: \"".len();
    let message_end = rest
        .find("\", metadata: ")
        .or_else(|| rest.find("\", source: "))?;
    (message_start <= message_end).then(|| {
        let message = rest[message_start..message_end].replace("\\\"", "\"");
        format!("{}{message}", &text[..start])
    })
}

/// A Ballista task's "Resources exhausted" as the client gets it, the task's error in its
/// debug form (`Job … failed: … DataFusionError(Shared(…ResourcesExhausted("…")…))`): the
/// job's words, the pool's message and the hint for executors.
fn remote_resources_exhausted(text: &str) -> Option<String> {
    const KIND: &str = "ResourcesExhausted(\"";
    let start = text.find(KIND)? + KIND.len();
    let end = start + text[start..].find("\")")?;
    let job = &text[..text.find("DataFusionError(")?];
    let pool = text[start..end].replace("\\\"", "\"");
    Some(format!(
        "{job}Resources exhausted: {pool} (hint: on a cluster the limit is each executor's, \
         calibsql executor --memory-limit: {})",
        memory_hint(&pool)
    ))
}

/// A plan the scheduler (or an executor) could not decode because it nests more messages
/// than protobuf decoding allows (prost's limit of 100: about 30 levels of `CASE` or of
/// nested function calls; operator chains are sent flat): one line saying so, instead of the
/// decoder's stack of 100 message names.
fn remote_plan_too_deep(text: &str) -> Option<String> {
    text.contains("RecursionLimitReached").then(|| {
        "the cluster cannot decode this statement's plan: it nests deeper than protobuf \
         decoding allows (100 nested messages, about 30 levels of CASE or of nested function \
         calls); run it without --remote, or nest less (docs/distributed.md)"
            .to_string()
    })
}

fn describe_datafusion(error: &DataFusionError) -> String {
    if let Some(plain) = find_plain(error) {
        return plain.to_string();
    }
    // An object store failure deep in a query says it all (endpoint, object, what to change), without
    // DataFusion's and object_store's wrapping ("Object Store error: Generic S3 error: …").
    if let Some(explained) = crate::stores::find_error(error) {
        return explained.to_string();
    }
    if let DataFusionError::ResourcesExhausted(_) = error.find_root() {
        let text = error.to_string();
        return format!("{text} (hint: {})", memory_hint(&text));
    }
    let text = error.to_string();
    if let Some(message) = remote_resources_exhausted(&text) {
        return message;
    }
    if let Some(message) = remote_plan_too_deep(&text) {
        return message;
    }
    if text.contains("'push_down_leaf_projections' failed") {
        return format!("{text} (hint: {LEAF_PUSHDOWN_HINT})");
    }
    match error {
        // `SQL error: ParserError("…")` → `SQL error: …`
        DataFusionError::SQL(error, _) => match error.as_ref() {
            ParserError::ParserError(text) | ParserError::TokenizerError(text) => {
                format!("SQL error: {text}")
            }
            other => format!("SQL error: {other}"),
        },
        other => {
            let text = other.to_string();
            grpc_status_message(&text).unwrap_or(text)
        }
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
    use super::{dedup_segments, grpc_status_message, one_line, remote_resources_exhausted};

    #[test]
    fn a_remote_tasks_resources_exhausted_reads_as_one() {
        let text = "Execution error: Job 038GXKB9XA000 failed: Job failed due to stage 0 failed: \
            Task failed due to runtime execution error: DataFusionError(Shared(External(\
            DataFusionError(ResourcesExhausted(\"Failed to allocate additional 6.0 MB for \
            AggregateStream[0] with 6.1 MB already allocated for this reservation\")))))";
        let message = remote_resources_exhausted(text).unwrap();
        assert!(
            message.starts_with(
                "Execution error: Job 038GXKB9XA000 failed: Job failed due to stage 0 failed: \
                 Task failed due to runtime execution error: Resources exhausted: Failed to \
                 allocate additional 6.0 MB for AggregateStream[0] with 6.1 MB already \
                 allocated for this reservation (hint: on a cluster the limit is each \
                 executor's, calibsql executor --memory-limit: raise --memory-limit, or make \
                 the query hold less at once"
            ),
            "{message}"
        );
        assert_eq!(remote_resources_exhausted("Resources exhausted: x"), None);
    }

    #[test]
    fn the_kept_rows_hint_only_when_a_calibsql_aggregate_is_a_consumer() {
        use super::{memory_hint, KEPT_ROWS_HINT, MEMORY_HINT};
        let ours = "Failed to allocate additional 6.0 MB for fit_isotonic state with 1.0 MB \
                    already allocated for this reservation";
        assert_eq!(memory_hint(ours), KEPT_ROWS_HINT);
        let listed = "Additional allocation failed for X with top memory consumers (across \
                      reservations) as: auc state#7(can spill: false) consumed 30.0 MB";
        assert_eq!(memory_hint(listed), KEPT_ROWS_HINT);
        let theirs = "Failed to allocate additional 60.0 MB for AggregateStream[0] with 1.0 MB \
                      already allocated for this reservation";
        assert_eq!(memory_hint(theirs), MEMORY_HINT);
    }

    #[test]
    fn grpc_statuses_lose_their_wrapping() {
        let text = "Execution error: Status { code: InvalidArgument, message: \"Could not parse plan: \\\"x\\\"\", metadata: MetadataMap { headers: {} }, source: None }";
        assert_eq!(
            grpc_status_message(text).unwrap(),
            "Execution error: Could not parse plan: \"x\""
        );
        assert_eq!(grpc_status_message("plain"), None);
    }

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
