//! The SQL a report runs and the reading of its results into [`ReportData`].
//!
//! The user's query (the last statement; earlier ones such as `CREATE VIEW` run first) becomes
//! the common table expression `source`; `input` renames its columns, casts `y` and `w` to
//! numbers and leaves out rows whose `p`, `y` or `w` is NULL or NaN. Each section is then one
//! scan of the data: the row count, the headline numbers and the reliability bins of every
//! model, the sums per value of each `--field`, and the daily sums and states. The scans are
//! plain SQL text (no registered views) and shallow plans, so they run the same on a local
//! session and on a Ballista cluster. What follows a scan (ranking and pooling the segments,
//! merging the daily states over rolling windows, the drift rule) is SQL too, run on a local
//! session over the scan's grouped result: a few rows per model and value or day. The
//! appendix shows every statement as run.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StructArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type, Schema, SchemaRef};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;

use super::data::{
    Bin, Columns, Comparison, Day, FieldSegments, ModelData, Parameters, Query, ReportData,
    Segment, Status, SCHEMA_VERSION,
};
use super::{status, ReportOptions};

/// `logloss`'s default clipping constant, spelled out where a weight follows it.
const LOGLOSS_EPS: &str = "2.220446049250313e-16";
/// `field_rce`'s default smoothing, spelled out where a weight follows it.
const FIELD_RCE_EPS: &str = "0.01";
/// Normal quantile of the intervals (95%).
const Z: &str = "1.959963984540054";
/// Confidence level of every interval of the report (the normal quantile 1.96).
pub const LEVEL: f64 = 0.95;
/// Segments listed per field before the rest is pooled.
pub const TOP_SEGMENTS: u32 = 20;

/// A SQL string literal (`'` doubled inside).
fn literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// A SQL identifier, quoted (`"` doubled inside).
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Runs the report's queries and reads their results.
pub async fn compute(
    ctx: &SessionContext,
    sql: &str,
    options: &ReportOptions,
) -> anyhow::Result<ReportData> {
    let source = prepare(ctx, sql).await?;
    let schema = crate::sql(ctx, &format!("SELECT * FROM ({source}) AS source LIMIT 0"))
        .await?
        .schema()
        .as_arrow()
        .clone();
    let columns = check_columns(&schema, options)?;
    let plan = Plan::new(&source, &schema, &columns, options);
    let mut queries = vec![Query {
        section: "input".to_string(),
        sql: plan.input_view(),
    }];
    let mut notes = Vec::new();

    let count_sql = plan.count_sql();
    let counts = run(ctx, &plan.with_input(&count_sql), "the row count").await?;
    queries.push(Query {
        section: "rows".to_string(),
        sql: count_sql,
    });
    let row = Rows::new(&counts);
    let (rows, rows_dropped) = (
        row.i64("rows", 0).unwrap_or(0),
        row.i64("dropped", 0).unwrap_or(0),
    );
    let rows_unlabelled = row.i64("unlabelled", 0).unwrap_or(0);
    let generated_at = row.string("generated_at", 0);
    if rows == 0 {
        notes.push("The query returned no rows: nothing could be computed.".to_string());
    } else if rows_dropped == rows {
        notes.push(format!(
            "All {rows} rows have a NULL or NaN p or y{}: nothing could be computed.",
            if columns.w { " or w" } else { "" }
        ));
    } else if rows_dropped > 0 {
        notes.push(format!(
            "{rows_dropped} of {rows} rows have a NULL or NaN p or y{} and are left out.",
            if columns.w { " or w" } else { "" }
        ));
    }

    // The segments' and days' scans run beside the headline's, whose end (sorting the rows,
    // the isotonic and DeLong sweeps) holds one core; dropping `scans` (an error) stops them.
    let mut scans = tokio::task::JoinSet::new();
    let mut spawn_scan = |slot: usize, sql: String, what: String| {
        let ctx = ctx.clone();
        scans.spawn(async move { (slot, run_with_schema(&ctx, &sql, &what).await) });
    };
    let field_scans: Vec<(String, String)> = options
        .fields
        .iter()
        .enumerate()
        .map(|(k, field)| {
            let what = format!("the segments of --field {field}");
            (plan.field_values_sql(k), what)
        })
        .collect();
    for (k, (scan_sql, what)) in field_scans.iter().enumerate() {
        spawn_scan(k, plan.with_input(scan_sql), what.clone());
    }
    let daily_scan = columns.day.then(|| plan.daily_states_sql());
    if let Some(scan_sql) = &daily_scan {
        let what = "the daily values".to_string();
        spawn_scan(field_scans.len(), plan.with_input(scan_sql), what);
    }

    let headline_sql = plan.headline_sql();
    let headline = run(ctx, &plan.with_input(&headline_sql), "the headline numbers").await?;
    queries.push(Query {
        section: "headline".to_string(),
        sql: headline_sql,
    });
    let mut models = read_models(&headline, options)?;
    if rows_unlabelled > 0 {
        notes.push(format!(
            "{rows_unlabelled} rows have a probability but no label yet: the headline's \
             \"AUC expected from p\" is what the probabilities of every scored row imply (CBPE), \
             beside the AUC realised on the labelled rows."
        ));
        let expected_sql = plan.expected_sql();
        let what = "the expected AUC";
        let batches = run(ctx, &plan.with_input(&expected_sql), what).await?;
        queries.push(Query {
            section: "expected AUC".to_string(),
            sql: expected_sql,
        });
        let rows = Rows::new(&batches);
        for r in 0..rows.len() {
            let name = rows.string("model", r);
            if let Some(m) = model_mut(&mut models, name.as_deref()) {
                m.expected_auc = rows.f64("expected_auc", r);
                m.scored_rows = rows.i64("scored", r);
            }
        }
    }

    let mut scanned: Vec<Option<(SchemaRef, Vec<RecordBatch>)>> =
        vec![None; field_scans.len() + usize::from(daily_scan.is_some())];
    while let Some(done) = scans.join_next().await {
        let (slot, result) = done.context("report: a scan stopped")?;
        scanned[slot] = Some(result?);
    }
    let mut scanned = scanned.into_iter();
    let mut next_scan = || {
        scanned
            .next()
            .flatten()
            .context("report: a scan did not report")
    };

    // Ranking, pooling, rolling windows and the drift rule run locally over the scans' small
    // results.
    let segments_sql = plan.segments_sql();
    for (k, ((scan_sql, what), field)) in field_scans.into_iter().zip(&options.fields).enumerate() {
        let values = next_scan()?;
        let batches = run_over(values, "field_values", &segments_sql, &what).await?;
        queries.push(Query {
            section: format!("segments of {field}: field_values"),
            sql: scan_sql,
        });
        read_segments(&batches, &headline, field, k, &mut models)?;
    }
    if !options.fields.is_empty() {
        queries.push(Query {
            section: "segments, over field_values".to_string(),
            sql: segments_sql,
        });
    }

    if let Some(scan_sql) = daily_scan {
        let daily_sql = plan.daily_sql();
        let states = next_scan()?;
        let batches = run_over(states, "daily", &daily_sql, "the daily values").await?;
        queries.push(Query {
            section: "over time: daily".to_string(),
            sql: scan_sql,
        });
        queries.push(Query {
            section: "over time, over daily".to_string(),
            sql: daily_sql,
        });
        read_daily(&batches, &mut models)?;
    }

    let mut comparisons = Vec::new();
    if models.len() >= 2 {
        if !columns.key {
            notes.push(
                "The query has no key column: the models are not compared pairwise (give each \
                 event's id as key to get the paired ECE and AUC tests)."
                    .to_string(),
            );
        } else if columns.w {
            notes.push(
                "The paired comparison and the ECE and AUC intervals are unweighted tests: with \
                 a w column they are not shown."
                    .to_string(),
            );
        } else {
            let best = best_model(&models);
            for other in models.iter().filter(|m| m.model != best) {
                let (Some(a), Some(b)) = (best.as_deref(), other.model.as_deref()) else {
                    continue;
                };
                let sql = plan.comparison_sql(a, b);
                let what = format!("the comparison of {a} with {b}");
                let batches = run(ctx, &plan.with_input(&sql), &what).await?;
                queries.push(Query {
                    section: format!("comparison: {a} with {b}"),
                    sql,
                });
                let comparison = read_comparison(&batches, a, b);
                if comparison.label_mismatches > 0 {
                    notes.push(format!(
                        "{a} and {b} disagree on the label of {} of the {} rows they share by key: \
                         is key an event id? The comparison uses {a}'s labels.",
                        comparison.label_mismatches, comparison.rows
                    ));
                }
                comparisons.push(comparison);
            }
        }
    }

    for model in &mut models {
        describe_gaps(model, &columns, options);
        model.status = status::of(model);
    }
    let weight = models
        .iter()
        .map(|m| m.weight)
        .try_fold(0.0, |sum, w| w.map(|w| sum + w));
    let time_range = if columns.day {
        time_range(&headline)
    } else {
        None
    };
    if !columns.model {
        for model in &mut models {
            model.model = None;
        }
    }
    Ok(ReportData {
        schema_version: SCHEMA_VERSION,
        title: options
            .title
            .clone()
            .unwrap_or_else(|| "Calibration report".to_string()),
        source: options.source.clone(),
        sql: sql.trim().to_string(),
        calibsql_version: env!("CARGO_PKG_VERSION").to_string(),
        generated_at,
        parameters: Parameters {
            bins: options.bins,
            strategy: options.strategy.sql().to_string(),
            fields: options.fields.clone(),
            reference_days: options.reference_days,
            level: LEVEL,
            top_segments: TOP_SEGMENTS,
        },
        rows,
        rows_dropped,
        rows_unlabelled,
        weight: if models.is_empty() { None } else { weight },
        time_range,
        columns,
        models,
        comparisons,
        notes,
        queries,
    })
}

/// Runs every statement of `sql` but the last and returns the last, a query, as SQL text.
async fn prepare(ctx: &SessionContext, sql: &str) -> anyhow::Result<String> {
    let mut statements = crate::parse_statements(ctx, sql)?;
    let last = statements
        .pop()
        .ok_or_else(|| anyhow!("report: no SQL statement; give a query returning p and y"))?;
    for statement in statements {
        crate::plan_statement(ctx, statement)
            .await?
            .collect()
            .await?;
    }
    match &last {
        Statement::Statement(statement) if matches!(**statement, SqlStatement::Query(_)) => {
            Ok(last.to_string())
        }
        other => bail!(
            "report: the last statement must be a query returning p and y, not `{}`",
            crate::errors::one_line(&other.to_string())
        ),
    }
}

/// The optional columns present; an error when `p`, `y` or a `--field` is missing.
fn check_columns(schema: &Schema, options: &ReportOptions) -> anyhow::Result<Columns> {
    let has = |name: &str| schema.fields().iter().any(|f| f.name() == name);
    let names = || {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        if names.is_empty() {
            "no columns".to_string()
        } else {
            names.join(", ")
        }
    };
    let missing: Vec<&str> = ["p", "y"].into_iter().filter(|c| !has(c)).collect();
    if !missing.is_empty() {
        bail!(
            "report: the query must return the columns p (probability) and y (label), and \
             optionally model, w, day, key and the --field columns; it has no {} (it returns {})",
            missing.join(" or "),
            names()
        );
    }
    for field in &options.fields {
        if !has(field) {
            bail!(
                "report: --field {field}: the query returns no column {field} (it returns {})",
                names()
            );
        }
        if ["p", "y", "w", "model", "day", "key"].contains(&field.as_str()) {
            bail!("report: --field {field}: p, y, w, model, day and key cannot be a field");
        }
    }
    if let Ok(key) = schema.field_with_name("key") {
        let t = key.data_type();
        if !(t.is_integer()
            || matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View))
        {
            bail!("report: the key column must be an integer or text event id, got type {t}");
        }
    }
    Ok(Columns {
        model: has("model"),
        w: has("w"),
        day: has("day"),
        key: has("key"),
    })
}

/// The statements of one report.
struct Plan {
    /// The `WITH source AS (…), input AS (…)` prefix every query starts with.
    prefix: String,
    input: String,
    /// The condition a row of `source` meets to be used.
    usable: String,
    /// The rows with a usable p (and w), labelled or not: what `cbpe` reads.
    scored: String,
    /// `, w` when the query has weights (aggregates taking `w` last).
    w: &'static str,
    has_w: bool,
    has_key: bool,
    /// Whether the result has a `model` column; without, every row is model 'all' and the
    /// scans group by their other keys only (or not at all).
    has_model: bool,
    bins: u32,
    strategy: &'static str,
    fields: Vec<String>,
    reference_days: u32,
}

impl Plan {
    fn new(source: &str, schema: &Schema, columns: &Columns, options: &ReportOptions) -> Plan {
        let model = if columns.model {
            "COALESCE(CAST(model AS VARCHAR), 'NULL')"
        } else {
            "'all'"
        };
        let day = match schema.field_with_name("day").map(|f| f.data_type()) {
            Ok(DataType::Timestamp(..)) => "CAST(day AS DATE) AS day".to_string(),
            Ok(_) => "day".to_string(),
            Err(_) => "CAST(NULL AS INT) AS day".to_string(),
        };
        let w = if columns.w {
            "CAST(w AS DOUBLE)"
        } else {
            "1.0"
        };
        let mut select = vec![
            "CAST(p AS DOUBLE) AS p".to_string(),
            "CAST(y AS DOUBLE) AS y".to_string(),
            format!("{w} AS w"),
            format!("{model} AS model"),
            day,
        ];
        if columns.key {
            select.push("key".to_string());
        }
        for (k, field) in options.fields.iter().enumerate() {
            select.push(format!("{} AS f{k}", ident(field)));
        }
        let usable = if columns.w {
            "p IS NOT NULL AND y IS NOT NULL AND NOT isnan(CAST(p AS DOUBLE)) \
             AND w IS NOT NULL AND NOT isnan(CAST(w AS DOUBLE))"
        } else {
            "p IS NOT NULL AND y IS NOT NULL AND NOT isnan(CAST(p AS DOUBLE))"
        };
        let scored = if columns.w {
            "p IS NOT NULL AND NOT isnan(CAST(p AS DOUBLE)) \
             AND w IS NOT NULL AND NOT isnan(CAST(w AS DOUBLE))"
        } else {
            "p IS NOT NULL AND NOT isnan(CAST(p AS DOUBLE))"
        };
        let input = format!("SELECT {} FROM source WHERE {usable}", select.join(", "));
        let prefix = format!("WITH source AS ({source}),\ninput AS ({input})\n");
        Plan {
            prefix,
            input,
            usable: usable.to_string(),
            scored: scored.to_string(),
            w: if columns.w { ", w" } else { "" },
            has_w: columns.w,
            has_model: columns.model,
            has_key: columns.key,
            bins: options.bins,
            strategy: options.strategy.sql(),
            fields: options.fields.clone(),
            reference_days: options.reference_days,
        }
    }

    /// The `input` view as the appendix shows it.
    fn input_view(&self) -> String {
        format!("-- source: the query above\ninput AS ({})", self.input)
    }

    fn with_input(&self, query: &str) -> String {
        format!("{}{query}", self.prefix)
    }

    /// The select list's model and the GROUP BY clause of a scan grouped by model and `keys`:
    /// without a `model` column the model is the constant 'all', left out of the grouping (a
    /// constant key costs DataFusion a second grouping column a row).
    fn by_model(&self, keys: &[&str]) -> (&'static str, String) {
        let mut group: Vec<&str> = if self.has_model {
            vec!["model"]
        } else {
            vec![]
        };
        group.extend_from_slice(keys);
        let clause = if group.is_empty() {
            String::new()
        } else {
            format!(" GROUP BY {}", group.join(", "))
        };
        let model = if self.has_model {
            "model"
        } else {
            "'all' AS model"
        };
        (model, clause)
    }

    /// The weighted sums of the scans: `Σw` (weight), `Σw·p`, `Σw·y`, `Σw²`; without a `w`
    /// column every weight is 1, so `Σp` and `Σy` need no product. (`Σw²` stays `sum(w * w)`,
    /// not a second `sum(w)`: the same aggregate twice beneath the headline's `rate_ci['…']`
    /// field reads makes DataFusion 55's `push_down_leaf_projections` fail on a duplicate
    /// name; see `crate::errors`.)
    fn weighted_sums(&self) -> [&'static str; 4] {
        if self.has_w {
            [
                "sum(w) AS weight",
                "sum(w * p) AS sum_p",
                "sum(w * y) AS sum_y",
                "sum(w * w) AS sum_w2",
            ]
        } else {
            [
                "sum(w) AS weight",
                "sum(p) AS sum_p",
                "sum(y) AS sum_y",
                "sum(w * w) AS sum_w2",
            ]
        }
    }

    /// Rows before and after leaving out NULL/NaN ones (`source`, not `input`).
    fn count_sql(&self) -> String {
        let (usable, scored) = (&self.usable, &self.scored);
        format!(
            "SELECT count(*) AS rows, count(*) FILTER (WHERE NOT ({usable})) AS dropped, \
             count(*) FILTER (WHERE y IS NULL AND {scored}) AS unlabelled, \
             CAST(date_trunc('second', now()) AS VARCHAR) AS generated_at FROM source"
        )
    }

    /// Per model, the AUC its probabilities imply over every scored row, labelled or not
    /// (`cbpe`, which reads no label): the headline's expected AUC beside the realised one.
    fn expected_sql(&self) -> String {
        let (model, group_by) = if self.has_model {
            ("COALESCE(CAST(model AS VARCHAR), 'NULL')", " GROUP BY 1")
        } else {
            ("'all'", "")
        };
        let w = if self.has_w {
            ", 0.5, CAST(w AS DOUBLE)"
        } else {
            ""
        };
        format!(
            "SELECT {model} AS model, count(*) AS scored,\n  \
             cbpe(CAST(p AS DOUBLE){w})['roc_auc'] AS expected_auc\n\
             FROM source WHERE {}{group_by}",
            self.scored
        )
    }

    /// One row per model: sums, metrics, reliability bins, Field-RCE per field, time range.
    ///
    /// The headline table shows these columns (`page.rs`, `headline_rows`); a metric joins the
    /// report as one more column here and one more row there.
    fn headline_sql(&self) -> String {
        let (bins, strategy, w) = (self.bins, self.strategy, self.w);
        let logloss_w = if self.has_w {
            format!(", {LOGLOSS_EPS}, w")
        } else {
            String::new()
        };
        let rce_w = if self.has_w {
            format!(", {FIELD_RCE_EPS}, w")
        } else {
            String::new()
        };
        let mut metrics = vec!["count(*) AS rows".to_string()];
        metrics.extend(self.weighted_sums().map(String::from));
        metrics.extend([
            format!("ece(p, y, {bins}, 'uniform'{w}) AS ece"),
            format!("ece(p, y, {bins}, 'quantile'{w}) AS ece_quantile"),
            format!("mce(p, y, {bins}, '{strategy}'{w}) AS mce"),
            format!("logloss(p, y{logloss_w}) AS logloss"),
            format!("normalized_entropy(p, y{w}) AS normalized_entropy"),
            format!("brier(p, y{w}) AS brier"),
            format!("reliability(p, y, {bins}, '{strategy}'{w}) AS reliability"),
            format!("spiegelhalter(p, y{w}) AS spiegelhalter"),
            format!("calibration_slope(p, y{w}) AS slope"),
            format!("calibration_decomposition(p, y, 'brier'{w}) AS decomposition"),
            "CAST(min(day) AS VARCHAR) AS first_day".to_string(),
            "CAST(max(day) AS VARCHAR) AS last_day".to_string(),
        ]);
        // DeLong's interval and the bootstrap are unweighted: with `w`, AUC alone (weighted).
        // Without, `auc_interval` gives `auc(p, y)` (the same ranks) and its interval at once.
        if self.has_w {
            metrics.push("auc(p, y, w) AS auc".to_string());
        } else {
            metrics.push(format!("auc_interval(p, y, {LEVEL}) AS auc_ci"));
            if self.has_key {
                metrics.push(format!(
                    "ece_interval(p, y, key, {bins}, 'uniform', {LEVEL}) AS ece_ci"
                ));
            }
        }
        for k in 0..self.fields.len() {
            metrics.push(format!("field_rce(p, y, f{k}{rce_w}) AS field_rce_{k}"));
            metrics.push(format!("field_bias(p, y, f{k}{w}) AS field_bias_{k}"));
        }
        let (model, group_by) = self.by_model(&[]);
        format!(
            "SELECT *, sum_p / NULLIF(sum_y, 0) AS ratio,\n  \
             (sum_p / weight) / rate_ci['upper'] AS ratio_lower,\n  \
             (sum_p / weight) / NULLIF(rate_ci['lower'], 0) AS ratio_upper\n\
             FROM (SELECT *, wilson_interval(sum_y / weight, weight * weight / sum_w2, {Z}) \
             AS rate_ci\n  FROM (SELECT {model},\n  {}\n  FROM input{group_by}) AS m\n  \
             WHERE weight > 0) AS h\nORDER BY model",
            metrics.join(",\n  ")
        )
    }

    /// Models `a` and `b` compared on the rows they share by `key`: the paired bootstrap of
    /// the ECE difference and DeLong's paired test of the AUCs (`y` is `a`'s).
    fn comparison_sql(&self, a: &str, b: &str) -> String {
        let bins = self.bins;
        format!(
            "SELECT count(*) AS rows, count(*) FILTER (WHERE a.y <> b.y) AS label_mismatches,\n  \
             ece_diff_interval(a.p, b.p, a.y, a.key, {bins}, 'uniform', {LEVEL}) AS ece_diff,\n  \
             auc_test(a.p, b.p, a.y) AS auc_test\n\
             FROM input AS a JOIN input AS b ON a.key = b.key\n\
             WHERE a.model = {} AND b.model = {}",
            literal(a),
            literal(b)
        )
    }

    /// One field's sums per model and value: the scan of the segments section. Its result
    /// (one row per value) is the table `field_values` of [`Plan::segments_sql`].
    fn field_values_sql(&self, k: usize) -> String {
        let field = format!("f{k}");
        let (model, group_by) = self.by_model(&[&field]);
        format!(
            "SELECT {model}, CAST({field} AS VARCHAR) AS value, count(*) AS rows,\n  {}\n\
             FROM input{group_by}",
            self.weighted_sums().join(", ")
        )
    }

    /// Over `field_values`: per model, the top [`TOP_SEGMENTS`] values by weight × |ratio − 1|
    /// (values without a positive, whose ratio is undefined, last, heaviest first) and the
    /// rest pooled, with the ratio's Wilson interval.
    fn segments_sql(&self) -> String {
        let rate = "sum(sum_y) / sum(weight), sum(weight) * sum(weight) / sum(sum_w2)";
        format!(
            "SELECT model, CASE WHEN rank <= {TOP_SEGMENTS} THEN value END AS value,\n  \
             rank > {TOP_SEGMENTS} AS other, min(rank) AS first_rank, count(*) AS n_values,\n  \
             sum(rows) AS rows, sum(weight) AS weight,\n  \
             sum(sum_p) / NULLIF(sum(sum_y), 0) AS ratio,\n  \
             (sum(sum_p) / sum(weight)) / wilson_interval({rate}, {Z})['upper'] AS ratio_lower,\n  \
             (sum(sum_p) / sum(weight)) / NULLIF(wilson_interval({rate}, {Z})['lower'], 0) AS ratio_upper,\n  \
             max(distinct_values) AS distinct_values\n\
             FROM (SELECT *, row_number() OVER (PARTITION BY model ORDER BY\n      \
                   CASE WHEN sum_y > 0 THEN weight * abs(sum_p / sum_y - 1) END DESC NULLS LAST,\n      \
                   weight DESC, value) AS rank,\n    \
                 count(*) OVER (PARTITION BY model) AS distinct_values\n  \
               FROM field_values) AS r\n\
             GROUP BY model, CASE WHEN rank <= {TOP_SEGMENTS} THEN value END, rank > {TOP_SEGMENTS}\n\
             HAVING sum(weight) > 0\n\
             ORDER BY model, other, first_rank"
        )
    }

    /// Daily sums and states per model: the scan of the over-time section. Its result (one row
    /// per model and day) is the table `daily` of [`Plan::daily_sql`].
    fn daily_states_sql(&self) -> String {
        let (bins, w) = (self.bins, self.w);
        let logloss_w = if self.has_w {
            format!(", {LOGLOSS_EPS}, w")
        } else {
            String::new()
        };
        let (model, group_by) = self.by_model(&["day"]);
        let [_, sum_p, sum_y, _] = self.weighted_sums();
        format!(
            "SELECT {model}, day, count(*) AS rows, {sum_p}, {sum_y},\n  \
             ece_state(p, y, {bins}, 'uniform'{w}) AS ece_s, logloss_state(p, y{logloss_w}) AS ll_s\n\
             FROM input WHERE day IS NOT NULL{group_by}"
        )
    }

    /// Over `daily`: the states merged into daily and 7-day rolling values; the drift band of
    /// sql/monitoring.sql (mean ± 3 standard deviations of the first `reference_days` days).
    fn daily_sql(&self) -> String {
        let reference = self.reference_days;
        let flag = |metric: &str| {
            format!(
                "COALESCE(m.{metric} NOT BETWEEN r.{metric}_mean - 3 * r.{metric}_sd \
                 AND r.{metric}_mean + 3 * r.{metric}_sd, false) AS {metric}_alert"
            )
        };
        let band = |metric: &str| {
            format!(
                "r.{metric}_mean - 3 * r.{metric}_sd AS {metric}_lower, \
                 r.{metric}_mean + 3 * r.{metric}_sd AS {metric}_upper"
            )
        };
        format!(
            "WITH m AS (SELECT model, day, rows,\n  \
               ece_merge(ece_s) OVER today AS ece, ece_merge(ece_s) OVER week AS ece_7d,\n  \
               sum_p / NULLIF(sum_y, 0) AS ratio,\n  \
               sum(sum_p) OVER week / NULLIF(sum(sum_y) OVER week, 0) AS ratio_7d,\n  \
               logloss_merge(ll_s) OVER today AS logloss, logloss_merge(ll_s) OVER week AS logloss_7d,\n  \
               row_number() OVER week_order AS day_number\n  \
               FROM daily\n  \
               WINDOW today AS (PARTITION BY model ORDER BY day ROWS BETWEEN CURRENT ROW AND CURRENT ROW),\n  \
               week AS (PARTITION BY model ORDER BY day ROWS BETWEEN 6 PRECEDING AND CURRENT ROW),\n  \
               week_order AS (PARTITION BY model ORDER BY day)),\n\
             reference AS (SELECT model, avg(ece) AS ece_mean, stddev(ece) AS ece_sd,\n  \
               avg(ratio) AS ratio_mean, stddev(ratio) AS ratio_sd,\n  \
               avg(logloss) AS logloss_mean, stddev(logloss) AS logloss_sd\n  \
               FROM m WHERE day_number <= {reference} GROUP BY model)\n\
             SELECT m.model, CAST(m.day AS VARCHAR) AS day, m.rows,\n  \
               m.ece, m.ece_7d, {}, {},\n  \
               m.ratio, m.ratio_7d, {}, {},\n  \
               m.logloss, m.logloss_7d, {}, {}\n\
             FROM m JOIN reference r ON m.model = r.model\n\
             ORDER BY m.model, m.day_number",
            band("ece"),
            flag("ece"),
            band("ratio"),
            flag("ratio"),
            band("logloss"),
            flag("logloss"),
        )
    }
}

/// Runs one statement and collects it with its schema (a result of no batch still has one).
async fn run_with_schema(
    ctx: &SessionContext,
    sql: &str,
    what: &str,
) -> anyhow::Result<(SchemaRef, Vec<RecordBatch>)> {
    let frame = crate::sql(ctx, sql)
        .await
        .with_context(|| format!("report: computing {what}"))?;
    let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
    let batches = crate::cancel::collect(frame)
        .await
        .with_context(|| format!("report: computing {what}"))?;
    Ok((schema, batches))
}

/// Runs `sql` on a local session over `table`, a scan's grouped result: the windows and
/// rankings of a section run here, on a few rows, whatever session made them.
async fn run_over(
    (schema, batches): (SchemaRef, Vec<RecordBatch>),
    table: &str,
    sql: &str,
    what: &str,
) -> anyhow::Result<Vec<RecordBatch>> {
    let ctx = crate::new_context();
    ctx.register_table(table, Arc::new(MemTable::try_new(schema, vec![batches])?))?;
    run(&ctx, sql, what).await
}

/// Runs one statement and collects it; errors say which part of the report failed.
async fn run(ctx: &SessionContext, sql: &str, what: &str) -> anyhow::Result<Vec<RecordBatch>> {
    let frame = crate::sql(ctx, sql)
        .await
        .with_context(|| format!("report: computing {what}"))?;
    crate::cancel::collect(frame)
        .await
        .with_context(|| format!("report: computing {what}"))
}

/// Typed access to the columns of a query's batches.
struct Rows<'a> {
    batches: &'a [RecordBatch],
}

impl<'a> Rows<'a> {
    fn new(batches: &'a [RecordBatch]) -> Rows<'a> {
        Rows { batches }
    }

    /// (batch, row) of the `index`-th row over all batches.
    fn locate(&self, mut index: usize) -> Option<(&'a RecordBatch, usize)> {
        for batch in self.batches {
            if index < batch.num_rows() {
                return Some((batch, index));
            }
            index -= batch.num_rows();
        }
        None
    }

    fn len(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }

    fn column(&self, name: &str, row: usize, to: &DataType) -> Option<(ArrayRef, usize)> {
        let (batch, i) = self.locate(row)?;
        let column = batch.column_by_name(name)?;
        let column = cast(&column.slice(i, 1), to).ok()?;
        (!column.is_null(0)).then_some((column, 0))
    }

    fn f64(&self, name: &str, row: usize) -> Option<f64> {
        let (column, i) = self.column(name, row, &DataType::Float64)?;
        let value = column.as_primitive::<Float64Type>().value(i);
        value.is_finite().then_some(value)
    }

    fn i64(&self, name: &str, row: usize) -> Option<i64> {
        let (column, i) = self.column(name, row, &DataType::Int64)?;
        Some(column.as_primitive::<Int64Type>().value(i))
    }

    fn string(&self, name: &str, row: usize) -> Option<String> {
        let (column, i) = self.column(name, row, &DataType::Utf8)?;
        Some(column.as_string::<i32>().value(i).to_string())
    }

    /// The number `field` of the struct column `name`.
    fn field_f64(&self, name: &str, field: &str, row: usize) -> Option<f64> {
        let (batch, i) = self.locate(row)?;
        let column = batch.column_by_name(name)?.as_struct_opt()?;
        if column.is_null(i) {
            return None;
        }
        let value = cast(
            &column.column_by_name(field)?.slice(i, 1),
            &DataType::Float64,
        )
        .ok()?;
        let value = value.as_primitive::<Float64Type>();
        (!value.is_null(0) && value.value(0).is_finite()).then(|| value.value(0))
    }

    fn bool(&self, name: &str, row: usize) -> bool {
        self.column(name, row, &DataType::Boolean)
            .is_some_and(|(c, i)| c.as_boolean().value(i))
    }

    fn bins(&self, name: &str, row: usize) -> anyhow::Result<Vec<Bin>> {
        let Some((batch, i)) = self.locate(row) else {
            return Ok(vec![]);
        };
        let column = batch
            .column_by_name(name)
            .with_context(|| format!("report: no column {name}"))?;
        let lists = column.as_list::<i32>();
        if lists.is_null(i) {
            return Ok(vec![]);
        }
        read_bins(lists.value(i).as_struct())
    }
}

fn read_bins(bins: &StructArray) -> anyhow::Result<Vec<Bin>> {
    let column = |name: &str, to: &DataType| -> anyhow::Result<ArrayRef> {
        let column = bins
            .column_by_name(name)
            .with_context(|| format!("reliability() has no field {name}"))?;
        Ok(cast(column, to)?)
    };
    let floats = |name: &str| -> anyhow::Result<Vec<Option<f64>>> {
        Ok(column(name, &DataType::Float64)?
            .as_primitive::<Float64Type>()
            .iter()
            .map(|v| v.filter(|v| v.is_finite()))
            .collect())
    };
    let ints = |name: &str| -> anyhow::Result<Vec<i64>> {
        Ok(column(name, &DataType::Int64)?
            .as_primitive::<Int64Type>()
            .iter()
            .map(|v| v.unwrap_or(0))
            .collect())
    };
    let (bin, count) = (ints("bin")?, ints("count")?);
    let (lower, upper, weight) = (floats("lower")?, floats("upper")?, floats("weight")?);
    let (mean_p, frac_pos) = (floats("mean_p")?, floats("frac_pos")?);
    let (frac_lower, frac_upper) = (floats("frac_pos_lower")?, floats("frac_pos_upper")?);
    Ok((0..bins.len())
        .map(|i| Bin {
            bin: bin[i],
            lower: lower[i],
            upper: upper[i],
            count: count[i],
            weight: weight[i],
            mean_p: mean_p[i],
            frac_pos: frac_pos[i],
            frac_pos_lower: frac_lower[i],
            frac_pos_upper: frac_upper[i],
        })
        .collect())
}

fn read_models(batches: &[RecordBatch], options: &ReportOptions) -> anyhow::Result<Vec<ModelData>> {
    let rows = Rows::new(batches);
    let mut models = Vec::new();
    for r in 0..rows.len() {
        let mut field_rce = BTreeMap::new();
        for (k, field) in options.fields.iter().enumerate() {
            field_rce.insert(field.clone(), rows.f64(&format!("field_rce_{k}"), r));
        }
        models.push(ModelData {
            model: rows.string("model", r),
            rows: rows.i64("rows", r).unwrap_or(0),
            weight: rows.f64("weight", r),
            sum_p: rows.f64("sum_p", r),
            sum_y: rows.f64("sum_y", r),
            ratio: rows.f64("ratio", r),
            ratio_lower: rows.f64("ratio_lower", r),
            ratio_upper: rows.f64("ratio_upper", r),
            ece: rows.f64("ece", r),
            ece_lower: rows.field_f64("ece_ci", "lower", r),
            ece_upper: rows.field_f64("ece_ci", "upper", r),
            ece_quantile: rows.f64("ece_quantile", r),
            mce: rows.f64("mce", r),
            logloss: rows.f64("logloss", r),
            normalized_entropy: rows.f64("normalized_entropy", r),
            brier: rows.f64("brier", r),
            auc: rows
                .f64("auc", r)
                .or_else(|| rows.field_f64("auc_ci", "auc", r)),
            auc_lower: rows.field_f64("auc_ci", "lower", r),
            auc_upper: rows.field_f64("auc_ci", "upper", r),
            expected_auc: None,
            scored_rows: None,
            spiegelhalter_z: rows.field_f64("spiegelhalter", "z", r),
            spiegelhalter_p: rows.field_f64("spiegelhalter", "p_value", r),
            intercept: rows.field_f64("slope", "intercept", r),
            intercept_se: rows.field_f64("slope", "intercept_se", r),
            slope: rows.field_f64("slope", "slope", r),
            slope_se: rows.field_f64("slope", "slope_se", r),
            citl: rows.field_f64("slope", "citl", r),
            citl_se: rows.field_f64("slope", "citl_se", r),
            miscalibration: rows.field_f64("decomposition", "miscalibration", r),
            discrimination: rows.field_f64("decomposition", "discrimination", r),
            uncertainty: rows.field_f64("decomposition", "uncertainty", r),
            field_rce,
            reliability: rows.bins("reliability", r)?,
            status: Status {
                level: "unknown",
                reasons: vec![],
            },
            daily: vec![],
            segments: vec![],
            notes: vec![],
        });
    }
    Ok(models)
}

fn time_range(headline: &[RecordBatch]) -> Option<(String, String)> {
    let rows = Rows::new(headline);
    let first = (0..rows.len())
        .filter_map(|r| rows.string("first_day", r))
        .min();
    let last = (0..rows.len())
        .filter_map(|r| rows.string("last_day", r))
        .max();
    first.zip(last)
}

fn model_mut<'a>(models: &'a mut [ModelData], name: Option<&str>) -> Option<&'a mut ModelData> {
    models.iter_mut().find(|m| m.model.as_deref() == name)
}

fn read_segments(
    batches: &[RecordBatch],
    headline: &[RecordBatch],
    field: &str,
    k: usize,
    models: &mut [ModelData],
) -> anyhow::Result<()> {
    let adjusted = field_bias_p_adjusted(headline, k)?;
    let rows = Rows::new(batches);
    for model in models.iter_mut() {
        model.segments.push(FieldSegments {
            field: field.to_string(),
            values: 0,
            segments: vec![],
        });
    }
    for r in 0..rows.len() {
        let name = rows.string("model", r);
        let Some(model) = model_mut(models, name.as_deref()) else {
            continue;
        };
        let value = rows.string("value", r);
        let other = rows.bool("other", r);
        let p_adjusted = if other {
            None
        } else {
            adjusted.get(&(name, value.clone())).copied().flatten()
        };
        let segments = &mut model.segments[k];
        segments.values = rows.i64("distinct_values", r).unwrap_or(0);
        segments.segments.push(Segment {
            value,
            other,
            values: rows.i64("n_values", r).unwrap_or(0),
            rows: rows.i64("rows", r).unwrap_or(0),
            weight: rows.f64("weight", r),
            ratio: rows.f64("ratio", r),
            ratio_lower: rows.f64("ratio_lower", r),
            ratio_upper: rows.f64("ratio_upper", r),
            p_adjusted,
            significant: p_adjusted.is_some_and(|p| p < 1.0 - LEVEL),
        });
    }
    Ok(())
}

/// `field_bias`'s Holm-adjusted p-value by (model, value) from the headline's
/// `field_bias_{k}` column.
#[allow(clippy::type_complexity)]
fn field_bias_p_adjusted(
    headline: &[RecordBatch],
    k: usize,
) -> anyhow::Result<BTreeMap<(Option<String>, Option<String>), Option<f64>>> {
    let name = format!("field_bias_{k}");
    let mut adjusted = BTreeMap::new();
    let rows = Rows::new(headline);
    for r in 0..rows.len() {
        let Some((batch, i)) = rows.locate(r) else {
            continue;
        };
        let column = batch
            .column_by_name(&name)
            .with_context(|| format!("report: no column {name}"))?;
        let lists = column.as_list::<i32>();
        if lists.is_null(i) {
            continue;
        }
        let items = lists.value(i);
        let items = items.as_struct();
        let values = cast(
            items
                .column_by_name("field")
                .context("field_bias has no field")?,
            &DataType::Utf8,
        )?;
        let values = values.as_string::<i32>();
        let p = cast(
            items
                .column_by_name("p_adjusted")
                .context("field_bias has no p_adjusted")?,
            &DataType::Float64,
        )?;
        let p = p.as_primitive::<Float64Type>();
        let model = rows.string("model", r);
        for j in 0..items.len() {
            let value = (!values.is_null(j)).then(|| values.value(j).to_string());
            let p_adjusted = (!p.is_null(j) && p.value(j).is_finite()).then(|| p.value(j));
            adjusted.insert((model.clone(), value), p_adjusted);
        }
    }
    Ok(adjusted)
}

/// The model with the lowest ECE (the first in model order among equals; one without an ECE
/// only when none has one).
fn best_model(models: &[ModelData]) -> Option<String> {
    models
        .iter()
        .min_by(|a, b| {
            let key = |m: &ModelData| m.ece.unwrap_or(f64::INFINITY);
            key(a).total_cmp(&key(b))
        })
        .and_then(|m| m.model.clone())
}

fn read_comparison(batches: &[RecordBatch], a: &str, b: &str) -> Comparison {
    let rows = Rows::new(batches);
    Comparison {
        model_a: Some(a.to_string()),
        model_b: Some(b.to_string()),
        rows: rows.i64("rows", 0).unwrap_or(0),
        label_mismatches: rows.i64("label_mismatches", 0).unwrap_or(0),
        ece_diff: rows.field_f64("ece_diff", "diff", 0),
        ece_diff_lower: rows.field_f64("ece_diff", "lower", 0),
        ece_diff_upper: rows.field_f64("ece_diff", "upper", 0),
        auc_a: rows.field_f64("auc_test", "auc_a", 0),
        auc_b: rows.field_f64("auc_test", "auc_b", 0),
        auc_diff: rows.field_f64("auc_test", "diff", 0),
        auc_se: rows.field_f64("auc_test", "se", 0),
        auc_z: rows.field_f64("auc_test", "z", 0),
        auc_p_value: rows.field_f64("auc_test", "p_value", 0),
    }
}

fn read_daily(batches: &[RecordBatch], models: &mut [ModelData]) -> anyhow::Result<()> {
    let rows = Rows::new(batches);
    for r in 0..rows.len() {
        let Some(model) = model_mut(models, rows.string("model", r).as_deref()) else {
            continue;
        };
        model.daily.push(Day {
            day: rows.string("day", r).unwrap_or_default(),
            rows: rows.i64("rows", r).unwrap_or(0),
            ece: rows.f64("ece", r),
            ece_7d: rows.f64("ece_7d", r),
            ece_lower: rows.f64("ece_lower", r),
            ece_upper: rows.f64("ece_upper", r),
            ece_alert: rows.bool("ece_alert", r),
            ratio: rows.f64("ratio", r),
            ratio_7d: rows.f64("ratio_7d", r),
            ratio_lower: rows.f64("ratio_lower", r),
            ratio_upper: rows.f64("ratio_upper", r),
            ratio_alert: rows.bool("ratio_alert", r),
            logloss: rows.f64("logloss", r),
            logloss_7d: rows.f64("logloss_7d", r),
            logloss_lower: rows.f64("logloss_lower", r),
            logloss_upper: rows.f64("logloss_upper", r),
            logloss_alert: rows.bool("logloss_alert", r),
        });
    }
    Ok(())
}

/// Notes on what could not be computed for `model`, and why.
fn describe_gaps(model: &mut ModelData, columns: &Columns, options: &ReportOptions) {
    let one_class = match (model.sum_y, model.weight) {
        (Some(y), Some(w)) => y <= 0.0 || y >= w,
        _ => false,
    };
    if one_class {
        let class = if model.sum_y == Some(0.0) {
            "no positive (y = 1)"
        } else {
            "no negative (y = 0)"
        };
        model.notes.push(format!(
            "The rows have {class}: AUC and normalized entropy are undefined{}.",
            if model.sum_y == Some(0.0) {
                ", and so are the calibration ratio and its interval"
            } else {
                ""
            }
        ));
    } else {
        for (value, name) in [
            (model.auc, "AUC"),
            (model.normalized_entropy, "normalized entropy"),
            (model.ratio, "calibration ratio"),
        ] {
            if value.is_none() {
                model.notes.push(format!("{name} could not be computed."));
            }
        }
    }
    if columns.day && model.daily.len() <= options.reference_days as usize {
        model.notes.push(format!(
            "{} day(s) of data: the drift rule needs more than the {} reference days to flag one.",
            model.daily.len(),
            options.reference_days
        ));
    }
}
