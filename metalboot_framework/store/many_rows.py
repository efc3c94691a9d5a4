"""Statements over many rows named by id: in chunks, and which rows an UPDATE changed."""


def chunks(items, size=500):
    """``items`` in slices of at most ``size`` (an expanding IN of thousands of
    ids makes statements the drivers handle slowly)."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


def changed(conn, stmt, params, ids, read_back):
    """Run ``stmt`` (an UPDATE of the rows of ``ids``, bound as ``mids``, in
    chunks); the ids of the rows it changed, read by ``read_back`` only if not
    all of them were.

    Rows of a RETURNING are stepped one by one, and SQLite's driver goes away
    from the GIL and back for every step: the row count usually says all."""
    result = []
    for chunk in chunks(ids):
        chunk_params = dict(params, mids=chunk)
        if conn.execute(stmt, chunk_params).rowcount == len(chunk):
            result += chunk
        else:
            result += conn.execute(read_back, chunk_params).scalars()
    return result
