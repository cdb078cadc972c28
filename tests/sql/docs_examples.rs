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

#[tokio::test]
async fn show_functions_lists_every_function_with_parameters() {
    let ctx = calibsql::new_context();
    for name in calibsql::udfs::all_aggregate_functions()
        .iter()
        .map(|f| f.name().to_string())
        .chain(
            calibsql::udfs::all_scalar_functions()
                .iter()
                .map(|f| f.name().to_string()),
        )
    {
        let df = ctx
            .sql(&format!("SHOW FUNCTIONS LIKE '{name}'"))
            .await
            .unwrap();
        let text = pretty_format_batches(&df.collect().await.unwrap())
            .unwrap()
            .to_string();
        assert!(
            text.contains(&name),
            "SHOW FUNCTIONS misses {name}:\n{text}"
        );
        assert!(
            text.contains("p") || text.contains("x") || text.contains("count"),
            "SHOW FUNCTIONS shows no parameters for {name}:\n{text}"
        );
    }
}
