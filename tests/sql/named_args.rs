//! Named arguments (`ece(p, y, w => weight)`): every calibsql function takes its optional
//! arguments by name, a named argument may skip optional ones (they take their defaults, see
//! `calibsql::named_args`), and every default there means the same as leaving the argument
//! out — checked for every optional argument of every registered function, so a new one
//! cannot be missed. These compare calibsql with itself (two spellings of one call), so they prove the
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
    for sql in [
        "CREATE TABLE t0(p DOUBLE, y INT, w DOUBLE, f VARCHAR, q DOUBLE, s DOUBLE, n DOUBLE) AS VALUES \
         (0.1, 0, 1.0, 'a', 0.5, -2.0, 10), (0.3, 1, 2.0, 'b', 0.2, -0.5, 20), \
         (0.3, 0, 0.5, 'a', 0.9, -0.5, 30), (0.6, 1, 1.5, 'b', 1.0, 0.4, 40), \
         (0.8, 1, 1.0, 'c', 0.3, 1.4, 50), (0.9, 0, 3.0, 'a', 0.6, 2.2, 60), \
         (1.0, 1, 1.0, 'c', 0.7, 3.0, 70), (0.45, 0, 2.5, 'b', 0.1, 0.0, 80)",
        // m: a field-aware model, for calibrate's optional field.
        "CREATE TABLE t AS SELECT *, (SELECT fit_field_calib(s, y, f, 3) FROM t0) AS m FROM t0",
    ] {
        calibsql::sql(&ctx, sql)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
    }
    ctx
}

/// The column (or constant) each parameter name reads in the test table: the required
/// arguments, and a value for the optional ones without a default.
fn column(param: &str) -> Option<&'static str> {
    Some(match param {
        "p" | "p_hat" | "p_a" | "p_b" => "p",
        "y" | "label" => "y",
        "probs" | "scores" => "make_array(1 - p, p)",
        "w" => "w",
        "field" | "key" => "f",
        "propensity" => "q",
        "score" | "logit" => "s",
        "pos_rate" => "0.4",
        "n" | "count" => "n",
        "max_count" => "80",
        "x" => "s",
        "z" => "1.96",
        "model" => "m",
        "sigma" => "0.05",
        _ => return None,
    })
}

/// Functions whose optional arguments have no names: `multi_field_rce` (a variable number of
/// fields before `eps`), checked here by position instead: (leaving eps out, giving the default).
const NOT_NAMED: &[(&str, &str, &str)] = &[(
    "multi_field_rce",
    "multi_field_rce(p, y, f, y)",
    "multi_field_rce(p, y, f, y, 0.01)",
)];

/// Functions whose call with the defaults is an error by design, and the error: every spelling
/// must give that same error. (`ace` bins by 'quantile' by default, whose state is not bounded.)
const FAIL_BY_DESIGN: &[(&str, &str)] = &[(
    "ace_state",
    "ace_state: strategy 'quantile' keeps every row, so its state is not bounded",
)];

/// The number of required arguments: those before the first `[` of the documented syntax
/// (`ece(p, y [, n_bins …])`: 2).
fn required_count(name: &str, syntax: &str) -> usize {
    let inside = syntax
        .strip_prefix(&format!("{name}("))
        .unwrap_or_else(|| panic!("{name}: its syntax is {syntax}"));
    let head = inside.split('[').next().unwrap_or(inside);
    head.trim_end_matches(')')
        .split(',')
        .filter(|a| !a.trim().is_empty())
        .count()
}

/// For every optional argument of every function: naming it gives what the positional call
/// gives, and naming its default gives what leaving it out gives. A function whose optional
/// arguments get no case — its required arguments have no column here, its call errors, it
/// has no parameter names — fails the test instead of being skipped.
#[tokio::test]
async fn every_default_means_leaving_the_argument_out() {
    let ctx = context().await;
    let aggregates = calibsql::udfs::all_aggregate_functions();
    let scalars = calibsql::udfs::all_scalar_functions();
    let functions = aggregates
        .iter()
        .map(|f| {
            (
                f.name().to_string(),
                f.signature().parameter_names.clone(),
                f.documentation().map(|d| d.syntax_example.clone()),
            )
        })
        .chain(scalars.iter().map(|f| {
            (
                f.name().to_string(),
                f.signature().parameter_names.clone(),
                f.documentation().map(|d| d.syntax_example.clone()),
            )
        }));
    let mut failures = vec![];
    let mut checked = 0;
    let mut not_named_seen = vec![];
    for (name, params, syntax) in functions {
        let syntax = syntax.unwrap_or_default();
        let Some(params) = params else {
            match NOT_NAMED.iter().find(|(n, _, _)| *n == name) {
                Some((_, left_out, default)) => {
                    not_named_seen.push(name.clone());
                    let a = run(&ctx, &format!("SELECT {left_out} AS v FROM t")).await;
                    let b = run(&ctx, &format!("SELECT {default} AS v FROM t")).await;
                    match (a, b) {
                        (Ok(a), Ok(b)) if a == b => checked += 1,
                        (a, b) => failures.push(format!("{left_out}: {a:?}\n{default}: {b:?}")),
                    }
                }
                None if syntax.contains('[') => failures.push(format!(
                    "{name} has optional arguments ({syntax}) but no parameter names"
                )),
                None => {}
            }
            continue;
        };
        let required = required_count(&name, &syntax);
        if required == params.len() {
            continue; // no optional argument
        }
        let Some(args) = params[..required]
            .iter()
            .map(|p| column(p))
            .collect::<Option<Vec<_>>>()
        else {
            failures.push(format!(
                "{name}: no column for its required arguments {:?}",
                &params[..required]
            ));
            continue;
        };
        let by_design = FAIL_BY_DESIGN.iter().find(|(n, _)| *n == name);
        let call = |list: &[String]| format!("SELECT {name}({}) AS v FROM t", list.join(", "));
        for i in required..params.len() {
            // Earlier optional arguments: positionally their default (or the test value of
            // one without a default); by name only those without a default, which a named
            // call cannot leave out.
            let mut positional: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            let mut named = positional.clone();
            let mut left_out = positional.clone();
            for p in &params[required..i] {
                match calibsql::udfs::argument_default(&name, p) {
                    Some(d) => positional.push(d.to_string()),
                    None => {
                        let v = column(p).unwrap_or("NULL");
                        positional.push(v.to_string());
                        named.push(format!("{p} => {v}"));
                        left_out = positional.clone();
                    }
                }
            }
            let p = &params[i];
            let default = calibsql::udfs::argument_default(&name, p);
            let Some(value) = default.or_else(|| column(p)) else {
                failures.push(format!("{name}: no value for its optional argument {p}"));
                continue;
            };
            positional.push(value.to_string());
            named.push(format!("{p} => {value}"));
            let mut spellings = vec![call(&named), call(&positional)];
            if default.is_some() {
                spellings.push(call(&left_out));
            }
            let mut results = vec![];
            for sql in &spellings {
                results.push(run(&ctx, sql).await);
            }
            let agree = results.iter().all(|r| *r == results[0]);
            let ok = match (by_design, &results[0]) {
                (None, Ok(_)) => agree,
                (Some((_, want)), Err(e)) => agree && e.contains(want),
                _ => false,
            };
            if ok {
                checked += 1;
            } else {
                let shown: Vec<String> = spellings
                    .iter()
                    .zip(&results)
                    .map(|(sql, r)| format!("  {sql}\n    {r:?}"))
                    .collect();
                failures.push(format!("{name}, argument {p}:\n{}", shown.join("\n")));
            }
        }
    }
    for (name, _, _) in NOT_NAMED {
        if !not_named_seen.iter().any(|n| n == name) {
            failures.push(format!(
                "{name} is in NOT_NAMED but has parameter names or is gone"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 100, "only {checked} arguments checked");
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
    let err = run(&ctx, "SELECT fit_ilps(s, y, clip => 0.2) FROM t")
        .await
        .unwrap_err();
    assert!(
        err.contains("fit_ilps: argument propensity must be given when clip is"),
        "{err}"
    );
    let err = run(&ctx, "SELECT ece(p, y, bins => 3) FROM t")
        .await
        .unwrap_err();
    assert!(err.contains("Unknown parameter name 'bins'"), "{err}");
}
