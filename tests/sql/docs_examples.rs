//! Every function's documented SQL example runs and prints exactly the table its
//! documentation shows, so the docs cannot drift from the code. Where was each value derived?
//! Most examples are small enough to verify on paper (see the doc text); the ones a reference
//! library defines (smooth_ece: relplot, ece_debiased: uncertainty-calibration, auc, logloss,
//! brier, normalized_entropy: scikit-learn, wilson_interval: statsmodels) are computed by that
//! library in `tests/gen/doc_examples.py`, whose `--check` CI runs.

use datafusion::arrow::util::pretty::pretty_format_batches;

fn examples() -> Vec<(String, String)> {
    let mut out = vec![];
    let docs = calibsql::udfs::all_aggregate_functions()
        .iter()
        .map(|f| (f.name().to_string(), f.documentation().cloned()))
        .chain(
            calibsql::udfs::all_scalar_functions()
                .iter()
                .map(|f| (f.name().to_string(), f.documentation().cloned())),
        )
        .collect::<Vec<_>>();
    for (name, doc) in docs {
        let doc = doc.unwrap_or_else(|| panic!("{name} has no documentation"));
        let ex = doc
            .sql_example
            .unwrap_or_else(|| panic!("{name} has no SQL example"));
        out.push((name, ex));
    }
    out
}

/// Splits "```sql\n> SELECT …;\n+--…\n```" into the query and the expected table.
fn parse(example: &str) -> (String, String) {
    let body = example
        .trim()
        .trim_start_matches("```sql")
        .trim_end_matches("```")
        .trim();
    let mut sql = String::new();
    let mut table = String::new();
    for line in body.lines() {
        if line.starts_with('+') || line.starts_with('|') {
            table.push_str(line.trim());
            table.push('\n');
        } else {
            sql.push_str(line.trim_start_matches("> "));
            sql.push('\n');
        }
    }
    (sql, table)
}

#[tokio::test]
async fn every_documented_example_prints_its_table() {
    let ctx = calibsql::new_context();
    let mut failures = vec![];
    for (name, ex) in examples() {
        let (sql, expected) = parse(&ex);
        let batches = match ctx.sql(&sql).await {
            Ok(df) => df.collect().await,
            Err(e) => Err(e),
        };
        match batches {
            Ok(b) => {
                let got = pretty_format_batches(&b).unwrap().to_string();
                let got: String = got.lines().map(|l| format!("{}\n", l.trim())).collect();
                if got != expected {
                    failures.push(format!("{name}:\n{sql}\nexpected:\n{expected}got:\n{got}"));
                }
            }
            Err(e) => failures.push(format!("{name}: {sql}\nfailed: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The `parameters` lists `SHOW FUNCTIONS` shows for `name` (one per listed signature).
async fn listed_parameters(
    ctx: &datafusion::prelude::SessionContext,
    name: &str,
) -> Vec<Vec<Option<String>>> {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{DataType, Field};
    let df = ctx
        .sql(&format!("SHOW FUNCTIONS LIKE '{name}'"))
        .await
        .unwrap();
    let mut out = vec![];
    for b in df.collect().await.unwrap() {
        let names = b.column_by_name("function_name").unwrap();
        let names = datafusion::arrow::compute::cast(names, &DataType::Utf8).unwrap();
        let params = b.column_by_name("parameters").unwrap();
        let list_type = DataType::List(std::sync::Arc::new(Field::new_list_field(
            DataType::Utf8,
            true,
        )));
        let params = datafusion::arrow::compute::cast(params, &list_type).unwrap();
        let params = params.as_list::<i32>();
        for i in 0..b.num_rows() {
            // LIKE matches `ece_state` for 'ece' only with a wildcard; keep exact names.
            if names.as_string::<i32>().value(i) != name || params.is_null(i) {
                continue;
            }
            let v = params.value(i);
            out.push(
                v.as_string::<i32>()
                    .iter()
                    .map(|s| s.map(String::from))
                    .collect(),
            );
        }
    }
    out
}

/// `SHOW FUNCTIONS` lists every function with its parameters: for a function with parameter
/// names, every listed signature's parameters are a prefix of them and the longest is all of
/// them; for one without (`multi_field_rce`), they are its documented arguments.
#[tokio::test]
async fn show_functions_lists_every_function_with_parameters() {
    let ctx = calibsql::new_context();
    let aggregates = calibsql::udfs::all_aggregate_functions();
    let scalars = calibsql::udfs::all_scalar_functions();
    let functions: Vec<(String, Option<Vec<String>>, Vec<String>)> = aggregates
        .iter()
        .map(|f| {
            (
                f.name().to_string(),
                f.signature().parameter_names.clone(),
                f.documentation()
                    .and_then(|d| d.arguments.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(n, _)| n)
                    .collect(),
            )
        })
        .chain(scalars.iter().map(|f| {
            (
                f.name().to_string(),
                f.signature().parameter_names.clone(),
                f.documentation()
                    .and_then(|d| d.arguments.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(n, _)| n)
                    .collect(),
            )
        }))
        .collect();
    let mut failures = vec![];
    for (name, names, documented) in functions {
        let listed = listed_parameters(&ctx, &name).await;
        if listed.is_empty() {
            failures.push(format!("SHOW FUNCTIONS lists no signature of {name}"));
            continue;
        }
        match names {
            Some(names) => {
                for row in &listed {
                    let prefix = row.len() <= names.len()
                        && row.iter().zip(&names).all(|(a, b)| a.as_deref() == Some(b));
                    if !prefix {
                        failures.push(format!(
                            "{name}: SHOW FUNCTIONS lists parameters {row:?}, not a prefix of {names:?}"
                        ));
                    }
                }
                if !listed.iter().any(|row| row.len() == names.len()) {
                    failures.push(format!(
                        "{name}: SHOW FUNCTIONS never lists all of {names:?}: {listed:?}"
                    ));
                }
            }
            None => {
                let known = |p: &Option<String>| match p {
                    Some(p) => documented.contains(p),
                    None => true,
                };
                if documented.is_empty()
                    || listed
                        .iter()
                        .any(|row| row.is_empty() || !row.iter().all(known))
                {
                    failures.push(format!(
                        "{name}: SHOW FUNCTIONS lists {listed:?}, documented arguments {documented:?}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
