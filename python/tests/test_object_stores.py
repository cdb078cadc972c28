"""calibsql on every object store (issue 54), against real servers on loopback (stores.py):
moto (S3 + STS + IAM, signatures checked), Azurite (Azure Blob), fake-gcs-server (GCS) and
static HTTP servers. The binary runs with an environment holding only what each test gives it
(no AWS_*, AZURE_*, GOOGLE_* of the machine, an empty HOME), so each credential source is the
only one there is.

Expected values: the fixture's row count and 15-bin ECE, computed with numpy in stores.py from
the Parquet parts the servers hold (independently of calibsql).

Not tested here, and why: SSO (needs AWS's SSO portal; aws-config's own tests cover its cache
format), web identity against moto (moto 5.2.5 answers an unsigned AssumeRoleWithWebIdentity
with a 500 when it checks signatures), ECS and EC2 credentials (no such endpoint on loopback),
writes to GCS (fake-gcs-server refuses object_store's XML-API uploads: "invalid uploadType").
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import children
from stores import AZURITE_KEY, BUCKET, FIXTURE

#: Tolerance of the ECE: calibsql sums in another order than numpy.
TOL = 1e-12


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The process environment without any credential or store setting of the machine, with
    HOME at an empty directory (no ~/.aws, no gcloud ADC file), plus `extra`."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AWS_", "AZURE_", "AZURITE_", "GOOGLE_"))
    }
    home.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    # Whatever a dependency logs, no secret may show.
    env["RUST_LOG"] = "trace"
    env.update(extra)
    return env


def run(binary: Path, env: dict[str, str], *args: str, timeout: float = children.TIMEOUT):
    return children.run(
        [str(binary), "--format", "ndjson", *args], env=env, text=True, timeout=timeout
    )


def rows(done: subprocess.CompletedProcess) -> list[dict]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def one_error(done: subprocess.CompletedProcess, *needles: str, secrets=()) -> str:
    """The run failed with one `Error:` line holding every needle and no secret."""
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]}"
    for secret in secrets:
        assert secret not in done.stderr and secret not in done.stdout, "a secret was printed"
    return lines[0]


QUERY = "SELECT count(*) AS n, ece(score, y) AS ece FROM t"


def check_fixture(result: list[dict]) -> None:
    (row,) = result
    assert row["n"] == FIXTURE.expected["count"]
    diff = abs(row["ece"] - FIXTURE.expected["ece"])
    assert diff <= TOL, (row["ece"], FIXTURE.expected["ece"])


def read_model(blob: bytes) -> dict:
    table = pq.read_table(io.BytesIO(blob))
    assert table.column_names == ["model"], table.schema
    (model,) = table.column("model").to_pylist()
    return model


# ---------------------------------------------------------------------------------------------
# S3: the AWS credential chain against moto


@pytest.fixture(scope="module")
def aws_files(moto_server, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    directory = tmp_path_factory.mktemp("aws")
    return directory, moto_server.write_aws_files(directory)


def profile_env(tmp_path: Path, aws_files, profile: str | None = None) -> dict[str, str]:
    """Only the shared files (and the profile's name): no key, region or endpoint in the
    environment."""
    _, files = aws_files
    extra = dict(files)
    if profile:
        extra["AWS_PROFILE"] = profile
    return clean_env(tmp_path / "home", **extra)


def test_a_profile_in_the_shared_files_reads_a_prefix_and_a_glob(
    binary, moto_server, aws_files, tmp_path
):
    env = profile_env(tmp_path, aws_files)
    # The endpoint (moto's plain-HTTP one) and the region come from the profile; plain HTTP
    # is still refused unless allowed.
    for location in (f"s3://{BUCKET}/data/", f"s3://{BUCKET}/data/part-*.parquet"):
        check_fixture(rows(run(binary, env, "--s3-allow-http", "-t", f"t={location}", "-c", QUERY)))
    one_error(
        run(binary, env, "-t", f"t=s3://{BUCKET}/data/", "-c", QUERY),
        "plain HTTP",
        "--s3-allow-http",
    )


def test_an_assumed_role_and_a_credential_process(binary, moto_server, aws_files, tmp_path):
    directory, _ = aws_files
    calls = directory / "credential-process.calls"
    for profile in ("assumed", "process"):
        before = calls.read_text().count("\n") if calls.exists() else 0
        env = profile_env(tmp_path, aws_files, profile)
        check_fixture(
            rows(run(binary, env, "--s3-allow-http", "-t", f"t=s3://{BUCKET}/data/", "-c", QUERY))
        )
        after = calls.read_text().count("\n") if calls.exists() else 0
        # The process profile ran its credential_process (once: its keys do not expire); the
        # assumed role's source profile has static keys.
        assert after - before == (1 if profile == "process" else 0), (profile, before, after)


def test_expiring_credentials_are_fetched_again(moto_server, aws_files, tmp_path, monkeypatch):
    """The `expiring` profile's credential_process says its keys expire 2 s after it runs: a
    session that queries, waits past that, and queries again must run it again (moto accepts
    expired keys, so the runs are counted)."""
    import calibsql

    directory, files = aws_files
    calls = directory / "credential-process.calls"
    for name in list(os.environ):
        if name.startswith(("AWS_", "AZURE_", "GOOGLE_")):
            monkeypatch.delenv(name)
    for name, value in files.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_PROFILE", "expiring")
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.setenv("HOME", str(tmp_path))

    def runs() -> int:
        return calls.read_text().count("--ttl") if calls.exists() else 0

    start = runs()
    con = calibsql.connect()
    con.register("t", f"s3://{BUCKET}/data/")
    first = con.sql(QUERY).to_pylist()
    after_first = runs()
    assert after_first > start
    time.sleep(2.5)
    second = con.sql(QUERY).to_pylist()
    assert runs() > after_first, "the expired credentials were not fetched again"
    # Both right (not equal to the last bit: partial sums merge in the order threads finish).
    check_fixture(first)
    check_fixture(second)


def test_copy_writes_a_model_to_s3(binary, moto_server, aws_files, tmp_path):
    env = profile_env(tmp_path, aws_files)
    key = "models/platt.parquet"
    done = run(
        binary,
        env,
        "--s3-allow-http",
        "-t",
        f"t=s3://{BUCKET}/data/",
        "-c",
        f"COPY (SELECT fit_platt(score, y) AS model FROM t) TO 's3://{BUCKET}/{key}'",
        "-c",
        f"SELECT count(*) AS n FROM 's3://{BUCKET}/{key}'",
    )
    assert done.returncode == 0, done.stderr
    s3 = moto_server.client("s3")
    try:
        model = read_model(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    finally:
        s3.close()
    assert model["method"] == "platt" and math.isfinite(model["loss"])


def test_a_wrong_secret_names_the_profile_and_no_secret(binary, moto_server, aws_files, tmp_path):
    env = profile_env(tmp_path, aws_files, "wrong")
    one_error(
        run(binary, env, "--s3-allow-http", "-t", f"t=s3://{BUCKET}/data/", "-c", QUERY),
        "S3 rejected the credentials",
        "SignatureDoesNotMatch",
        "profile 'wrong'",
        secrets=["not-the-secret", moto_server.secret_access_key],
    )
    # A profile that does not exist, and a credential_process that fails, are named too.
    env = profile_env(tmp_path, aws_files, "nosuch")
    one_error(
        run(binary, env, "--s3-allow-http", "-t", f"t=s3://{BUCKET}/data/", "-c", QUERY),
        "nosuch",
    )


def test_no_credentials_at_all_fails_fast_and_says_what_was_tried(binary, tmp_path):
    env = clean_env(tmp_path / "home")
    started = time.monotonic()
    line = one_error(
        run(binary, env, "-t", "t=s3://some-bucket/data/", "-c", QUERY),
        "no AWS credentials for s3://some-bucket",
        "AWS_PROFILE",
        "profile 'default'",
        "EC2 instance metadata",
    )
    # The instance metadata is asked once with a 1 s timeout: no minute-long probe.
    assert time.monotonic() - started < 20, line


# ---------------------------------------------------------------------------------------------
# Azure: Azurite


def azure_env(tmp_path: Path, azurite_server, **extra: str) -> dict[str, str]:
    return clean_env(tmp_path / "home", **azurite_server.env(), **extra)


@pytest.mark.parametrize(
    "location",
    [
        f"az://{BUCKET}/data/",
        f"az://{BUCKET}/data/part-*.parquet",
        f"abfss://{BUCKET}@devstoreaccount1.dfs.core.windows.net/data/",
        f"https://devstoreaccount1.blob.core.windows.net/{BUCKET}/data/",
    ],
)
def test_azure_locations_read_like_local_files(binary, azurite_server, tmp_path, location):
    env = azure_env(tmp_path, azurite_server)
    check_fixture(rows(run(binary, env, "-t", f"t={location}", "-c", QUERY)))


def test_create_external_table_on_azure(binary, azurite_server, tmp_path):
    env = azure_env(tmp_path, azurite_server)
    done = run(
        binary,
        env,
        "-c",
        f"CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION "
        f"'https://devstoreaccount1.blob.core.windows.net/{BUCKET}/data/'",
        "-c",
        QUERY,
    )
    check_fixture(rows(done))


def test_azure_sas_token_reads_but_cannot_write(binary, azurite_server, tmp_path):
    sas = azurite_server.sas("rl")
    env = azure_env(tmp_path, azurite_server, AZURE_STORAGE_SAS_TOKEN=sas)
    check_fixture(rows(run(binary, env, "-t", f"t=az://{BUCKET}/data/", "-c", QUERY)))
    signature = re.search(r"sig=([^&]+)", sas).group(1)
    one_error(
        run(
            binary,
            env,
            "-t",
            f"t=az://{BUCKET}/data/",
            "-c",
            f"COPY (SELECT fit_platt(score, y) AS model FROM t) TO 'az://{BUCKET}/models/sas.parquet'",
        ),
        "Azure Blob Storage",
        "SAS token",
        secrets=[signature],
    )


def test_copy_writes_a_model_to_azure_and_a_delta_table_there(binary, azurite_server, tmp_path):
    env = azure_env(tmp_path, azurite_server)
    key = "models/platt.parquet"
    done = run(
        binary,
        env,
        "-t",
        f"t=az://{BUCKET}/data/",
        "-c",
        f"COPY (SELECT fit_platt(score, y) AS model FROM t) TO 'az://{BUCKET}/{key}'",
        "-c",
        f"COPY (SELECT field, count(*) AS n FROM t GROUP BY field) TO 'az://{BUCKET}/daily' "
        "STORED AS DELTA",
    )
    assert done.returncode == 0, done.stderr
    with azurite_server.service() as service:
        blob = service.get_blob_client(BUCKET, key).download_blob().readall()
        log = [
            b.name
            for b in service.get_container_client(BUCKET).list_blobs(name_starts_with="daily/_delta_log/")
        ]
    model = read_model(blob)
    assert model["method"] == "platt" and math.isfinite(model["loss"])
    assert "daily/_delta_log/00000000000000000000.json" in log, log
    (row,) = rows(run(binary, env, "-t", f"d=az://{BUCKET}/daily", "-c", "SELECT sum(n) AS n FROM d"))
    assert row["n"] == FIXTURE.expected["count"]


def test_a_wrong_azure_key_is_named(binary, azurite_server, tmp_path):
    wrong = "d3Jvbmcta2V5LW5vdC10aGUtYWNjb3VudHMtYnV0LWJhc2U2NC1hbnl3YXk="
    env = azure_env(tmp_path, azurite_server, AZURE_STORAGE_ACCOUNT_KEY=wrong)
    one_error(
        run(binary, env, "-t", f"t=az://{BUCKET}/data/", "-c", QUERY),
        "Azure Blob Storage",
        "credentials",
        secrets=[wrong, AZURITE_KEY],
    )


# ---------------------------------------------------------------------------------------------
# Google Cloud Storage: fake-gcs-server


def test_gcs_reads_a_prefix_and_a_glob(binary, gcs_server, tmp_path):
    account = gcs_server.service_account_file(tmp_path)
    env = clean_env(tmp_path / "home", GOOGLE_SERVICE_ACCOUNT_PATH=str(account))
    for location in (f"gs://{BUCKET}/data/", f"gs://{BUCKET}/data/part-*.parquet"):
        check_fixture(rows(run(binary, env, "-t", f"t={location}", "-c", QUERY)))


def test_the_report_reads_gcs(binary, gcs_server, tmp_path):
    account = gcs_server.service_account_file(tmp_path)
    env = clean_env(tmp_path / "home", GOOGLE_SERVICE_ACCOUNT_PATH=str(account))
    page, numbers = tmp_path / "report.html", tmp_path / "report.json"
    done = children.run(
        [
            str(binary), "report", "-q", "--table", f"t=gs://{BUCKET}/data/",
            "-c", "SELECT score AS p, y FROM t", "-o", str(page), "--json", str(numbers),
        ],
        env=env,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert page.stat().st_size > 0
    report = json.loads(numbers.read_text())
    assert report["rows"] == FIXTURE.expected["count"]
    (model,) = report["models"]
    assert abs(model["ece"] - FIXTURE.expected["ece"]) <= TOL


def test_a_missing_or_bad_gcs_credential_file_is_named(binary, gcs_server, tmp_path):
    missing = tmp_path / "no-such-account.json"
    env = clean_env(tmp_path / "home", GOOGLE_SERVICE_ACCOUNT_PATH=str(missing))
    one_error(
        run(binary, env, "-t", f"t=gs://{BUCKET}/data/", "-c", QUERY),
        "Google Cloud Storage",
        str(missing),
    )
    bad = tmp_path / "bad-account.json"
    bad.write_text(json.dumps({"type": "service_account", "private_key": "not a key"}))
    env = clean_env(tmp_path / "home", GOOGLE_APPLICATION_CREDENTIALS=str(bad))
    one_error(
        run(binary, env, "-t", f"t=gs://{BUCKET}/data/", "-c", QUERY),
        "Google Cloud Storage",
    )


# ---------------------------------------------------------------------------------------------
# HTTP: one file, read-only


def part_zero() -> tuple[int, float]:
    name = next(iter(FIXTURE.parts))
    table = pq.read_table(io.BytesIO(FIXTURE.parts[name]))
    return table.num_rows, float(np.sum(table.column("score").to_numpy()))


def test_an_http_file_is_a_table(binary, http_server, tmp_path):
    env = clean_env(tmp_path / "home")
    url = http_server.url("data/part-0.parquet")
    n, total = part_zero()
    (row,) = rows(run(binary, env, "-t", f"t={url}", "-c", "SELECT count(*) AS n, sum(score) AS s FROM t"))
    assert row["n"] == n and abs(row["s"] - total) <= 1e-9 * n
    (row,) = rows(run(binary, env, "-c", f"SELECT count(*) AS n FROM '{url}'"))
    assert row["n"] == n


def test_http_refusals_say_why(binary, http_server, plain_http_server, tmp_path):
    env = clean_env(tmp_path / "home")
    one_error(
        run(binary, env, "-t", f"t={plain_http_server.url('data/part-0.parquet')}", "-c", "SELECT 1"),
        "ranged requests",
    )
    one_error(
        run(binary, env, "-t", f"t={http_server.url('data/*.parquet')}", "-c", "SELECT 1"),
        "an HTTP location is one file",
    )
    one_error(
        run(binary, env, "-c", f"COPY (SELECT 1 AS a) TO '{http_server.url('data/new.parquet')}'"),
        "read-only",
    )


# ---------------------------------------------------------------------------------------------
# The server: object store tables and --allow-path prefixes of any scheme


def test_serve_reads_azure_under_its_allow_path_only(
    binary, logs, azurite_server, tmp_path, monkeypatch
):
    import psycopg

    from test_serve import connect, serving

    for name, value in azurite_server.env().items():
        monkeypatch.setenv(name, value)
    allowed = f"az://{BUCKET}/data/"
    with serving(
        binary, logs, tmp_path, "--table", f"a=az://{BUCKET}/data/", "--allow-path", allowed
    ) as port:
        with connect(port) as con:
            (n,) = con.execute("SELECT count(*) FROM a").fetchone()
            assert n == FIXTURE.expected["count"]
            (n,) = con.execute(f"SELECT count(*) FROM '{allowed}part-0.parquet'").fetchone()
            assert 0 < n < FIXTURE.expected["count"]
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="--allow-path"):
                con.execute(f"SELECT count(*) FROM 'az://{BUCKET}/models/platt.parquet'")
