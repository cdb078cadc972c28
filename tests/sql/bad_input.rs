//! Bad input, function by function: every registered aggregate gets every kind of bad input
//! and must give the outcome the contract documents (SPEC.md "Common rules",
//! docs/SEMANTICS.md "Bad input"): an error naming the function, the argument and the value,
//! never a panic; NULL for no usable row.
//!
//! [`AGGREGATES`] says how to call each function (its calls, over the columns of one test
//! table) and which argument holds the probability or score. The expected outcome of each
//! [`Bad`] kind follows from that row and from the contract ([`expected`]). A function the
//! registry has and the table lacks fails [`every_registered_aggregate_has_a_row`], so a new
//! function cannot skip these checks.
//!
//! The `_state` / `_merge` twins have no rows of their own: they run their function's kernel,
//! so a row's `stored` calls give `F_state(…)` every data kind (the same message as `F`), and
//! `F_merge(F_state(…))` no rows, only NULL rows, zero weights and NULL states (NULL; the
//! state itself is not NULL).
//!
//! Every case runs three ways, because the kernels have separate paths for them: one batch
//! without NULLs and Int64 labels (the fast paths), with NULL rows and Float64 labels (the
//! masked path), and `GROUP BY` with Int32 labels (the grouped accumulators).

use std::collections::BTreeSet;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::Float64Type;
use datafusion::prelude::SessionContext;

/// The role of the first argument.
#[derive(Clone, Copy, Debug, PartialEq)]
enum First {
    /// A probability: NaN, ±Infinity and values outside [0, 1] are errors.
    Probability,
    /// A raw score or logit given to a fit: any finite number; NaN and ±Infinity are errors.
    Score,
    /// A multiclass row's probabilities, called as `make_array(p, 1 - p)`, so that a bad p is
    /// the list's first value and the message names it; the label is `y` as a class index.
    Probs,
    /// A multiclass row's scores (`fit_ovr`), called as `make_array(p, 1 - p)`: any finite
    /// number; the label is `y` as a class index.
    Scores,
}

/// How to call one aggregate.
struct Row {
    name: &'static str,
    /// The first argument's name, as the function's messages (and `SHOW FUNCTIONS`) name it.
    first: &'static str,
    role: First,
    /// Argument lists over the test table (`p`, `y`, `w` weight, `q` propensity, `f` and `g`
    /// fields), one per kernel path worth checking (weighted, another strategy, …).
    calls: &'static [&'static str],
    /// Argument lists for `F_state` / `F_merge`; empty when the function has no twins.
    stored: &'static [&'static str],
}

const fn row(
    name: &'static str,
    first: &'static str,
    role: First,
    calls: &'static [&'static str],
    stored: &'static [&'static str],
) -> Row {
    Row {
        name,
        first,
        role,
        calls,
        stored,
    }
}

use First::{Probability as P, Probs as PL, Score as S};

/// Every aggregate calibsql registers (its `_state` / `_merge` twins through `stored`).
const AGGREGATES: &[Row] = &[
    row(
        "ece",
        "p",
        P,
        &[
            "p, y",
            "p, y, w => w",
            "p, y, 10, 'quantile'",
            "p, y, 10, 'quantile', w",
        ],
        &["p, y", "p, y, 10, 'torchmetrics', w"],
    ),
    row(
        "mce",
        "p",
        P,
        &["p, y", "p, y, w => w", "p, y, 10, 'quantile'"],
        &["p, y", "p, y, 10, 'netcal', w"],
    ),
    row(
        "reliability",
        "p",
        P,
        &["p, y", "p, y, w => w", "p, y, 4, 'quantile', w, 0.9"],
        &["p, y", "p, y, 5, 'relplot', w"],
    ),
    row(
        "ace",
        "p",
        P,
        &["p, y", "p, y, w => w", "p, y, 10, 'uniform'"],
        &["p, y, 10, 'uniform'", "p, y, 10, 'netcal', w"],
    ),
    row(
        "rmsce",
        "p",
        P,
        &["p, y", "p, y, w => w", "p, y, 10, 'quantile'"],
        &["p, y", "p, y, 10, 'kumar', w"],
    ),
    row(
        "logloss",
        "p",
        P,
        &["p, y", "p, y, w => w"],
        &["p, y", "p, y, 1e-6, w"],
    ),
    row("brier", "p", P, &["p, y", "p, y, w"], &["p, y", "p, y, w"]),
    row(
        "ips_logloss",
        "p",
        P,
        &["p, y, q", "p, y, q, 0.2, 1e-7"],
        &["p, y, q"],
    ),
    row(
        "normalized_entropy",
        "p",
        P,
        &["p, y", "p, y, w"],
        &["p, y", "p, y, w"],
    ),
    row("auc", "p", P, &["p, y", "p, y, w"], &[]),
    row(
        "smooth_ece",
        "p",
        P,
        &["p, y", "p, y, 0.05"],
        &["p, y", "p, y, 0.05"],
    ),
    row("ece_debiased", "p", P, &["p, y"], &[]),
    row(
        "field_ece",
        "p",
        P,
        &["p, y, f", "p, y, f, w"],
        &["p, y, f", "p, y, f, w"],
    ),
    row(
        "field_rce",
        "p",
        P,
        &["p, y, f", "p, y, f, 0.0, w"],
        &["p, y, f", "p, y, f, w => w"],
    ),
    row(
        "multi_field_rce",
        "p",
        P,
        &["p, y, f, g", "p, y, f, g, 0.0"],
        &[],
    ),
    row("mvce", "p", P, &["p, y, f", "p, y, g, 4, 3"], &["p, y, f"]),
    row(
        "ece_top_label",
        "probs",
        PL,
        &[
            "make_array(p, 1 - p), y",
            "make_array(p, 1 - p), y, 10, 'quantile', w",
        ],
        &[
            "make_array(p, 1 - p), y",
            "make_array(p, 1 - p), y, 10, 'torchmetrics', w",
        ],
    ),
    row(
        "ece_classwise",
        "probs",
        PL,
        &[
            "make_array(p, 1 - p), y",
            "make_array(p, 1 - p), y, 10, 'quantile', w",
        ],
        &[
            "make_array(p, 1 - p), y",
            "make_array(p, 1 - p), y, 10, 'kumar', w",
        ],
    ),
    row(
        "mce_top_label",
        "probs",
        PL,
        &[
            "make_array(p, 1 - p), y",
            "make_array(p, 1 - p), y, 10, 'kumar', w",
        ],
        &["make_array(p, 1 - p), y"],
    ),
    row(
        "reliability_top_label",
        "probs",
        PL,
        &[
            "make_array(p, 1 - p), y",
            "make_array(p, 1 - p), y, 10, 'uniform', w",
        ],
        &["make_array(p, 1 - p), y"],
    ),
    row(
        "fit_platt",
        "score",
        S,
        &["p, y", "p, y, q", "p, y, q, 0.2", "p, y, w => w"],
        &["p, y", "p, y, q"],
    ),
    row(
        "fit_temperature",
        "logit",
        S,
        &["p, y", "p, y, q", "p, y, w => w"],
        &["p, y", "p, y, q"],
    ),
    row(
        "fit_beta_calib",
        "p",
        P,
        &["p, y", "p, y, q", "p, y, w => w"],
        &["p, y", "p, y, q"],
    ),
    row(
        "fit_gaussian_calib",
        "score",
        S,
        &["p, y", "p, y, q", "p, y, w => w"],
        &["p, y", "p, y, q"],
    ),
    row(
        "fit_gamma_calib",
        "score",
        S,
        &["p, y", "p, y, q", "p, y, w => w"],
        &["p, y", "p, y, q"],
    ),
    row(
        "fit_isotonic",
        "score",
        S,
        &["p, y", "p, y, q", "p, y, w => w"],
        &["p, y", "p, y, q"],
    ),
    row(
        "fit_ovr",
        "scores",
        First::Scores,
        &[
            "make_array(p, 1 - p), y",
            "make_array(p, 1 - p), y, 'isotonic', w",
        ],
        &[
            "make_array(p, 1 - p), y",
            "make_array(p, 1 - p), y, 'platt', w",
        ],
    ),
    row(
        "fit_histogram",
        "score",
        S,
        &["p, y", "p, y, 4, 'quantile'"],
        &["p, y", "p, y, 4, 'quantile'"],
    ),
    row(
        "fit_ilps",
        "logit",
        S,
        &["p, y", "p, y, 10, q"],
        &["p, y", "p, y, 10, q"],
    ),
    row("fit_bbq", "p", P, &["p, y"], &["p, y"]),
    row(
        "fit_confcalib",
        "p",
        P,
        &["p, y, f", "p, y, f, 2, 0.0"],
        &["p, y, f"],
    ),
    row(
        "ece_interval",
        "p",
        P,
        &["p, y, f", "p, y, f, 10, 'sklearn', 0.9, 20"],
        &["p, y, f", "p, y, f, 5, 'netcal', 0.8, 30"],
    ),
    row(
        "ece_diff_interval",
        "p_a",
        P,
        &["p, p, y, f", "p, 1 - p, y, f, 5"],
        &["p, 1 - p, y, f"],
    ),
    row("auc_interval", "p", P, &["p, y", "p, y, 0.9"], &[]),
    row("auc_test", "p_a", P, &["p, p, y", "p, 1 - p, y"], &[]),
    row(
        "cbpe",
        "p",
        P,
        &["p", "p, 0.3, w", "p, w => w"],
        &["p", "p, 0.3, w"],
    ),
    row(
        "fit_field_calib",
        "logit",
        S,
        &["p, y, f", "p, y, f, 3, 0.5"],
        &["p, y, f"],
    ),
    row(
        "spiegelhalter",
        "p",
        P,
        &["p, y", "p, y, w"],
        &["p, y", "p, y, w"],
    ),
    row(
        "calibration_slope",
        "p",
        P,
        &["p, y", "p, y, w"],
        &["p, y", "p, y, w"],
    ),
    row(
        "hosmer_lemeshow",
        "p",
        P,
        &["p, y", "p, y, 3"],
        &["p, y", "p, y, 4"],
    ),
    row(
        "calibration_decomposition",
        "p",
        P,
        &["p, y", "p, y, 'logloss', w"],
        &["p, y", "p, y, 'brier', w"],
    ),
    row(
        "field_bias",
        "p",
        P,
        &["p, y, f", "p, y, f, w"],
        &["p, y, f", "p, y, f, w"],
    ),
];

/// The kinds of bad input. Each changes one row of the good table (or all rows).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bad {
    FirstNaN,
    FirstInf,
    FirstNegInf,
    /// 1.5: outside [0, 1], a fine raw score.
    FirstAboveOne,
    /// −0.5: outside [0, 1], a fine raw score.
    FirstNegative,
    Label2,
    WeightNaN,
    WeightNegative,
    WeightInf,
    PropensityNaN,
    PropensityZero,
    PropensityAboveOne,
    /// Every weight 0: no usable weight.
    ZeroWeights,
    /// No rows at all.
    Empty,
    /// Every data argument NULL in every row (fields set).
    AllNull,
}

const KINDS: &[Bad] = &[
    Bad::FirstNaN,
    Bad::FirstInf,
    Bad::FirstNegInf,
    Bad::FirstAboveOne,
    Bad::FirstNegative,
    Bad::Label2,
    Bad::WeightNaN,
    Bad::WeightNegative,
    Bad::WeightInf,
    Bad::PropensityNaN,
    Bad::PropensityZero,
    Bad::PropensityAboveOne,
    Bad::ZeroWeights,
    Bad::Empty,
    Bad::AllNull,
];

/// What a call must give.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    /// An error whose message contains this text (and nothing panicked).
    Error(String),
    /// NULL in every row of the result.
    Null,
    /// A non-NULL value in every row of the result.
    Value,
    /// A probability (a number in [0, 1], not NaN) in every row of the result.
    Probability,
}

/// The three ways each case runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// One batch, no NULLs, Int64 labels: the kernels' fast paths.
    Plain,
    /// NULL p and NULL y rows among the good ones, Float64 labels: the masked path.
    Nulls,
    /// `GROUP BY g`, Int32 labels: the grouped accumulators.
    Grouped,
}

const LAYOUTS: [Layout; 3] = [Layout::Plain, Layout::Nulls, Layout::Grouped];

/// The good rows: (p, y, w, q, f, g). Both classes in both groups `g`, distinct p.
const GOOD: &[(&str, &str, &str, &str, &str, &str)] = &[
    ("0.1", "0", "1.0", "0.5", "'a'", "'x'"),
    ("0.3", "1", "2.0", "0.9", "'a'", "'y'"),
    ("0.6", "0", "0.5", "0.3", "'b'", "'x'"),
    ("0.8", "1", "1.0", "0.7", "'b'", "'y'"),
    ("0.4", "1", "1.5", "0.6", "'c'", "'x'"),
    ("0.2", "0", "1.0", "0.4", "'c'", "'y'"),
    ("0.7", "0", "1.0", "1.0", "'a'", "'x'"),
    ("0.55", "1", "0.25", "0.2", "'b'", "'y'"),
];

/// The value a kind puts into its bad row, as SQL and as the message prints it.
fn bad_value(kind: Bad) -> (&'static str, &'static str) {
    match kind {
        Bad::FirstNaN | Bad::WeightNaN | Bad::PropensityNaN => ("CAST('NaN' AS DOUBLE)", "NaN"),
        Bad::FirstInf | Bad::WeightInf => ("CAST('Infinity' AS DOUBLE)", "inf"),
        Bad::FirstNegInf => ("CAST('-Infinity' AS DOUBLE)", "-inf"),
        Bad::FirstAboveOne | Bad::PropensityAboveOne => ("1.5", "1.5"),
        Bad::FirstNegative => ("-0.5", "-0.5"),
        Bad::Label2 => ("2", "2"),
        Bad::WeightNegative => ("-1.0", "-1"),
        Bad::PropensityZero => ("0.0", "0"),
        Bad::ZeroWeights | Bad::Empty | Bad::AllNull => ("", ""),
    }
}

/// The rows of the table for `kind` in `layout`, as a VALUES list.
fn rows(kind: Bad, layout: Layout) -> Vec<[String; 6]> {
    let mut rows: Vec<[String; 6]> = GOOD
        .iter()
        .map(|r| [r.0, r.1, r.2, r.3, r.4, r.5].map(String::from))
        .collect();
    let (sql, _) = bad_value(kind);
    let column = match kind {
        Bad::FirstNaN
        | Bad::FirstInf
        | Bad::FirstNegInf
        | Bad::FirstAboveOne
        | Bad::FirstNegative => Some(0),
        Bad::Label2 => Some(1),
        Bad::WeightNaN | Bad::WeightNegative | Bad::WeightInf => Some(2),
        Bad::PropensityNaN | Bad::PropensityZero | Bad::PropensityAboveOne => Some(3),
        _ => None,
    };
    if let Some(c) = column {
        // The bad row last, after good rows of its group.
        let mut bad = rows[0].clone();
        bad[c] = sql.to_string();
        rows.push(bad);
    }
    match kind {
        Bad::ZeroWeights => rows.iter_mut().for_each(|r| r[2] = "0.0".into()),
        Bad::AllNull => rows.iter_mut().for_each(|r| {
            for v in &mut r[..4] {
                *v = "NULL".into();
            }
        }),
        _ => {}
    }
    if layout == Layout::Nulls && kind != Bad::AllNull {
        let mut a = rows[1].clone();
        a[0] = "NULL".into();
        let mut b = rows[2].clone();
        b[1] = "NULL".into();
        rows.insert(1, a);
        rows.insert(3, b);
    }
    rows
}

fn table_name(kind: Bad, layout: Layout) -> String {
    format!("t_{kind:?}_{layout:?}").to_lowercase()
}

/// Creates one table per (kind, layout).
async fn context() -> SessionContext {
    let ctx = calibsql::new_context();
    for &kind in KINDS {
        for layout in LAYOUTS {
            let label = match layout {
                Layout::Plain => "BIGINT",
                Layout::Nulls => "DOUBLE",
                Layout::Grouped => "INT",
            };
            let values: Vec<String> = rows(kind, layout)
                .iter()
                .map(|r| format!("({})", r.join(", ")))
                .collect();
            let sql = format!(
                "CREATE TABLE {} AS SELECT CAST(column1 AS DOUBLE) AS p, CAST(column2 AS {label}) AS y, \
                 CAST(column3 AS DOUBLE) AS w, CAST(column4 AS DOUBLE) AS q, \
                 CAST(column5 AS VARCHAR) AS f, CAST(column6 AS VARCHAR) AS g FROM (VALUES {})",
                table_name(kind, layout),
                values.join(", ")
            );
            calibsql::sql(&ctx, &sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
                .collect()
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
    ctx
}

/// The words of an argument list (to see which columns it reads).
fn uses(args: &str, column: &str) -> bool {
    args.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| w == column)
}

/// The documented outcome of `kind` for `row` called with `args`, or None when the kind does
/// not apply (a weight kind for a call without a weight).
fn expected(row: &Row, args: &str, kind: Bad) -> Option<Outcome> {
    let name = row.name;
    let (_, v) = bad_value(kind);
    let error = |arg: &str, rule: &str| {
        Some(Outcome::Error(format!(
            "{name}: argument {arg} must be {rule}, got {v}"
        )))
    };
    match kind {
        Bad::FirstNaN | Bad::FirstInf | Bad::FirstNegInf => match row.role {
            First::Probability | First::Probs => error(row.first, "in [0, 1]"),
            First::Score | First::Scores => error(row.first, "finite"),
        },
        Bad::FirstAboveOne | Bad::FirstNegative => match row.role {
            First::Probability | First::Probs => error(row.first, "in [0, 1]"),
            First::Score | First::Scores => Some(Outcome::Value),
        },
        Bad::Label2 => match row.role {
            First::Probs | First::Scores => error("label", "a class index from 0 to 1"),
            // A function without a label (`cbpe`) does not read it.
            _ if !uses(args, "y") => Some(Outcome::Value),
            _ => error("y", "0 or 1"),
        },
        Bad::WeightNaN | Bad::WeightNegative | Bad::WeightInf => {
            uses(args, "w").then(|| error("w", "finite and >= 0"))?
        }
        Bad::PropensityNaN | Bad::PropensityZero | Bad::PropensityAboveOne => {
            uses(args, "q").then(|| error("propensity", "in (0, 1]"))?
        }
        Bad::ZeroWeights => uses(args, "w").then_some(Outcome::Null),
        Bad::Empty | Bad::AllNull => Some(Outcome::Null),
    }
}

/// The query of one case: `call` over the table of (kind, layout). An empty input in the
/// grouped layout is a FILTER that keeps no row of any group; in the NULL layout, a FILTER
/// without GROUP BY; in the plain one, a WHERE.
fn query(call: &str, kind: Bad, layout: Layout) -> String {
    let t = table_name(kind, layout);
    let empty = kind == Bad::Empty;
    match layout {
        Layout::Plain if empty => format!("SELECT {call} AS v FROM {t} WHERE p > 2"),
        Layout::Plain => format!("SELECT {call} AS v FROM {t}"),
        Layout::Nulls if empty => format!("SELECT {call} FILTER (WHERE p > 2) AS v FROM {t}"),
        Layout::Nulls => format!("SELECT {call} AS v FROM {t}"),
        Layout::Grouped if empty => {
            format!("SELECT g, {call} FILTER (WHERE p > 2) AS v FROM {t} GROUP BY g")
        }
        Layout::Grouped => format!("SELECT g, {call} AS v FROM {t} GROUP BY g"),
    }
}

/// Runs `sql` and checks it against `want`; a failure is described, not panicked.
async fn check(ctx: &SessionContext, sql: &str, want: &Outcome) -> Option<String> {
    let result = match calibsql::sql(ctx, sql).await {
        Ok(df) => df.collect().await,
        Err(e) => Err(e),
    };
    match (result, want) {
        (Err(e), Outcome::Error(text)) => {
            let got = e.strip_backtrace();
            let ok = got.contains(text.as_str())
                && got.lines().count() == 1
                && !got.contains("panicked");
            (!ok).then(|| format!("{sql}\n  want error: {text}\n  got:        {got}"))
        }
        (Err(e), _) => Some(format!(
            "{sql}\n  want {want:?}, got error: {}",
            e.strip_backtrace()
        )),
        (Ok(batches), Outcome::Error(text)) => Some(format!(
            "{sql}\n  want error: {text}\n  got {} row(s)",
            batches.iter().map(|b| b.num_rows()).sum::<usize>()
        )),
        (Ok(batches), want) => {
            let column = batches[0].schema().index_of("v").unwrap();
            let cells: Vec<bool> = batches
                .iter()
                .flat_map(|b| {
                    let c = b.column(column);
                    (0..c.len()).map(|i| c.is_null(i)).collect::<Vec<_>>()
                })
                .collect();
            let null = *want == Outcome::Null;
            let ok = !cells.is_empty() && cells.iter().all(|&is_null| is_null == null);
            if !ok {
                return Some(format!(
                    "{sql}\n  want {want:?}, got NULL pattern {cells:?}"
                ));
            }
            if *want == Outcome::Probability {
                let values: Vec<f64> = batches
                    .iter()
                    .flat_map(|b| {
                        let c = b.column(column).as_primitive::<Float64Type>();
                        c.values().to_vec()
                    })
                    .collect();
                if !values.iter().all(|v| (0.0..=1.0).contains(v)) {
                    return Some(format!("{sql}\n  want probabilities, got {values:?}"));
                }
            }
            None
        }
    }
}

#[test]
fn every_registered_aggregate_has_a_row() {
    let registered: BTreeSet<String> = calibsql::udfs::all_aggregate_functions()
        .iter()
        .map(|f| f.name().to_string())
        .collect();
    let mut covered = BTreeSet::new();
    let mut problems = vec![];
    for row in AGGREGATES {
        covered.insert(row.name.to_string());
        let twins = [format!("{}_state", row.name), format!("{}_merge", row.name)];
        for twin in &twins {
            match (registered.contains(twin), row.stored.is_empty()) {
                (true, true) => problems.push(format!(
                    "{twin} is registered but the row of {} has no stored calls",
                    row.name
                )),
                (false, false) => problems.push(format!(
                    "the row of {} has stored calls but {twin} is not registered",
                    row.name
                )),
                _ => {}
            }
            covered.insert(twin.clone());
        }
        let Some(f) = calibsql::udfs::all_aggregate_functions()
            .into_iter()
            .find(|f| f.name() == row.name)
        else {
            problems.push(format!("{} has a row but is not registered", row.name));
            continue;
        };
        // The row's argument names are the function's, and every data argument the function
        // takes (weight, propensity) is used by some call, so its kinds are checked.
        let usage = f.documentation().map(|d| d.syntax_example.clone());
        let usage = usage.unwrap_or_default();
        let params: Vec<String> = match &f.signature().parameter_names {
            Some(p) => p.clone(),
            None => usage
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .map(String::from)
                .collect(),
        };
        if !params.iter().any(|p| p == row.first) {
            problems.push(format!(
                "{}: the row calls its first argument {}, the function {params:?}",
                row.name, row.first
            ));
        }
        for (param, column) in [("w", "w"), ("propensity", "q")] {
            if params.iter().any(|p| p == param) && !row.calls.iter().any(|c| uses(c, column)) {
                problems.push(format!(
                    "{} takes {param} but no call of its row passes it",
                    row.name
                ));
            }
        }
    }
    for name in registered.difference(&covered) {
        problems.push(format!(
            "{name} is registered but has no row in bad_input.rs AGGREGATES"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every case of the table: (query, documented outcome).
fn cases() -> Vec<(String, Outcome)> {
    let mut out = vec![];
    for row in AGGREGATES {
        let name = row.name;
        for &kind in KINDS {
            for layout in LAYOUTS {
                for args in row.calls {
                    if let Some(want) = expected(row, args, kind) {
                        out.push((query(&format!("{name}({args})"), kind, layout), want));
                    }
                }
                for args in row.stored {
                    let Some(want) = expected(row, args, kind) else {
                        continue;
                    };
                    let state = query(&format!("{name}_state({args})"), kind, layout);
                    // F_state of no usable row is a state (of no rows), not NULL.
                    if want == Outcome::Null {
                        out.push((state.clone(), Outcome::Value));
                    }
                    let sql = match want {
                        // The rows go through F_state, which checks them as F does.
                        Outcome::Error(_) => state,
                        // F_merge over the states F_state makes of these rows.
                        _ => {
                            let inner = state.replacen(" AS v ", " AS s ", 1);
                            match layout {
                                Layout::Grouped => format!(
                                    "SELECT g, {name}_merge(s) AS v FROM ({inner}) GROUP BY g"
                                ),
                                _ => format!("SELECT {name}_merge(s) AS v FROM ({inner})"),
                            }
                        }
                    };
                    out.push((sql, want));
                }
            }
        }
        // NULL states are skipped, and only NULL states give NULL. (The good rows: the empty
        // kind's table read without its WHERE.)
        let t = table_name(Bad::Empty, Layout::Plain);
        for args in row.stored {
            out.push((
                format!(
                    "SELECT {name}_merge(CASE WHEN p > 2 THEN s END) AS v \
                     FROM (SELECT max(p) AS p, {name}_state({args}) AS s FROM {t})"
                ),
                Outcome::Null,
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_aggregate_gives_the_documented_outcome_for_every_bad_input() {
    use futures::StreamExt;
    let ctx = context().await;
    let cases = cases();
    let checked = cases.len();
    let failures: Vec<String> = futures::stream::iter(&cases)
        .map(|(sql, want)| check(&ctx, sql, want))
        .buffered(4)
        .filter_map(|f| async move { f })
        .collect()
        .await;
    assert!(
        failures.is_empty(),
        "{} of {checked} cases fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The NULLs documented beyond "no usable row": `normalized_entropy` of a base rate of 0 or 1
/// (its entropy is 0) and `auc` of one class.
#[tokio::test]
async fn documented_nulls() {
    let ctx = calibsql::new_context();
    let mut failures = vec![];
    for y in [0, 1] {
        let t = format!("(VALUES (0.2, {y}, 1.0), (0.7, {y}, 2.0), (0.4, {y}, 0.5)) AS t(p, y, w)");
        for call in [
            "normalized_entropy(p, y)",
            "normalized_entropy(p, y, w)",
            "auc(p, y)",
            "auc(p, y, w)",
        ] {
            let sql = format!("SELECT {call} AS v FROM {t}");
            failures.extend(check(&ctx, &sql, &Outcome::Null).await);
        }
        let sql = format!(
            "SELECT normalized_entropy_merge(s) AS v FROM (SELECT normalized_entropy_state(p, y) AS s FROM {t})"
        );
        failures.extend(check(&ctx, &sql, &Outcome::Null).await);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The one-group fast paths check a whole batch at once and fall back to the checked path
/// when a value is bad, which must still name it: the table above has a few rows, so the
/// paths that take over only in large batches (`mvce`'s direct index from 256 rows with
/// integer keys, `smooth_ece`'s cell loop past its ~20,000 raw rows; `spiegelhalter`'s
/// lanes, `calibration_slope`'s logits through the fits' batch path) get a batch of 30,000
/// good rows (every p inside (0, 1)) with one bad value last, with labels of each native
/// type.
#[tokio::test]
async fn large_batches_name_their_one_bad_value() {
    let ctx = calibsql::new_context();
    let mut failures = vec![];
    for label in ["TINYINT", "INT", "BIGINT", "DOUBLE"] {
        for (bad_p, bad_y, arg, shown) in [("0.5", "2", "y", "2"), ("1.5", "1", "p", "1.5")] {
            let table = format!(
                "(SELECT CASE WHEN value = 30000 THEN {bad_p} ELSE ((value % 997) + 0.5) / 998.0 END AS p, \
                 CAST(CASE WHEN value = 30000 THEN {bad_y} ELSE value % 2 END AS {label}) AS y, \
                 value % 50 AS k FROM generate_series(1, 30000))"
            );
            let rule = if arg == "y" { "0 or 1" } else { "in [0, 1]" };
            for (name, call) in [
                ("mvce", "mvce(p, y, k)"),
                ("smooth_ece", "smooth_ece(p, y)"),
                ("spiegelhalter", "spiegelhalter(p, y)"),
                ("calibration_slope", "calibration_slope(p, y)"),
            ] {
                let sql = format!(
                    "SET datafusion.execution.batch_size = 32768; SELECT {call} FROM {table}"
                );
                let want = format!("{name}: argument {arg} must be {rule}, got {shown}");
                let got = match run_script(&ctx, &sql).await {
                    Ok(()) => "a value".to_string(),
                    Err(e) => e,
                };
                if !got.contains(&want) {
                    failures.push(format!(
                        "{label} labels, {call}: want {want:?}, got {got:?}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Runs `;`-separated statements, the last one collected; the first error as text.
async fn run_script(ctx: &SessionContext, sql: &str) -> Result<(), String> {
    for statement in sql.split(';') {
        calibsql::sql(ctx, statement)
            .await
            .map_err(|e| e.to_string())?
            .collect()
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The scalar functions that take probabilities, counts or a model: each bad value is an error
/// naming the function, the argument and the value; `sigmoid` is math (NaN in, NaN out).
#[tokio::test]
async fn scalars_reject_bad_values() {
    let ctx = calibsql::new_context();
    let values = [
        ("CAST('NaN' AS DOUBLE)", "NaN"),
        ("CAST('Infinity' AS DOUBLE)", "inf"),
        ("CAST('-Infinity' AS DOUBLE)", "-inf"),
        ("1.5", "1.5"),
        ("-0.5", "-0.5"),
    ];
    let mut failures = vec![];
    // (call with X for the bad value, the argument's name)
    let probabilities = [
        ("logit(X)", "logit", "p"),
        ("wilson_z(X, 0.5, 10)", "wilson_z", "p_hat"),
        ("wilson_z(0.5, X, 10)", "wilson_z", "pos_rate"),
        (
            "confcalib_multiplier(X, 0.5, 10)",
            "confcalib_multiplier",
            "p_hat",
        ),
        (
            "confcalib_multiplier(0.5, X, 10)",
            "confcalib_multiplier",
            "pos_rate",
        ),
        (
            "wilson_interval(X, 10, 1.96)",
            "wilson_interval",
            "pos_rate",
        ),
        ("downsample_correct(X, 0.1)", "downsample_correct", "p"),
    ];
    for (call, func, arg) in probabilities {
        for (sql_value, shown) in values {
            let sql = format!("SELECT {} AS v", call.replace('X', sql_value));
            let want = Outcome::Error(format!(
                "{func}: argument {arg} must be in [0, 1], got {shown}"
            ));
            failures.extend(check(&ctx, &sql, &want).await);
        }
    }
    let others = [
        (
            "wilson_z(0.5, 0.4, X)",
            "CAST('NaN' AS DOUBLE)",
            "wilson_z: argument n must be >= 0, got NaN",
        ),
        (
            "wilson_z(0.5, 0.4, X)",
            "-1.0",
            "wilson_z: argument n must be >= 0, got -1",
        ),
        (
            "confcalib_multiplier(0.5, 0.4, X)",
            "CAST('NaN' AS DOUBLE)",
            "confcalib_multiplier: argument n must be >= 0, got NaN",
        ),
        (
            "wilson_interval(0.5, X, 1.96)",
            "CAST('NaN' AS DOUBLE)",
            "wilson_interval: argument n must be a number, got NaN",
        ),
        (
            "wilson_interval(0.5, 10, X)",
            "CAST('NaN' AS DOUBLE)",
            "wilson_interval: argument z must be finite and >= 0, got NaN",
        ),
        (
            "wilson_interval(0.5, 10, X)",
            "CAST('Infinity' AS DOUBLE)",
            "wilson_interval: argument z must be finite and >= 0, got inf",
        ),
        (
            "popularity_propensity(X, 10)",
            "CAST('NaN' AS DOUBLE)",
            "popularity_propensity: argument count must be in [0, max_count = 10], got NaN",
        ),
        (
            "popularity_propensity(X, 10)",
            "CAST('Infinity' AS DOUBLE)",
            "popularity_propensity: argument count must be in [0, max_count = 10], got inf",
        ),
        (
            "popularity_propensity(X, 10)",
            "-1.0",
            "popularity_propensity: argument count must be in [0, max_count = 10], got -1",
        ),
        (
            "popularity_propensity(1, X)",
            "CAST('NaN' AS DOUBLE)",
            "popularity_propensity: argument max_count must be finite and > 0, got NaN",
        ),
        (
            "popularity_propensity(1, X)",
            "CAST('Infinity' AS DOUBLE)",
            "popularity_propensity: argument max_count must be finite and > 0, got inf",
        ),
        (
            "downsample_correct(0.5, X)",
            "CAST('NaN' AS DOUBLE)",
            "downsample_correct: argument rate must be in (0, 1], got NaN",
        ),
        (
            "downsample_correct(0.5, X)",
            "CAST('Infinity' AS DOUBLE)",
            "downsample_correct: argument rate must be in (0, 1], got inf",
        ),
        (
            "downsample_correct(0.5, X)",
            "0.0",
            "downsample_correct: argument rate must be in (0, 1], got 0",
        ),
        (
            "downsample_correct(0.5, X)",
            "1.5",
            "downsample_correct: argument rate must be in (0, 1], got 1.5",
        ),
    ];
    for (call, sql_value, want) in others {
        let sql = format!("SELECT {} AS v", call.replace('X', sql_value));
        failures.extend(check(&ctx, &sql, &Outcome::Error(want.to_string())).await);
    }
    // sigmoid: NaN → NaN, ±Infinity → 1 / 0 (docs/SEMANTICS.md "Scalars").
    let sql =
        "SELECT sigmoid(CAST('NaN' AS DOUBLE)) AS a, sigmoid(CAST('Infinity' AS DOUBLE)) AS b, \
               sigmoid(CAST('-Infinity' AS DOUBLE)) AS c";
    let batches = calibsql::sql(&ctx, sql)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let b = &batches[0];
    let get = |i: usize| {
        b.column(i)
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Float64Array>()
            .unwrap()
            .value(0)
    };
    if !(get(0).is_nan() && get(1) == 1.0 && get(2) == 0.0) {
        failures.push(format!(
            "{sql}: {} {} {}, want NaN 1 0",
            get(0),
            get(1),
            get(2)
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `calibrate`: a NaN score is an error for every model; a model fitted on probabilities
/// (beta, BBQ, ConfCalib) refuses a score outside [0, 1]; the others take any score, ±Infinity
/// included, and give a probability — the model's limit (docs/SEMANTICS.md "Fitting
/// calibrators"), also for the constant models (Platt with b = 0, temperature T = +Infinity),
/// where b·s or s/T would be NaN.
#[tokio::test]
async fn calibrate_takes_any_score_its_model_is_defined_for() {
    let ctx = calibsql::new_context();
    // Both classes at both ends, and labels that the score ranks the wrong way (the
    // constant models: Platt b = 0, temperature T = +Infinity).
    let ranked =
        "(VALUES (0.1, 0, 'a'), (0.9, 1, 'b'), (0.5, 0, 'a'), (0.6, 1, 'b')) AS t(s, y, f)";
    let reversed = "(VALUES (0.1, 1, 'a'), (0.9, 0, 'b'), (0.5, 0, 'a')) AS t(s, y, f)";
    // (fit, its method, whether it takes a probability)
    let fits = [
        ("fit_platt(s, y)", "platt", false),
        ("fit_temperature(s, y)", "temperature", false),
        ("fit_beta_calib(s, y)", "beta", true),
        ("fit_gaussian_calib(s, y)", "gaussian", false),
        ("fit_gamma_calib(s, y)", "gamma", false),
        ("fit_isotonic(s, y)", "isotonic", false),
        ("fit_histogram(s, y)", "histogram", false),
        (
            "fit_histogram(s, y, 2, 'quantile')",
            "histogram_quantile",
            false,
        ),
        ("fit_ilps(s, y)", "ilps", false),
        ("fit_bbq(s, y)", "bbq", true),
        ("fit_confcalib(s, y, f)", "confcalib", true),
        ("fit_field_calib(s, y, f)", "field_calib", false),
    ];
    let scores = [
        ("CAST('Infinity' AS DOUBLE)", "inf"),
        ("CAST('-Infinity' AS DOUBLE)", "-inf"),
        ("1.5", "1.5"),
        ("-0.5", "-0.5"),
    ];
    let mut failures = vec![];
    for (fit, method, takes_probability) in fits {
        let field = if method.contains("calib") && method != "beta" {
            ", 'a'"
        } else {
            ""
        };
        for data in [ranked, reversed] {
            let from = format!("(SELECT {fit} AS m FROM {data})");
            let sql = format!("SELECT calibrate(CAST('NaN' AS DOUBLE), m{field}) AS v FROM {from}");
            let want = Outcome::Error("calibrate: argument score must be a number, got NaN".into());
            failures.extend(check(&ctx, &sql, &want).await);
            for (value, shown) in scores {
                let sql = format!("SELECT calibrate({value}, m{field}) AS v FROM {from}");
                let want = if takes_probability {
                    Outcome::Error(format!(
                        "calibrate: a {method} model takes a probability in [0, 1] as score, got {shown}"
                    ))
                } else {
                    Outcome::Probability
                };
                failures.extend(check(&ctx, &sql, &want).await);
            }
        }
    }
    // The constant models give their constant at ±Infinity too.
    let sql = format!(
        "SELECT platt['b'], temperature['a'], \
           calibrate(CAST('Infinity' AS DOUBLE), platt) = calibrate(0.3, platt), \
           calibrate(CAST('-Infinity' AS DOUBLE), platt) = calibrate(0.3, platt), \
           calibrate(CAST('Infinity' AS DOUBLE), temperature), \
           calibrate(CAST('-Infinity' AS DOUBLE), temperature) \
         FROM (SELECT fit_platt(s, y) AS platt, fit_temperature(s, y) AS temperature FROM {reversed})"
    );
    let batches = calibsql::sql(&ctx, &sql)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let got = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    let last = got.lines().rev().nth(1).unwrap_or_default().to_string();
    let cells: Vec<&str> = last
        .split('|')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    if cells != ["0.0", "inf", "true", "true", "0.5", "0.5"] {
        failures.push(format!(
            "{sql}\n  want 0.0 inf true true 0.5 0.5, got\n{got}"
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
