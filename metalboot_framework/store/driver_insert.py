"""INSERTs run through the DB-API driver with the values SQLAlchemy would bind.

For the hot paths where SQLAlchemy's own executemany costs more than the
writes (SQLite: it returns ids in order only one statement at a time, and
steps once per row). Each value goes through its column type's bind
processor, so the stored rows are those a plain ``table.insert()`` stores.

On SQLite, :func:`insert_rows` writes many rows with one statement per
:data:`ROWS_PER_STATEMENT`: the sqlite3 module lets go of the GIL for every
step of a statement, and an executemany steps once per row. In a process
whose other threads want the GIL (a conductor's workers, a boot server's
event loop) each step's way back to the GIL can take milliseconds.
"""

import functools


@functools.lru_cache(maxsize=16)
def statement(table, columns, dialect):
    """(INSERT for one row, ((column, bind processor or None), ...) in the
    order of its values) for ``columns`` of ``table`` on ``dialect``."""
    compiled = table.insert().compile(dialect=dialect, column_keys=columns)
    return str(compiled), tuple(
        (name, table.c[name].type.dialect_impl(dialect).bind_processor(dialect))
        for name in compiled.positiontup)


@functools.lru_cache(maxsize=256)
def multi_row(sql, count):
    """``sql`` (an INSERT of one row) as the INSERT of ``count`` rows."""
    head, _, one = sql.partition(" VALUES ")
    return f"{head} VALUES {', '.join([one] * count)}"


ROWS_PER_STATEMENT = 128
# Bound variables per statement: SQLite before 3.32 allows no more.
MAX_VARIABLES = 999


def insert_rows(conn, sql, rows):
    """``rows`` (sequences of values in the order of ``sql``'s, an INSERT of
    one row) as multi-row INSERTs of up to :data:`ROWS_PER_STATEMENT` rows
    and :data:`MAX_VARIABLES` values."""
    if not rows:
        return
    per = max(1, min(ROWS_PER_STATEMENT, MAX_VARIABLES // len(rows[0])))
    for start in range(0, len(rows), per):
        chunk = rows[start:start + per]
        conn.exec_driver_sql(multi_row(sql, len(chunk)),
                             tuple(value for row in chunk for value in row))
