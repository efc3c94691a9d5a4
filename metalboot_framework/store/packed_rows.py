"""Reads of many rows as one row on SQLite, for threads that share the GIL with hundreds.

SQLite's driver lets go of the GIL for every row it steps through and must
take it back before the next: in a conductor with hundreds of busy threads
that is a wait in the GIL's queue per row, so a read of a few hundred rows
waits behind them a few hundred times. The
conductor's hot reads therefore ask SQLite for their rows packed into one JSON
array (``json_group_array``: a single step) and unpack them here, each value
through its column's own result processor: the same values SQLAlchemy's
rows would hold. On other databases (PostgreSQL) a plain execute.

Rows come back in no particular order: callers that need one sort them.
"""

import collections
import json

from sqlalchemy import func, select

_PACKED = {}  # (statement, dialect class) -> (packed statement, row class, processors)


def all_rows(conn, stmt, params=None):
    """The rows of the SELECT ``stmt`` (attribute and index access, like
    SQLAlchemy's rows), in one step on SQLite. ``conn``: a connection or session."""
    dialect = conn.dialect if hasattr(conn, "dialect") else conn.get_bind().dialect
    if dialect.name != "sqlite":
        return conn.execute(stmt, params or {}).all()
    key = (stmt, type(dialect))
    packed = _PACKED.get(key)
    if packed is None:
        columns = list(stmt.selected_columns)
        packed = _PACKED[key] = (
            select(func.json_group_array(func.json_array(*stmt.subquery().c))),
            collections.namedtuple("PackedRow", [c.key for c in columns]),
            [c.type.dialect_impl(dialect).result_processor(dialect, None)
             for c in columns])
    agg, row_class, processors = packed
    return [row_class._make([v if p is None or v is None else p(v)
                             for p, v in zip(processors, values, strict=True)])
            for values in json.loads(conn.execute(agg, params or {}).scalar() or "[]")]
