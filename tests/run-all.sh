#!/usr/bin/env bash
# Every test of the project, with its set-up, from a fresh clone on Debian (root or sudo):
#
#   bash tests/run-all.sh
#
# 1. installs the system packages the tests drive when one is missing (apt-get update first,
#    and only then): psql, openssl, a JDK and pgjdbc for `calibsql serve`'s tests
#    (tests/serve/), Chromium for the calibration report's (python/tests/test_report.py);
# 2. checks the expected values' generators against the files the tests read
#    (tests/gen/check.sh: Python and PyPI only, no cargo);
# 3. builds the workspace once, with one feature set, and runs the Rust tests;
# 4. runs the Python tests (python/run-tests.sh: the extension, a venv, pytest).
#
# Needs the Rust toolchain (rustup) and python3 (3.11). CARGO_TARGET_DIR is
# honoured (CI keeps it outside the clone). `.ci/run` runs the lints (fmt, clippy, doc) and
# then this script.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

if ! command -v cargo >/dev/null 2>&1; then
  echo "tests/run-all.sh: cargo is not installed; install the Rust toolchain (https://rustup.rs)" >&2
  exit 1
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "tests/run-all.sh: the tests need python3 (3.11; Debian: apt-get install python3)" >&2
  exit 1
fi

# What the `calibsql serve` tests drive (tests/serve/): psql, openssl (a test certificate),
# a JDK and pgjdbc (a Java client compiled by the test). psycopg goes into the Python tests'
# venv (python/run-tests.sh). Chromium opens the calibration report in
# python/tests/test_report.py (headless, over the DevTools protocol). Node.js and npm install
# Azurite, the Azure Blob emulator of the object-store tests (python/run-tests.sh). Installed
# only when missing, so a re-run is quick.
missing=()
# The linker rustc calls (rustup does not bring one), and Python's venv module (Debian ships
# it apart from python3).
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=("python3-venv")
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)
[ -f /usr/share/java/postgresql.jar ] || missing+=(libpostgresql-jdbc-java)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "== apt: ${missing[*]}"
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "tests/run-all.sh: not root and no sudo; install these packages first: ${missing[*]}" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The expected values' generators, each with --check against the files the tests read (about
# 9 minutes from an empty venv, 3.5 with it: tests/README.md). Before the build: it needs no
# cargo, and a stale expected value is found without waiting for DataFusion.
echo "== generators"
bash tests/gen/check.sh

# Everything is built and tested with the cluster feature on: it turns on DataFusion features
# the default build leaves off, so one feature set for the build, the Rust tests and the
# Python extension keeps DataFusion at one build.
features=calibsql/distributed
echo "== build"   # the extension module, the binary and the test binaries: one feature set
cargo build --workspace --lib --bins --tests --features "$features"
echo "== test"
cargo test --workspace --features "$features"
echo "== python"
CALIBSQL_FEATURES="$features" bash python/run-tests.sh
