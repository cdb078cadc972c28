"""calibsql's functions inside your own datafusion-python session.

::

    from datafusion import SessionContext
    import calibsql.datafusion

    ctx = SessionContext()
    calibsql.datafusion.register_all(ctx)
    ctx.sql("SELECT ece(p, y) FROM clicks").show()

Every calibsql scalar and aggregate is handed over as a datafusion-ffi capsule (one per
function). The FFI is only safe between equal DataFusion major versions, so
:func:`register_all` refuses any ``datafusion`` package whose major version is not the one
calibsql was built on (55): a mismatch would crash the interpreter, not raise.

What differs from the bundled engine (``calibsql.connect()``): named arguments that skip
optional ones (``ece(p, y, w => weight)``) are calibsql's own SQL extension and are not
available (pass arguments by position); ``SHOW FUNCTIONS`` does not show calibsql's
documentation; tables are registered with datafusion-python's own methods.
"""

from __future__ import annotations

from typing import Any

from . import _calibsql
from ._calibsql import Error

__all__ = ["register_all", "function_names", "check_datafusion_version"]

#: The DataFusion release calibsql is built on; datafusion-python 55.x is built on it too.
DATAFUSION_VERSION: str = _calibsql.DATAFUSION_VERSION


def _major(version: str) -> int | None:
    head = version.strip().split(".")[0]
    return int(head) if head.isdigit() else None


def check_datafusion_version(version: str) -> None:
    """Raises :class:`calibsql.Error` unless ``version`` (a ``datafusion`` package version)
    has the major version calibsql's FFI capsules are built for."""
    ours = _major(DATAFUSION_VERSION)
    theirs = _major(version)
    if theirs != ours:
        raise Error(
            f"calibsql.datafusion: the installed datafusion package is version {version}, but "
            f"calibsql's functions are built on DataFusion {DATAFUSION_VERSION} and can only be "
            f"registered in datafusion {ours}.x (the FFI between different major versions "
            f"crashes); install 'datafusion>={ours},<{ours + 1}' or use calibsql.connect()"
        )


def function_names() -> list[str]:
    """The names of the functions :func:`register_all` registers, sorted."""
    names = [n for n, _ in _calibsql.ffi_scalar_udfs()]
    names += [n for n, _ in _calibsql.ffi_aggregate_udfs()]
    return sorted(names)


def register_all(ctx: Any) -> None:
    """Registers every calibsql scalar and aggregate function on ``ctx``, a
    ``datafusion.SessionContext`` of datafusion-python 55.x.

    Raises :class:`calibsql.Error` for another ``datafusion`` major version or for an
    object that is not a ``SessionContext``.
    """
    try:
        import datafusion
    except ImportError:
        raise Error(
            "calibsql.datafusion.register_all: the datafusion package is not installed "
            "(pip install 'datafusion>=55,<56')"
        ) from None

    check_datafusion_version(getattr(datafusion, "__version__", "unknown"))
    if not isinstance(ctx, datafusion.SessionContext):
        raise Error(
            "calibsql.datafusion.register_all: expected a datafusion.SessionContext, got "
            f"{type(ctx).__name__}"
        )
    from datafusion.user_defined import AggregateUDF, ScalarUDF

    for _, capsule in _calibsql.ffi_scalar_udfs():
        ctx.register_udf(ScalarUDF.from_pycapsule(capsule))
    for _, capsule in _calibsql.ffi_aggregate_udfs():
        ctx.register_udaf(AggregateUDF.from_pycapsule(capsule))
