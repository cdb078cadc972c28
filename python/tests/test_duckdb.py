"""calibsql's DuckDB extension (duckdb/) loaded by DuckDB from PyPI: every function in DuckDB
gives what the calibsql binary gives on the same Parquet logs (1e-12 relative, counts exact),
grouped (1,000 groups) and not, with 1 and 4 DuckDB threads; models cross between the two
through Parquet; bad input is the same error; a footer for another C API is refused by DuckDB.

These are consistency tests: both sides run the same Rust functions, so they prove that
nothing is lost on the way through DuckDB (its vectors, casts, parallel combine, results), not
that the functions are right — the Rust suite checks those against numpy, scikit-learn and
scipy. The extension is $CALIBSQL_DUCKDB_EXTENSION (python/run-tests.sh builds it), else
`duckdb/build.sh --dev` builds it.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, assert_rows_equal, assert_values_equal

duckdb = pytest.importorskip("duckdb")

# One call of every function the extension registers (multi_field_rce, whose number of
# fields is not fixed, is not registered), over the `test` table of the `logs` fixture. A
# constant argument is given where the function has one, so constants are exercised too.
AGGREGATES = {
    "ece": "ece(p_model, click, 20, 'quantile', 1.0 + (row_id % 3))",
    "mce": "mce(p_model, click, 10)",
    "reliability": "reliability(p_model, click, 8)",
    "ace": "ace(p_model, click, 12)",
    "rmsce": "rmsce(p_model, click, 10, 'sklearn')",
    "logloss": "logloss(p_model, click, 1e-7)",
    "brier": "brier(p_model, click = 1)",
    "ips_logloss": "ips_logloss(p_model, click, exposure, 0.05)",
    "normalized_entropy": "normalized_entropy(p_model, click)",
    "auc": "auc(p_model, click)",
    "smooth_ece": "smooth_ece(p_model, click, 0.05)",
    "ece_debiased": "ece_debiased(p_model, click)",
    "field_ece": "field_ece(p_model, click, site_id)",
    "field_rce": "field_rce(p_model, click, ad_type, 0.05)",
    "mvce": "mvce(p_model, click, row_id, 15, 5)",
    "spiegelhalter": "spiegelhalter(p_model, click)",
    "calibration_slope": "calibration_slope(p_model, click)",
    "hosmer_lemeshow": "hosmer_lemeshow(p_model, click, 8)",
    "calibration_decomposition": "calibration_decomposition(p_model, click)",
    "field_bias": "field_bias(p_model, click, ad_type)",
    "ece_interval": "ece_interval(p_model, click, user_id, 10, 'uniform', 0.9, 50)",
    "ece_diff_interval": "ece_diff_interval(p_model, sigmoid(score), click, user_id, 10, 'uniform', 0.9, 50)",
    "auc_interval": "auc_interval(p_model, click, 0.9)",
    "auc_test": "auc_test(p_model, sigmoid(score), click)",
    "fit_platt": "fit_platt(score, click)",
    "fit_temperature": "fit_temperature(score, click, exposure, 0.1)",
    "fit_beta_calib": "fit_beta_calib(p_model, click)",
    "fit_gaussian_calib": "fit_gaussian_calib(score, click)",
    "fit_gamma_calib": "fit_gamma_calib(score - 10, click)",
    "fit_isotonic": "fit_isotonic(score, click)",
    "fit_histogram": "fit_histogram(score, click, 12, 'quantile')",
    "fit_ilps": "fit_ilps(score, click, 20)",
    "fit_bbq": "fit_bbq(p_model, click)",
    "fit_field_calib": "fit_field_calib(score, click, ad_type, 10)",
    "fit_confcalib": "fit_confcalib(p_model, click, site_id, 5, 1.96)",
    "ece_top_label": "ece_top_label([p_model, 1 - p_model], 1 - click, 10)",
    "mce_top_label": "mce_top_label([p_model, 1 - p_model], 1 - click)",
    "reliability_top_label": "reliability_top_label([p_model, 1 - p_model], 1 - click, 5)",
    "ece_classwise": "ece_classwise([p_model, 1 - p_model], 1 - click, 10)",
    "cbpe": "cbpe(p_model, 0.3)",
    "fit_ovr": "fit_ovr([p_model, 1 - p_model], 1 - click, 'isotonic')",
}

# The multiclass forms of the functions that also take one number: a list of class
# probabilities or logits in place of p or the score (the same names, overloaded).
LIST_FORMS = {
    "auc_ovr": "auc([p_model, 1 - p_model], 1 - click)",
    "logloss_list": "logloss([0.8 * p_model, 0.2 * p_model, 1 - p_model], 2 - 2 * click, 1e-7)",
    "brier_list": "brier([p_model, 1 - p_model], 1 - click, 1.0 + (row_id % 3))",
    "fit_temperature_list": "fit_temperature([score, -score, 0.5 * score], 1 - click)",
}

# Row by row, over every 97th row.
SCALARS = {
    "sigmoid": "sigmoid(score)",
    "logit": "logit(p_model)",
    "wilson_interval": "wilson_interval(p_model, 40.0 + row_id % 7, 1.96)",
    "wilson_z": "wilson_z(p_model, 0.05, 100.0)",
    "confcalib_multiplier": "confcalib_multiplier(p_model, 0.02, 150.0, 1.96)",
    "popularity_propensity": "popularity_propensity(item_count, max_count, 0.5, 0.1)",
    "downsample_correct": "downsample_correct(p_model, 0.25)",
    "calibrate": "calibrate(score, (SELECT fit_isotonic(score, click) FROM valid))",
}

# `calibrate`'s multiclass forms: a temperature fitted on lists of logits, and one-vs-rest.
SCALAR_LIST_FORMS = {
    "calibrate_list": "calibrate([score, -score, 0.5 * score], "
    "(SELECT fit_temperature([score, -score, 0.5 * score], 1 - click) FROM valid))",
    "calibrate_ovr": "calibrate([score, -score], (SELECT fit_ovr([score, -score], 1 - click) FROM valid))",
}

# The aggregates with `_state` / `_merge` twins: F_merge over the states of 7 groups.
TWINS = [
    name
    for name in AGGREGATES
    if name
    not in {"auc", "ece_debiased", "auc_interval", "auc_test"}
]


# A quantile binning keeps every row, so it has no stored state: the twins bin uniformly.
TWIN_ARGS = {
    "ece": "ece(p_model, click, 20, 'uniform', 1.0 + (row_id % 3))",
    "ace": "ace(p_model, click, 12, 'uniform')",
    "fit_histogram": "fit_histogram(score, click, 12, 'uniform')",
}


def twin_call(name: str) -> str:
    call = TWIN_ARGS.get(name, AGGREGATES[name]).replace(f"{name}(", f"{name}_state(", 1)
    return f"(SELECT {name}_merge(s) FROM (SELECT {call} AS s FROM test GROUP BY row_id % 7))"


@pytest.fixture(scope="session")
def extension() -> str:
    given = os.environ.get("CALIBSQL_DUCKDB_EXTENSION")
    if given:
        return given
    done = subprocess.run(
        ["bash", str(REPO / "duckdb" / "build.sh"), "--dev"],
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip().splitlines()[-1]


def connect(extension: str, logs: Path, threads: int = 1):
    con = duckdb.connect(config={"allow_unsigned_extensions": "true", "threads": threads})
    con.execute(f"LOAD '{extension}'")
    for t in ("valid", "test"):
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{logs / t}/*.parquet')")
    return con


def as_json(v):
    """A DuckDB value as the binary's ndjson shows it: JSON has no NaN or infinity, so they
    are null there."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: as_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [as_json(x) for x in v]
    return v


def rows(con, sql: str) -> list[dict]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, as_json(list(r)))) for r in cur.fetchall()]


@pytest.fixture(scope="session", params=[1, 4], ids=["threads=1", "threads=4"])
def duck(request, extension, logs):
    con = connect(extension, logs, request.param)
    yield con
    con.close()


def ungrouped_sql(calls: dict[str, str]) -> str:
    cols = ", ".join(f"{c} AS {n}" for n, c in calls.items())
    return f"SELECT {cols} FROM test"


def grouped_sql(calls: dict[str, str]) -> str:
    cols = ", ".join(f"{c} AS {n}" for n, c in calls.items())
    return f"SELECT row_id % 1000 AS g, {cols} FROM test GROUP BY g ORDER BY g"


def scalar_sql() -> str:
    cols = ", ".join(f"{c} AS {n}" for n, c in {**SCALARS, **SCALAR_LIST_FORMS}.items())
    return f"SELECT row_id, {cols} FROM test WHERE row_id % 97 = 0 ORDER BY row_id"


TWIN_CALLS = {f"{n}_merge": twin_call(n) for n in TWINS}
# The list forms' states (fit_temperature keeps the rows of a list form: no stored state).
for n in ("logloss", "brier"):
    call = LIST_FORMS[f"{n}_list"].replace(f"{n}(", f"{n}_state(", 1)
    TWIN_CALLS[f"{n}_list_merge"] = (
        f"(SELECT {n}_merge(s) FROM (SELECT {call} AS s FROM test GROUP BY row_id % 7))"
    )


@pytest.fixture(scope="session")
def expected(cli) -> dict[str, list[dict]]:
    """The calibsql binary's answers, one query each."""
    return {
        "ungrouped": cli(ungrouped_sql(AGGREGATES)),
        "grouped": cli(grouped_sql(AGGREGATES)),
        "lists": cli(ungrouped_sql(LIST_FORMS)),
        "lists_grouped": cli(grouped_sql(LIST_FORMS)),
        "scalars": cli(scalar_sql()),
        "twins": cli(f"SELECT {', '.join(f'{c} AS {n}' for n, c in TWIN_CALLS.items())}"),
    }


def column(table: list[dict], name: str, key: str | None = None) -> list[dict]:
    return [{key or name: r.get(name), "g": r.get("g"), "row_id": r.get("row_id")} for r in table]


@pytest.mark.parametrize("name", list(AGGREGATES))
def test_aggregate_ungrouped(duck, expected, name):
    got = rows(duck, ungrouped_sql({name: AGGREGATES[name]}))
    assert_rows_equal(column(got, name), column(expected["ungrouped"], name))


@pytest.mark.parametrize("name", list(AGGREGATES))
def test_aggregate_grouped(duck, expected, name):
    got = rows(duck, grouped_sql({name: AGGREGATES[name]}))
    assert len(got) == 1000
    assert_rows_equal(column(got, name), column(expected["grouped"], name))


@pytest.mark.parametrize("name", list(LIST_FORMS))
def test_list_forms(duck, expected, name):
    got = rows(duck, ungrouped_sql({name: LIST_FORMS[name]}))
    assert_rows_equal(column(got, name), column(expected["lists"], name))
    got = rows(duck, grouped_sql({name: LIST_FORMS[name]}))
    assert len(got) == 1000
    assert_rows_equal(column(got, name), column(expected["lists_grouped"], name))


def test_scalars(duck, expected):
    assert_rows_equal(rows(duck, scalar_sql()), expected["scalars"])


@pytest.mark.parametrize("name", list(TWIN_CALLS))
def test_merge_of_states(duck, expected, name):
    got = rows(duck, f"SELECT {TWIN_CALLS[name]} AS {name}")
    assert_rows_equal(got, [{name: expected["twins"][0].get(name)}])


def test_every_registered_function_is_called(duck, cli):
    documented = {
        r["routine_name"]
        for r in cli(
            "SELECT DISTINCT routine_name FROM information_schema.routines"
        )
    }
    in_duckdb = {
        r["function_name"]
        for r in rows(duck, "SELECT DISTINCT function_name FROM duckdb_functions()")
    }
    ours = (
        set(AGGREGATES)
        | set(SCALARS)
        | {n for n in TWIN_CALLS if not n.endswith("_list_merge")}
        | {f"{n}_state" for n in TWINS}
    )
    assert ours <= in_duckdb
    # Every calibsql function that DataFusion does not also have: the registry's.
    names = re.findall(r"^### `([a-z_]+)`", (REPO / "docs" / "functions.md").read_text(), re.M)
    missing = set(names) - ours - {"multi_field_rce"}
    assert not missing, f"no DuckDB test calls {sorted(missing)}"
    assert set(names) <= documented


def test_models_cross_through_parquet(extension, logs, binary, tmp_path):
    """A model fitted in DuckDB and applied by calibsql, and the reverse, give what the model
    fitted and applied in one engine gives."""

    def calibsql(sql: str, model: Path | None = None) -> list[dict]:
        tables = ["--table", f"valid={logs / 'valid'}", "--table", f"test={logs / 'test'}"]
        if model:
            tables += ["--table", f"model={model}"]
        done = subprocess.run([str(binary), *tables, "--format", "ndjson", "-c", sql],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

    con = connect(extension, logs)
    fits = {
        "fit_platt(score, click)": "score",
        "fit_isotonic(score, click)": "score",
        "fit_bbq(p_model, click)": "p_model",
        "fit_field_calib(score, click, ad_type, 10)": "score, m, ad_type",
    }
    for i, (fit, args) in enumerate(fits.items()):
        args = args if "m" in args.split(", ") else f"{args}, m"
        apply = (f"SELECT row_id, calibrate({args}) AS q FROM test, MODEL "
                 "WHERE row_id % 89 = 0 ORDER BY row_id")
        in_duck = tmp_path / f"duck{i}.parquet"
        con.execute(f"COPY (SELECT {fit} AS m FROM valid) TO '{in_duck}' (FORMAT parquet)")
        in_calibsql = tmp_path / f"calibsql{i}"
        calibsql(f"COPY (SELECT {fit} AS m FROM valid) TO '{in_calibsql}' STORED AS PARQUET")
        home = calibsql(apply.replace("MODEL", f"(SELECT {fit} AS m FROM valid) AS model"))
        assert len(home) > 100
        by_calibsql = calibsql(apply, model=in_duck)
        con.execute(f"CREATE OR REPLACE VIEW model AS SELECT * FROM '{in_calibsql}/*.parquet'")
        by_duckdb = rows(con, apply)
        assert_rows_equal(by_calibsql, home)
        assert_rows_equal(by_duckdb, home)
    con.close()


def bad(call: str) -> str:
    """`call` with a label of 2 where it has a label, else a probability of 1.5."""
    if "click" in call:
        return call.replace("click", "(click + 1)")
    return call.replace("p_model", "(p_model + 1.5)").replace("score", "(score / 0.0)")


# sigmoid takes any number (NaN gives NaN, in both).
BAD = {n: bad(c) for n, c in {**AGGREGATES, **SCALARS}.items() if n not in {"calibrate", "sigmoid"}}
BAD.update({
    "brier": "brier(p_model + 1.5, click)",
    "popularity_propensity": "popularity_propensity(item_count, 0 * max_count, 0.5, 0.1)",
    "calibrate": "calibrate(score, 1.5)",
    "ece_n_bins": "ece(p_model, click, 0)",
    "ece_strategy": "ece(p_model, click, 10, 'nonsense')",
    "ece_constant": "ece(p_model, click, 10 + row_id % 2)",
})
# A class index past the last class, in the list forms.
BAD.update({n: bad(c) for n, c in LIST_FORMS.items()})


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_is_the_same_error(extension, logs, binary, name):
    """Both refuse the call; DuckDB's message is calibsql's (without DataFusion's prefix)."""
    sql = f"SELECT {BAD[name]} AS v FROM test"
    con = connect(extension, logs)
    with pytest.raises(duckdb.Error) as raised:
        con.execute(sql).fetchall()
    con.close()
    message = str(raised.value)
    done = subprocess.run(
        [str(binary), "--table", f"test={logs / 'test'}", "--table", f"valid={logs / 'valid'}",
         "-c", sql],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if name == "ece_constant":
        # A column where a constant belongs: calibsql refuses it when planning.
        assert done.returncode != 0 and "constant" in done.stderr
        assert "n_bins must be a constant" in message, message
        return
    if name == "calibrate":
        assert done.returncode != 0 and "calibrate" in done.stderr
        assert "calibrate" in message, message
        return
    assert done.returncode != 0, done.stdout
    core = message.split("Error: ", 1)[-1].strip()
    assert core.split(":", 1)[0] in BAD[name], message
    # The value a message ends with is the first bad row's, which the engines may meet in
    # different orders.
    assert core.split(", got ")[0] in done.stderr, (core, done.stderr)


def test_a_panic_or_error_leaves_duckdb_usable(extension, logs):
    con = connect(extension, logs)
    with pytest.raises(duckdb.Error):
        con.execute("SELECT ece(p_model + 2, click) FROM test").fetchall()
    assert con.execute("SELECT count(*) FROM test").fetchone()[0] == 20000
    con.close()


@pytest.mark.parametrize(
    "field, value, says",
    [("--duckdb-version", "v9.0.0", "v9.0.0"), ("--platform", "windows_amd64", "windows_amd64")],
)
def test_duckdb_refuses_a_footer_for_another_duckdb(extension, tmp_path, field, value, says):
    lib = Path(extension).read_bytes()[:-534]
    plain = tmp_path / "lib.so"
    plain.write_bytes(lib)
    out = tmp_path / "calibsql.duckdb_extension"
    args = {"--platform": "linux_amd64", "--duckdb-version": "v1.2.0", field: value}
    subprocess.run(
        ["python3", str(REPO / "duckdb" / "append_metadata.py"), str(plain), str(out),
         *[x for kv in args.items() for x in kv]],
        check=True,
    )
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    with pytest.raises(duckdb.Error) as raised:
        con.execute(f"LOAD '{out}'")
    assert says in str(raised.value), str(raised.value)
    con.close()


def test_empty_input_and_nulls(duck):
    got = rows(duck, "SELECT ece(p_model, click) AS e, brier(p_model, click) AS b, auc(p_model, click) AS a FROM test WHERE false")
    assert got == [{"e": None, "b": None, "a": None}]
    got = rows(duck, "SELECT ece(CASE WHEN row_id % 2 = 0 THEN p_model END, click) AS e FROM test")
    want = rows(duck, "SELECT ece(p_model, click) AS e FROM test WHERE row_id % 2 = 0")
    assert_values_equal(got[0]["e"], want[0]["e"], 1e-12, "ece with NULLs")


@pytest.mark.parametrize("call, frame", [
    ("ece(p_model, click, 10)", "40 PRECEDING"),
    ("brier(p_model, click)", "40 PRECEDING"),
    ("spiegelhalter(p_model, click)", "40 PRECEDING"),
    # calibsql slides only the aggregates whose state can be subtracted; a growing frame
    # works for every one.
    ("auc(p_model, click)", "UNBOUNDED PRECEDING"),
    ("fit_platt(score, click)", "UNBOUNDED PRECEDING"),
])
def test_window_frames(duck, cli, call, frame):
    """Window frames: DuckDB combines the states of a segment tree, and reuses them."""
    inner = (f"SELECT row_id, {call} OVER (ORDER BY row_id ROWS BETWEEN {frame} AND "
             "CURRENT ROW) AS v FROM (SELECT * FROM test WHERE row_id % 7 = 0) t")
    sql = f"SELECT * FROM ({inner}) w WHERE row_id % 53 = 0 ORDER BY row_id"
    got = rows(duck, sql)
    assert len(got) > 20
    # A sliding frame in calibsql subtracts the rows that leave it; DuckDB adds up the tree's
    # nodes: a statistic near 0 (spiegelhalter's z) keeps ~1e-12 of cancellation.
    assert_rows_equal(got, cli(sql), rel=1e-12 if "UNBOUNDED" in frame else 1e-9)


def test_calls_that_share_an_overload_keep_their_own_groups(duck, cli):
    """A thread keeps one store of groups per overload, with a kernel per call in it: calls
    that differ only in a constant or in an ANY argument's type, and two GROUP BYs of the
    same call in one query, each keep their own groups."""
    sql = """SELECT g, e10, e20, f_text, f_int FROM (
                 SELECT row_id % 1000 AS g, ece(p_model, click, 10) AS e10,
                        ece(p_model, click, 20) AS e20,
                        field_ece(p_model, click, CAST(site_id AS VARCHAR)) AS f_text,
                        field_ece(p_model, click, CAST(site_id AS BIGINT) + 0) AS f_int
                 FROM test GROUP BY g) t ORDER BY g"""
    got = rows(duck, sql)
    assert len(got) == 1000
    assert_rows_equal(got, cli(sql))
    sql = """SELECT k, g, a FROM (
                 SELECT 'valid' AS k, row_id % 100 AS g, auc(p_model, click) AS a FROM valid GROUP BY g
                 UNION ALL
                 SELECT 'test' AS k, row_id % 100 AS g, auc(p_model, click) AS a FROM test GROUP BY g
             ) u ORDER BY k, g"""
    assert_rows_equal(rows(duck, sql), cli(sql))


def test_implicit_casts(duck, cli):
    """DECIMAL and FLOAT probabilities, FLOAT, INTEGER and BOOLEAN labels, an integer n_bins:
    DuckDB casts them to the declared types; calibsql's planner coerces the same columns."""
    sql = """SELECT ece(CAST(p_model AS DECIMAL(10, 4)), CAST(click AS FLOAT)) AS e_dec,
                    ece(CAST(p_model AS FLOAT), CAST(click AS INTEGER), CAST(10 AS INTEGER)) AS e_float,
                    brier(p_model, click = 1) AS b_bool,
                    field_ece(p_model, click, CAST(site_id AS BIGINT)) AS f_bigint
             FROM test"""
    assert_rows_equal(rows(duck, sql), cli(sql))
