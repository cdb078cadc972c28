//! Named arguments (`ece(p, y, w => weight)`): every calibsql function takes its optional
//! arguments by name, a named argument may skip optional ones (they take their defaults, see
//! `calibsql::named_args`), and every default there means the same as leaving the argument
//! out. These compare calibsql with itself (two spellings of one call), so they prove the
//! spellings agree, not that the values are right — the slt files check the values.

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::SessionContext;

async fn run(ctx: &SessionContext, sql: &str) -> Result<String, String> {
    let df = calibsql::sql(ctx, sql).await.map_err(|e| e.to_string())?;
    let batches = df.collect().await.map_err(|e| e.to_string())?;
    Ok(pretty_format_batches(&batches).unwrap().to_string())
}

async fn context() -> SessionContext {
    let ctx = calibsql::new_context();
    calibsql::sql(
        &ctx,
        "CREATE TABLE t(p DOUBLE, y INT, w DOUBLE, f VARCHAR, q DOUBLE, s DOUBLE, n DOUBLE) AS VALUES \
         (0.1, 0, 1.0, 'a', 0.5, -2.0, 10), (0.3, 1, 2.0, 'b', 0.2, -0.5, 20), \
         (0.3, 0, 0.5, 'a', 0.9, -0.5, 30), (0.6, 1, 1.5, 'b', 1.0, 0.4, 40), \
         (0.8, 1, 1.0, 'c', 0.3, 1.4, 50), (0.9, 0, 3.0, 'a', 0.6, 2.2, 60), \
         (1.0, 1, 1.0, 'c', 0.7, 3.0, 70), (0.45, 0, 2.5, 'b', 0.1, 0.0, 80)",
    )
    .await
    .unwrap()
    .collect()
    .await
    .unwrap();
    ctx
}

/// The column (or constant) each parameter name reads in the test table.
fn column(param: &str) -> Option<&'static str> {
    Some(match param {
        "p" | "p_hat" => "p",
        "y" => "y",
        "w" => "w",
        "field" => "f",
        "propensity" => "q",
        "score" => "s",
        "pos_rate" => "0.4",
        "n" | "count" => "n",
        "max_count" => "80",
        "x" => "s",
        "z" => "1.96",
        _ => return None,
    })
}

#[tokio::test]
async fn every_default_means_leaving_the_argument_out() {
    let ctx = context().await;
    let aggregates = calibsql::udfs::all_aggregate_functions();
    let scalars = calibsql::udfs::all_scalar_functions();
    let functions = aggregates
        .iter()
        .map(|f| (f.name().to_string(), f.signature().parameter_names.clone()))
        .chain(
            scalars
                .iter()
                .map(|f| (f.name().to_string(), f.signature().parameter_names.clone())),
        );
    let mut checked = 0;
    for (name, params) in functions {
        let Some(params) = params else {
            continue;
        };
        // The required prefix: the parameters the test table can fill.
        let required: Vec<&str> = params
            .iter()
            .take_while(|p| calibsql::udfs::argument_default(&name, p).is_none())
            .map(|p| p.as_str())
            .collect();
        let Some(args) = required
            .iter()
            .map(|p| column(p))
            .collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        let base = format!("SELECT {name}({}) AS v FROM t", args.join(", "));
        let Ok(expected) = run(&ctx, &base).await else {
            continue;
        };
        for p in &params[required.len()..] {
            let Some(default) = calibsql::udfs::argument_default(&name, p) else {
                continue;
            };
            let named = format!(
                "SELECT {name}({}, {p} => {default}) AS v FROM t",
                args.join(", ")
            );
            let got = run(&ctx, &named)
                .await
                .unwrap_or_else(|e| panic!("{named}: {e}"));
            assert_eq!(got, expected, "{named} differs from {base}");
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} defaults checked");
}

#[tokio::test]
async fn named_arguments_skip_to_the_one_given() {
    let ctx = context().await;
    let pairs = [
        ("ece(p, y, w => w)", "ece(p, y, 15, 'uniform', w)"),
        (
            "ece(p, y, strategy => 'quantile')",
            "ece(p, y, 15, 'quantile')",
        ),
        (
            "ece(p, y, n_bins => 4, strategy => 'sklearn')",
            "ece(p, y, 4, 'sklearn')",
        ),
        ("ece(y => y, p => p)", "ece(p, y)"),
        ("ace(p, y, w => w)", "ace(p, y, 15, 'quantile', w)"),
        (
            "reliability(p, y, level => 0.9)",
            "reliability(p, y, 15, 'uniform', 1.0, 0.9)",
        ),
        (
            "logloss(p, y, w => w)",
            "logloss(p, y, 2.220446049250313e-16, w)",
        ),
        ("field_rce(p, y, f, w => w)", "field_rce(p, y, f, 0.01, w)"),
        (
            "ips_logloss(p, y, q, eps => 0.001)",
            "ips_logloss(p, y, q, 0.1, 0.001)",
        ),
        (
            "popularity_propensity(n, 80, clip => 0.3)",
            "popularity_propensity(n, 80, 0.5, 0.3)",
        ),
        ("ECE(p, y, W => w)", "ece(p, y, 15, 'uniform', w)"),
    ];
    for (named, positional) in pairs {
        let a = run(&ctx, &format!("SELECT {named} AS v FROM t"))
            .await
            .unwrap_or_else(|e| panic!("{named}: {e}"));
        let b = run(&ctx, &format!("SELECT {positional} AS v FROM t"))
            .await
            .unwrap();
        assert_eq!(a, b, "{named} vs {positional}");
    }
    // Inside FILTER, window and COPY-like nesting too.
    let a = run(
        &ctx,
        "SELECT f, ece(p, y, w => w) FILTER (WHERE p > 0.2) AS v FROM t GROUP BY f ORDER BY f",
    )
    .await
    .unwrap();
    let b = run(
        &ctx,
        "SELECT f, ece(p, y, 15, 'uniform', w) FILTER (WHERE p > 0.2) AS v FROM t GROUP BY f ORDER BY f",
    )
    .await
    .unwrap();
    assert_eq!(a, b);
}

#[tokio::test]
async fn a_data_argument_cannot_be_skipped() {
    let ctx = context().await;
    let err = run(&ctx, "SELECT fit_platt(s, y, clip => 0.2) FROM t")
        .await
        .unwrap_err();
    assert!(
        err.contains("fit_platt: argument propensity must be given when clip is"),
        "{err}"
    );
    let err = run(&ctx, "SELECT ece(p, y, bins => 3) FROM t")
        .await
        .unwrap_err();
    assert!(err.contains("Unknown parameter name 'bins'"), "{err}");
}
