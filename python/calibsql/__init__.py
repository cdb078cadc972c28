"""calibsql: calibrate, debias and evaluate model probabilities with SQL.

The engine of the ``calibsql`` command line, bundled: every calibsql function (``ece``,
``field_rce``, ``reliability``, ``fit_platt``, ``calibrate``, ...), tables from Parquet, CSV
and NDJSON files, directories, globs and ``s3://`` URLs (credentials from the AWS
environment), and data frames (pandas, polars, pyarrow).

Quick start::

    import calibsql
    con = calibsql.connect()
    con.register("clicks", "logs/2026-11-*/*.parquet")
    r = con.sql("SELECT site, ece(p, y) AS ece FROM clicks GROUP BY site ORDER BY site")
    r.to_pandas()

``calibsql.sql(...)`` and ``calibsql.register(...)`` use a default connection.

To use the functions in your own ``datafusion.SessionContext`` (datafusion-python 55.x)::

    import calibsql.datafusion
    calibsql.datafusion.register_all(ctx)

Errors are :class:`calibsql.Error` (a ``ValueError``) with the one-line message the CLI
prints after ``Error:``. The function reference is docs/functions.md of the repository, or
``SHOW FUNCTIONS`` / ``SELECT * FROM information_schema.routines`` in a connection.
"""

from __future__ import annotations

import html as _html
import json as _json
import os
from typing import Any, Optional, Union

from . import _calibsql
from ._calibsql import Error

__all__ = [
    "Error",
    "Connection",
    "Result",
    "Svg",
    "Report",
    "connect",
    "sql",
    "register",
    "plot_reliability",
    "report",
    "__version__",
]

__version__: str = _calibsql.__version__

#: The DataFusion release the engine is built on.
DATAFUSION_VERSION: str = _calibsql.DATAFUSION_VERSION


def _parse_size(value: Union[int, str, None]) -> Optional[int]:
    """``'2G'``, ``'512M'``, ``'64K'`` or a number of bytes, as the CLI's ``--memory-limit``."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise Error(f"connect: memory_limit must be a size such as '2G', got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise Error(f"connect: memory_limit must be > 0, got {value}")
        return value
    text = str(value).strip().upper().removesuffix("B").removesuffix("I")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    scale = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    try:
        size = float(number) * scale
    except ValueError:
        raise Error(f"connect: memory_limit must be a size such as '2G', got {value!r}") from None
    if not size > 0 or size != size or size == float("inf"):
        raise Error(f"connect: memory_limit must be > 0, got {value!r}")
    return int(size)


class Svg:
    """An SVG picture: shown inline by Jupyter (``_repr_svg_``); ``str(svg)`` is the text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_svg_(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"<calibsql.Svg, {len(self.text)} characters>"

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Writes the SVG to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.text)


class Report:
    """A calibration report (:meth:`Connection.report`, as ``calibsql report`` writes it).

    ``report.data`` holds every number as a dict (the JSON schema of docs/report.md);
    ``report.html`` is the self-contained page; ``report.save(path)`` writes it; Jupyter shows
    it inline, in a sandboxed frame so its style stays apart from the notebook's.
    """

    def __init__(self, native: Any) -> None:
        self._native = native
        self._data: Optional[dict] = None

    @property
    def html(self) -> str:
        """The page as HTML text."""
        return self._native.html()

    @property
    def data(self) -> dict:
        """The numbers (the page's embedded JSON) as a dict."""
        if self._data is None:
            self._data = _json.loads(self._native.json())
        return self._data

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Writes the page to ``path``; the file appears only once it is whole."""
        self._native.save(os.fspath(path))

    def _repr_html_(self) -> str:
        return (
            '<iframe sandbox="allow-scripts" style="width: 100%; height: 900px; border: 0" '
            f'srcdoc="{_html.escape(self.html, quote=True)}"></iframe>'
        )

    def __repr__(self) -> str:
        models = ", ".join(
            f"{m['model'] or 'all rows'} {m['status']['level'].upper()}" for m in self.data["models"]
        )
        return f"<calibsql.Report, {self.data['rows']} rows: {models or 'no model'}>"


class Result:
    """The result of :meth:`Connection.sql`: the rows, held in Arrow memory.

    It implements the Arrow PyCapsule stream interface (``__arrow_c_stream__``), so
    ``pyarrow.table(r)``, ``polars.DataFrame(r)`` and other Arrow consumers read it without
    copying through Python objects.
    """

    def __init__(self, native: "_calibsql.Result") -> None:
        self._native = native

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self._native.__arrow_c_stream__(requested_schema)

    @property
    def schema(self) -> "Any":
        """The columns and their types, as a ``pyarrow.Schema``."""
        return self.to_arrow().schema

    @property
    def columns(self) -> list[str]:
        """The column names."""
        return self._native.column_names

    @property
    def num_rows(self) -> int:
        return self._native.num_rows

    def __len__(self) -> int:
        return self._native.num_rows

    def to_arrow(self) -> "Any":
        """The rows as a ``pyarrow.Table``."""
        import pyarrow as pa

        return pa.table(self._native)

    def to_pandas(self) -> "Any":
        """The rows as a ``pandas.DataFrame`` (through pyarrow)."""
        return self.to_arrow().to_pandas()

    def to_polars(self) -> "Any":
        """The rows as a ``polars.DataFrame``."""
        import polars as pl

        return pl.DataFrame(self._native)

    def to_pylist(self) -> list[dict[str, Any]]:
        """The rows as a list of dicts (for small results)."""
        return self.to_arrow().to_pylist()

    def show(self, max_rows: int = 20) -> None:
        """Prints the first ``max_rows`` rows as a text table."""
        print(self._native.format(max_rows))

    def __repr__(self) -> str:
        return self._native.format(20)


class Connection:
    """A calibsql session: its tables, settings and every calibsql function.

    ``memory_limit`` (bytes, or ``'2G'``-style text) caps the memory one query may use:
    sorts spill to disk, and so do the rows (and weights) that ``auc``, ``'quantile'`` bins,
    ``ece_debiased`` and ``auc_test`` keep (docs/SEMANTICS.md, "Metrics that keep rows");
    ``target_partitions`` (default: the number of cores) and ``batch_size`` (default 8192)
    are DataFusion's settings. ``SET datafusion.…`` statements work too.
    """

    def __init__(
        self,
        *,
        memory_limit: Union[int, str, None] = None,
        target_partitions: Optional[int] = None,
        batch_size: Optional[int] = None,
    ) -> None:
        self._native = _calibsql.Connection(
            memory_limit=_parse_size(memory_limit),
            target_partitions=target_partitions,
            batch_size=batch_size,
        )

    def register(self, name: str, data: Any, *, format: Optional[str] = None) -> "Connection":
        """Makes ``data`` queryable as table ``name``.

        ``data`` is a location — a file, a directory (``key=value`` sub-directories become
        partition columns), a Delta Lake table (a directory or ``s3://`` prefix holding
        ``_delta_log/``, read through its log), a glob (``logs/2026-11-*/*.parquet``) or an
        ``s3://`` URL —
        or a data frame: pandas, polars, a pyarrow Table or RecordBatchReader, or anything
        with ``__arrow_c_stream__``. A data frame is copied into the connection in Arrow
        form once (no Python rows are made); a location is read when queried.

        ``format`` (``'parquet'``, ``'csv'``, ``'ndjson'``) overrides what the file
        extensions say. Returns the connection, so calls can be chained.
        """
        if isinstance(data, (str, os.PathLike)):
            self._native.register_location(name, os.fspath(data), format)
            return self
        if format is not None:
            raise Error(f"register {name}: format applies to locations, not to data frames")
        if not hasattr(data, "__arrow_c_stream__"):
            try:
                import pyarrow as pa

                data = pa.table(data)
            except Exception as e:  # noqa: BLE001 - any failure means "not tabular data"
                raise Error(
                    f"register {name}: expected a path, URL or data frame "
                    f"(pandas, polars, pyarrow), got {type(data).__name__}: {e}"
                ) from None
        self._native.register_arrow(name, data)
        return self

    def deregister(self, name: str) -> None:
        """Drops table ``name`` (nothing happens if there is none)."""
        self._native.deregister(name)

    def tables(self) -> list[str]:
        """The names of the registered tables."""
        return self._native.tables()

    def sql(self, query: str) -> Result:
        """Runs the statements of ``query`` in order and returns the last one's rows.

        The query runs now, on all cores, with the GIL released; Ctrl-C cancels it
        (``KeyboardInterrupt``). DDL (``CREATE VIEW``, ``CREATE EXTERNAL TABLE``), ``SET``
        and ``COPY ... TO`` work as in the CLI. Named arguments may skip optional ones
        (``ece(p, y, w => weight)``).
        """
        return Result(self._native.sql(query))

    def plot_reliability(
        self,
        query: str,
        *,
        bins: int = 15,
        strategy: str = "uniform",
        title: Optional[str] = None,
        intervals: bool = True,
    ) -> Svg:
        """The reliability diagram of a query returning ``p``, ``y`` and optionally ``series``
        (one panel per series), as in ``calibsql plot reliability``: with ``intervals``, each
        bin's 95% Wilson interval of the fraction of positives as an error bar. Jupyter shows
        it inline.
        """
        return Svg(self._native.reliability_svg(query, bins, strategy, title, intervals))

    def report(
        self,
        query: str,
        *,
        fields: Optional[list] = None,
        bins: int = 15,
        strategy: str = "uniform",
        title: Optional[str] = None,
        reference_days: int = 7,
        axis: str = "auto",
    ) -> Report:
        """The calibration report of a query returning ``p``, ``y`` and optionally ``model``,
        ``w``, ``day`` and the ``fields`` columns, as ``calibsql report`` computes it: the
        headline numbers, reliability diagrams, the per-bin table, values over time with the
        drift rule and the segments of each field. ``axis`` is ``"auto"``, ``"linear"`` or
        ``"log-odds"``.
        """
        return Report(
            self._native.report(
                query, list(fields or []), bins, strategy, title, reference_days, axis
            )
        )

    def __repr__(self) -> str:
        return f"<calibsql.Connection, tables: {', '.join(self.tables()) or 'none'}>"


def connect(
    *,
    memory_limit: Union[int, str, None] = None,
    target_partitions: Optional[int] = None,
    batch_size: Optional[int] = None,
) -> Connection:
    """A new :class:`Connection` (see there for the arguments)."""
    return Connection(
        memory_limit=memory_limit, target_partitions=target_partitions, batch_size=batch_size
    )


_default: Optional[Connection] = None


def _default_connection() -> Connection:
    global _default
    if _default is None:
        _default = Connection()
    return _default


def sql(query: str) -> Result:
    """:meth:`Connection.sql` on the default connection."""
    return _default_connection().sql(query)


def register(name: str, data: Any, *, format: Optional[str] = None) -> Connection:
    """:meth:`Connection.register` on the default connection."""
    return _default_connection().register(name, data, format=format)


def plot_reliability(
    query: str,
    *,
    bins: int = 15,
    strategy: str = "uniform",
    title: Optional[str] = None,
    intervals: bool = True,
) -> Svg:
    """:meth:`Connection.plot_reliability` on the default connection."""
    return _default_connection().plot_reliability(
        query, bins=bins, strategy=strategy, title=title, intervals=intervals
    )


def report(query: str, **kwargs: Any) -> Report:
    """:meth:`Connection.report` on the default connection."""
    return _default_connection().report(query, **kwargs)
