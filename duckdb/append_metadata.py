#!/usr/bin/env python3
"""Turn a shared library into a DuckDB extension file by appending the
metadata footer DuckDB reads before it loads an extension.

The footer is 534 bytes:
  22 bytes  a WebAssembly custom-section header named "duckdb_signature"
            (keeps wasm builds valid; DuckDB skips it on native platforms)
  256 bytes eight 32-byte NUL-padded ASCII fields, stored last field first:
            [unused, unused, unused, abi_type, extension_version,
             duckdb_version, platform, magic "4"]
  256 bytes the signature, all zero for an unsigned extension
DuckDB reads the last 512 bytes (fields + signature). For ABI type C_STRUCT
the "duckdb_version" field holds the minimum C API version (e.g. v1.2.0) and
any DuckDB that serves that C API loads the file; for C_STRUCT_UNSTABLE and
CPP it must equal the loading DuckDB's own version.
"""

import argparse
import os
import sys

FIELD = 32


def field(text: str) -> bytes:
    raw = text.encode("ascii")
    if len(raw) > FIELD:
        sys.exit(f"metadata field longer than {FIELD} bytes: {text!r}")
    return raw.ljust(FIELD, b"\0")


def leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def footer(platform: str, duckdb_version: str, extension_version: str, abi_type: str) -> bytes:
    name = b"duckdb_signature"
    payload_len = 8 * FIELD + 256
    after_id = bytes([len(name)]) + name + leb128(payload_len)
    section = b"\0" + leb128(len(after_id) + payload_len) + after_id
    fields = [
        "4",
        platform,
        duckdb_version,
        extension_version,
        abi_type,
        "",
        "",
        "",
    ]
    body = b"".join(field(f) for f in reversed(fields))
    return section + body + b"\0" * 256


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library")
    ap.add_argument("output")
    ap.add_argument("--platform", default="linux_amd64")
    ap.add_argument("--duckdb-version", default="v1.2.0", help="C API version for C_STRUCT")
    ap.add_argument("--extension-version", default="v0.1.0")
    ap.add_argument("--abi-type", default="C_STRUCT", choices=["C_STRUCT", "C_STRUCT_UNSTABLE", "CPP"])
    args = ap.parse_args()

    tail = footer(args.platform, args.duckdb_version, args.extension_version, args.abi_type)
    assert len(tail) == 534, len(tail)
    tmp = args.output + ".tmp"
    with open(args.library, "rb") as src, open(tmp, "wb") as dst:
        dst.write(src.read())
        dst.write(tail)
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
