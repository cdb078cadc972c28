//! A join with a one-row side (the documented way to apply a model) is evaluated once and
//! becomes constants (`calibsql::constant_join`): the plan has no join left, and the result
//! is the one DataFusion's own planner gives with the join.
//!
//! This compares calibsql with calibsql: the same functions planned with and without the
//! rewrite, so it proves that the rewrite does not change results, not that they are right
//! (the fits' and `calibrate`'s values are checked against references in `tests/fits/`).

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::physical_plan::displayable;
use datafusion::prelude::SessionContext;

/// Site values, rows and the fixture tables: `t` (rows), `m` (one confcalib model), `models`
/// (two named models), `no_model` (none).
const SETUP: &[&str] = &[
    "CREATE TABLE t AS SELECT value AS id,
            ((value * 37) % 101) / 101.0 + 0.001 AS p,
            CASE WHEN (value * 11) % 7 < 2 THEN 1 ELSE 0 END AS y,
            'site' || CAST((value * 13) % 300 AS VARCHAR) AS site
     FROM generate_series(1, 20000)",
    "CREATE TABLE m AS SELECT fit_confcalib(p, y, site) AS cc, fit_platt(p, y) AS platt FROM t",
    "CREATE TABLE models AS
               SELECT 'cc' AS name, fit_confcalib(p, y, site) AS model FROM t
     UNION ALL SELECT 'cc_by_y', fit_confcalib(p, y, CAST(y AS VARCHAR)) FROM t",
    "CREATE TABLE no_model AS SELECT * FROM m WHERE false",
    "CREATE VIEW calibrated AS
     SELECT t.id, t.site, calibrate(t.p, m.cc, t.site) AS q FROM t CROSS JOIN m",
];

/// Queries whose join has a side of exactly one row: the plan must have no join left.
const ONE_ROW: &[&str] = &[
    // the documented form
    "SELECT avg(calibrate(t.p, m.cc, t.site)) AS a, count(*) AS n FROM t CROSS JOIN m",
    // the one-row side first
    "SELECT avg(calibrate(t.p, m.cc, t.site)) AS a FROM m CROSS JOIN t",
    // in a projection, with a filter and a sort that read the model too
    "SELECT t.id, calibrate(t.p, m.cc, t.site) AS q, m.cc['method'] AS method
     FROM t CROSS JOIN m WHERE calibrate(t.p, m.cc, t.site) > 0.5
     ORDER BY q DESC, t.id LIMIT 5",
    // GROUP BY another column and the model's own field
    "SELECT t.site, m.cc['method'] AS method, sum(calibrate(t.p, m.cc, t.site)) AS s
     FROM t CROSS JOIN m GROUP BY t.site, m.cc['method'] ORDER BY t.site LIMIT 5",
    // a join on a model's name against a table of models
    "SELECT avg(calibrate(t.p, mm.model, t.site)) AS a FROM t JOIN models mm ON mm.name = 'cc'",
    // a view that applies the model
    "SELECT site, sum(q) AS s FROM calibrated GROUP BY site ORDER BY site LIMIT 5",
    // a side that is an aggregate (one row by construction), and two models in one query
    "SELECT avg(calibrate(t.p, f.cc, t.site)) AS a, avg(calibrate(t.p, m.platt)) AS b
     FROM t CROSS JOIN (SELECT fit_confcalib(p, y, site) AS cc FROM t) f CROSS JOIN m",
    // an outer join keeps every row: the one-row side is the same as a cross join
    "SELECT avg(calibrate(t.p, m.cc, t.site)) AS a FROM t LEFT JOIN m ON true",
    // the model itself in the output
    "SELECT t.id, m.platt['b'] AS b FROM t CROSS JOIN m ORDER BY t.id LIMIT 3",
];

/// Queries the rewrite leaves as joins or turns into an empty relation; the results must
/// still be DataFusion's.
const OTHERS: &[&str] = &[
    // two models: every row is paired with each (the join stays)
    // a model's name and field in the groups and the order, and a CASE on the name
    "SELECT mm.name, mm.model['method'] AS method,
            avg(calibrate(t.p, mm.model, t.site)) AS a,
            CASE WHEN mm.name = 'cc' THEN sum(t.y - calibrate(t.p, mm.model, t.site)) END AS d
     FROM t CROSS JOIN models mm GROUP BY mm.name, mm.model['method'] ORDER BY mm.name",
    // the same models applied in a projection
    "SELECT count(*) AS n, sum(q) AS s FROM (
       SELECT calibrate(t.p, mm.model, t.site) AS q FROM t CROSS JOIN models mm)",
    // no model: no row, or NULLs for an outer join
    "SELECT count(*) AS n FROM t CROSS JOIN no_model",
    "SELECT count(*) AS n, count(calibrate(t.p, nm.cc, t.site)) AS calibrated
     FROM t LEFT JOIN no_model nm ON true",
    // a scalar subquery (DataFusion evaluates it once itself)
    "SELECT avg(calibrate(t.p, (SELECT cc FROM m), t.site)) AS a FROM t",
    // EXPLAIN plans without running anything
    "EXPLAIN SELECT avg(calibrate(t.p, m.cc, t.site)) FROM t CROSS JOIN m",
];

async fn context(rewrite: bool) -> SessionContext {
    let ctx = if rewrite {
        calibsql::new_context()
    } else {
        // DataFusion's own planner with calibsql's functions.
        let ctx = SessionContext::new_with_config(calibsql::default_config());
        calibsql::register_all(&ctx);
        ctx
    };
    for sql in SETUP {
        ctx.sql(sql).await.unwrap().collect().await.unwrap();
    }
    ctx
}

/// The query's physical plan as text and its result as a table.
async fn run(ctx: &SessionContext, sql: &str) -> (String, String) {
    let df = ctx.sql(sql).await.unwrap();
    let plan = df.clone().create_physical_plan().await.unwrap();
    let plan = displayable(plan.as_ref()).indent(true).to_string();
    let batches = df.collect().await.unwrap();
    (plan, pretty_format_batches(&batches).unwrap().to_string())
}

fn has_join(plan: &str) -> bool {
    plan.contains("CrossJoinExec") || plan.contains("NestedLoopJoinExec")
}

#[tokio::test]
async fn one_row_sides_become_constants_with_the_same_results() {
    let (ours, theirs) = (context(true).await, context(false).await);
    for sql in ONE_ROW {
        let (plan, got) = run(&ours, sql).await;
        let (their_plan, want) = run(&theirs, sql).await;
        assert!(
            has_join(&their_plan),
            "{sql}: the reference has no join:\n{their_plan}"
        );
        assert!(!has_join(&plan), "{sql}: a join is left:\n{plan}");
        assert_eq!(got, want, "{sql}");
        assert!(got.lines().count() > 4, "{sql}: no rows:\n{got}");
    }
}

#[tokio::test]
async fn other_joins_keep_their_results() {
    let (ours, theirs) = (context(true).await, context(false).await);
    for sql in OTHERS {
        let (_, got) = run(&ours, sql).await;
        let (_, want) = run(&theirs, sql).await;
        if sql.starts_with("EXPLAIN") {
            // The logical plan still shows the join: EXPLAIN does not evaluate the model.
            assert!(got.contains("Cross Join") || got.contains("Join"), "{got}");
        } else {
            assert_eq!(got, want, "{sql}");
        }
    }
    // Two models over a table: the aggregate grouped by the model's name and the
    // projection run once per model, without a join.
    for sql in &OTHERS[..2] {
        let (plan, _) = run(&ours, sql).await;
        assert!(
            !has_join(&plan) && plan.contains("UnionExec"),
            "{sql}:\n{plan}"
        );
    }
    // The empty side gives no row, without a join.
    let (plan, got) = run(&ours, OTHERS[2]).await;
    assert!(!has_join(&plan), "{plan}");
    assert!(got.contains("| 0 |"), "{got}");
}

/// A model with thousands of field keys applied to every row becomes one literal: the plan
/// has no join, so no batch carries the model once per row (8,192 rows × 3,000 keys would be
/// about 200 MB a batch). The bench measures the time and memory of the 5,000-key case.
#[tokio::test]
async fn a_large_model_is_not_copied_into_every_row() {
    let ctx = calibsql::new_context();
    for sql in [
        "CREATE TABLE big AS SELECT ((value * 37) % 1009) / 1009.0 + 0.0001 AS p,
                CASE WHEN (value * 11) % 7 < 2 THEN 1 ELSE 0 END AS y,
                'k' || CAST(value % 3000 AS VARCHAR) AS site
         FROM generate_series(1, 100000)",
        "CREATE TABLE big_model AS SELECT fit_confcalib(p, y, site) AS cc FROM big",
    ] {
        ctx.sql(sql).await.unwrap().collect().await.unwrap();
    }
    let keys = ctx
        .sql("SELECT array_length(cc['field_keys']) AS k FROM big_model")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert!(
        pretty_format_batches(&keys)
            .unwrap()
            .to_string()
            .contains("3000"),
        "the model has 3,000 keys"
    );
    let (plan, got) = run(
        &ctx,
        "SELECT count(calibrate(b.p, m.cc, b.site)) AS n FROM big b CROSS JOIN big_model m",
    )
    .await;
    assert!(!has_join(&plan), "{plan}");
    assert!(got.contains("100000"), "{got}");
}
