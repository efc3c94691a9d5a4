"""INSERTs run through the DB-API driver with the values SQLAlchemy would bind:
``conn.exec_driver_sql(sql, rows)``, rows given in the order of ``sql``'s values.

For the hot paths where SQLAlchemy's own executemany costs more than the
writes (SQLite: it returns ids in order only one statement at a time). Each
value goes through its column type's bind processor, so the stored rows are
those a plain ``table.insert()`` stores.
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
