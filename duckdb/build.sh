#!/usr/bin/env bash
# Build calibsql.duckdb_extension: the calibsql-duckdb library with the metadata footer DuckDB
# reads before it loads an extension (append_metadata.py). The last line printed is the path
# of the file written; everything else goes to stderr.
#
#   bash duckdb/build.sh          release (a first build compiles DataFusion in release)
#   bash duckdb/build.sh --dev    the dev profile and the feature set of the workspace's test
#                                 build (python/run-tests.sh, CI): DataFusion is already built
#
# CARGO_TARGET_DIR is honoured.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"

# Must equal MIN_C_API in src/lib.rs: the oldest C API the extension's function table needs.
c_api="v1.2.0"
version="v$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)"

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) platform=linux_amd64; lib=libcalibsql_duckdb.so ;;
  Linux-aarch64) platform=linux_arm64; lib=libcalibsql_duckdb.so ;;
  Darwin-arm64) platform=osx_arm64; lib=libcalibsql_duckdb.dylib ;;
  Darwin-x86_64) platform=osx_amd64; lib=libcalibsql_duckdb.dylib ;;
  *) echo "duckdb/build.sh: unsupported platform $(uname -s)-$(uname -m)" >&2; exit 1 ;;
esac

cd "$root"
if [ "${1:-}" = "--dev" ]; then
  profile=debug
  # The same packages and features as the test build, so that nothing is rebuilt.
  cargo build --workspace --lib --bins --tests --features "${CALIBSQL_FEATURES-calibsql/distributed}" >&2
else
  profile=release
  cargo build --release -p calibsql-duckdb >&2
fi

out="$target/$profile/calibsql.duckdb_extension"
python3 "$root/duckdb/append_metadata.py" "$target/$profile/$lib" "$out" \
  --platform "$platform" --duckdb-version "$c_api" \
  --extension-version "$version" --abi-type C_STRUCT
echo "$out"
