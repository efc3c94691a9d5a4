"""``unindexed(column)``: a column that SQLite's planner may not look up by index.

Without statistics (no ANALYZE) SQLite guesses how many rows an index
range holds, and for ``migration_id = ? AND machine_id IN (a, b, c) AND
state = ?`` it guesses that the (migration_id, state) index finds fewer rows
than three primary-key lookups: it then reads every machine of the migration in
that state (up to all of them) to change three. A condition
on ``unindexed(state)`` still filters the rows but cannot choose the index
(SQLite's unary ``+``, the documented way to disqualify a term); other
databases, which plan by statistics, get the plain column.
"""

from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement


class unindexed(FunctionElement):  # noqa: N801 -- reads as the SQL function it stands for
    inherit_cache = True

    def __init__(self, column):
        super().__init__(column)
        self.type = column.type


@compiles(unindexed)
def _plain(element, compiler, **kw):
    return compiler.process(element.clauses, **kw)


@compiles(unindexed, "sqlite")
def _sqlite(element, compiler, **kw):
    return "+" + compiler.process(element.clauses, **kw)
