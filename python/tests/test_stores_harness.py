"""The object-store servers of stores.py (issue 54) start, serve the fixture table through their
own clients, refuse what they must refuse, and stop. No calibsql here: these check the harness
that the store tests stand on."""

from __future__ import annotations

import io
import json
import os
import socket
import time
import urllib.parse
import urllib.request

import numpy as np
import pyarrow.parquet as pq
import pytest

from stores import (
    BUCKET,
    FIXTURE,
    AzuriteServer,
    FakeGcsServer,
    HttpServer,
    MotoServer,
    ece,
    fixture_keys,
)


def read_parts(blobs: list[bytes]):
    tables = [pq.read_table(io.BytesIO(b)) for b in blobs]
    score = np.concatenate([t.column("score").to_numpy() for t in tables])
    y = np.concatenate([t.column("y").to_numpy(zero_copy_only=False) for t in tables])
    return score, y


def check_parts(blobs: list[bytes]) -> None:
    assert blobs == list(FIXTURE.parts.values())
    score, y = read_parts(blobs)
    assert len(score) == FIXTURE.expected["count"]
    assert ece(score, y, 15) == FIXTURE.expected["ece"]


def test_fixture_table():
    e = FIXTURE.expected
    assert e["count"] == 5000
    assert ((FIXTURE.score > 0) & (FIXTURE.score < 1)).all()
    assert 0.02 < e["ece"] < 0.2 and 0.02 < e["ece_10"] < 0.2
    schema = pq.read_schema(io.BytesIO(FIXTURE.parts["part-0.parquet"]))
    assert [(f.name, str(f.type)) for f in schema] == [
        ("score", "double"),
        ("y", "bool"),
        ("field", "int64"),
    ]
    # calibsql's documented example (docs/functions.md#ece), n_bins = 15.
    assert ece(np.array([0.1, 0.2, 0.8, 0.9]), np.array([0, 0, 1, 0]), 15) == pytest.approx(0.35)
    # p = 1.0 goes to the last bin, a p on an edge goes up.
    assert ece(np.array([1.0, 0.95]), np.array([1, 1]), 10) == pytest.approx(0.025)
    assert ece(np.array([0.5, 0.45]), np.array([1, 0]), 2) == pytest.approx(0.475)


def test_moto(moto_server):
    s3 = moto_server.client("s3")
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="data/")["Contents"]
    assert [o["Key"] for o in listed] == fixture_keys()
    check_parts([s3.get_object(Bucket=BUCKET, Key=k)["Body"].read() for k in fixture_keys()])
    got = s3.get_object(Bucket=BUCKET, Key=fixture_keys()[0], Range="bytes=0-3")
    assert got["Body"].read() == b"PAR1"


def test_moto_checks_credentials(moto_server):
    from botocore.exceptions import ClientError

    key = fixture_keys()[0]
    wrong_secret = moto_server.client(
        "s3",
        aws_access_key_id=moto_server.access_key_id,
        aws_secret_access_key="not-the-secret",
    )
    unknown_key = moto_server.client(
        "s3", aws_access_key_id="AKIAUNKNOWN000000000", aws_secret_access_key="x"
    )
    for client, code in [(wrong_secret, "SignatureDoesNotMatch"), (unknown_key, "InvalidAccessKeyId")]:
        with pytest.raises(ClientError) as err:
            client.get_object(Bucket=BUCKET, Key=key)
        assert err.value.response["Error"]["Code"] == code
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_moto_assume_role(moto_server):
    creds = moto_server.assume_role()
    s3 = moto_server.client(
        "s3",
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
    )
    assert creds["AccessKeyId"].startswith("ASIA")
    assert s3.get_object(Bucket=BUCKET, Key=fixture_keys()[1])["Body"].read() == FIXTURE.parts[
        "part-1.parquet"
    ]


def test_moto_aws_files(moto_server, tmp_path, monkeypatch):
    import boto3
    from botocore.exceptions import ClientError

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    for name, value in moto_server.write_aws_files(tmp_path / "aws").items():
        monkeypatch.setenv(name, value)
    key, size = fixture_keys()[2], len(FIXTURE.parts["part-2.parquet"])
    # botocore reads the same files: each profile resolves (assumed: through moto's STS, at the
    # profile's endpoint_url), and the wrong one is refused.
    clients = {}
    for profile in ["default", "assumed", "process", "expiring", "wrong"]:
        s3 = clients[profile] = boto3.Session(profile_name=profile).client("s3")
        if profile == "wrong":
            with pytest.raises(ClientError, match="403"):  # HEAD: no body, no code
                s3.head_object(Bucket=BUCKET, Key=key)
        else:
            assert s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"] == size, profile
    calls = tmp_path / "aws/credential-process.calls"
    assert calls.read_text().splitlines().count("") == 1  # `process`: no expiry, run once
    # `expiring`: its credentials expire 2 s after each run, so a later request runs it again.
    before = calls.read_text().splitlines().count("--ttl 2")
    time.sleep(2.5)
    clients["expiring"].head_object(Bucket=BUCKET, Key=key)
    assert calls.read_text().splitlines().count("--ttl 2") > before


def test_azurite(azurite_server):
    with azurite_server.service() as service:
        container = service.get_container_client(BUCKET)
        assert [b.name for b in container.list_blobs(name_starts_with="data/")] == fixture_keys()
        check_parts([container.download_blob(k).readall() for k in fixture_keys()])
        ranged = container.download_blob(fixture_keys()[0], offset=0, length=4).readall()
    assert ranged == b"PAR1"


def test_azurite_sas(azurite_server):
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import ContainerClient

    url = f"{azurite_server.blob_url}/{BUCKET}"
    with ContainerClient.from_container_url(f"{url}?{azurite_server.sas('rl')}") as read_only:
        listed = [b.name for b in read_only.list_blobs(name_starts_with="data/")]
        assert listed == fixture_keys()
        with pytest.raises(HttpResponseError) as err:
            read_only.upload_blob("data/not-allowed", b"x")
        assert err.value.status_code == 403
    forged = azurite_server.sas("rl").replace("sig=", "sig=A")
    with ContainerClient.from_container_url(f"{url}?{forged}") as client:
        with pytest.raises(HttpResponseError) as err:
            list(client.list_blobs())
    assert err.value.status_code == 403


def test_gcs(gcs_server, tmp_path):
    assert [o["name"] for o in gcs_server.list("data/")] == fixture_keys()
    check_parts([gcs_server.download(k) for k in fixture_keys()])
    # object_store's read path: XML-API object URL, ranged.
    name = urllib.parse.quote(fixture_keys()[0], safe="")
    req = urllib.request.Request(f"{gcs_server.origin}/{BUCKET}/{name}", headers={"Range": "bytes=0-3"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 206 and resp.read() == b"PAR1"
    sa = json.loads(gcs_server.service_account_file(tmp_path).read_text())
    assert sa["gcs_base_url"] == gcs_server.origin and sa["disable_oauth"] is True


def test_http(http_server, plain_http_server):
    for server in [http_server, plain_http_server]:
        blobs = []
        for key in fixture_keys():
            with urllib.request.urlopen(server.url(key), timeout=30) as resp:
                blobs.append(resp.read())
        check_parts(blobs)
    ranged = urllib.request.Request(http_server.url(fixture_keys()[0]), headers={"Range": "bytes=0-3"})
    with urllib.request.urlopen(ranged, timeout=30) as resp:
        assert resp.status == 206 and resp.read() == b"PAR1"
    ignored = urllib.request.Request(
        plain_http_server.url(fixture_keys()[0]), headers={"Range": "bytes=0-3"}
    )
    with urllib.request.urlopen(ignored, timeout=30) as resp:
        assert resp.status == 200  # http.server ignores Range: what object_store refuses


@pytest.mark.parametrize("make", [HttpServer, AzuriteServer, FakeGcsServer, MotoServer])
def test_servers_stop(make, tmp_path):
    """A server stopped (leaving its `with`) has exited and no longer listens on its port."""
    with make(tmp_path) as server:
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
    assert server.proc.returncode is not None
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
