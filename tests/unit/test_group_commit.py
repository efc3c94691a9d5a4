"""Group commit: many threads' writes in shared transactions; failures stay theirs."""

import concurrent.futures
import contextlib
import threading

import pytest
import sqlalchemy

from metalboot_framework.store.group_commit import Batched, GroupCommitter


@pytest.fixture
def engine(tmp_path):
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path}/gc.sqlite")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (n INTEGER PRIMARY KEY)")
    yield engine
    engine.dispose()


def rows(engine):
    with engine.connect() as conn:
        return sorted(n for (n,) in conn.exec_driver_sql("SELECT n FROM t"))


def insert(n):
    def work(conn):
        conn.exec_driver_sql(f"INSERT INTO t (n) VALUES ({n})")
        return n
    return work


def test_many_threads_few_transactions_and_a_failing_work_fails_alone(engine):
    transactions = []

    @contextlib.contextmanager
    def connect():
        with engine.begin() as conn:
            transactions.append(1)
            yield conn

    gate = threading.Event()
    group = GroupCommitter(connect)
    # hold the writer in a first batch so that the next 40 queue up together
    first = concurrent.futures.ThreadPoolExecutor(1).submit(
        group.run, lambda conn: gate.wait(10))
    with concurrent.futures.ThreadPoolExecutor(40) as pool:
        futures = [pool.submit(group.run, insert(n)) for n in range(1, 41)]
        futures.append(pool.submit(group.run, insert(5)))  # duplicate key: raises
        gate.set()
        assert first.result(10) is True
        results = [f.exception() or f.result() for f in futures]
    assert results[:40] == list(range(1, 41))
    assert isinstance(results[40], sqlalchemy.exc.IntegrityError)
    assert rows(engine) == list(range(1, 41))
    assert len(transactions) < 41


def test_a_database_failure_reaches_every_caller(engine):
    @contextlib.contextmanager
    def connect():
        raise sqlalchemy.exc.OperationalError("BEGIN", {}, Exception("database is down"))
        yield  # pragma: no cover

    group = GroupCommitter(connect)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(group.run, insert(n)) for n in range(8)]
        errors = [f.exception(10) for f in futures]
    assert all(isinstance(e, sqlalchemy.exc.OperationalError) for e in errors), errors


def test_a_write_inside_a_grouped_write_is_refused(engine):
    group = GroupCommitter(engine.begin)

    def nested(conn):
        return group.run(insert(1))

    with pytest.raises(RuntimeError, match="must not start another write"):
        group.run(nested)
    assert group.run(insert(2)) == 2  # the writer is still there
    assert rows(engine) == [2]


def test_batched_items_are_written_together_and_a_bad_one_fails_alone(engine):
    calls = []

    def insert_many(conn, ns):
        calls.append(list(ns))
        conn.exec_driver_sql("INSERT INTO t (n) VALUES " + ", ".join(f"({n})" for n in ns))
        return [n * 10 for n in ns]

    gate = threading.Event()
    group = GroupCommitter(engine.begin)
    first = concurrent.futures.ThreadPoolExecutor(1).submit(
        group.run, lambda conn: gate.wait(10))
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        futures = [pool.submit(group.run, Batched(insert_many, n)) for n in range(1, 21)]
        futures.append(pool.submit(group.run, Batched(insert_many, 7)))  # duplicate
        futures.append(pool.submit(group.run, insert(100)))  # plain work beside them
        gate.set()
        assert first.result(10) is True
        results = [f.exception() or f.result() for f in futures]
    assert results[:20] == [n * 10 for n in range(1, 21)]
    assert isinstance(results[20], sqlalchemy.exc.IntegrityError)
    assert results[21] == 100
    assert rows(engine) == list(range(1, 21)) + [100]
    # the first call had several items at once; after its failure each ran alone
    assert max(len(c) for c in calls) > 1
    assert [7] in calls


def test_submitted_work_gives_its_outcome_to_every_waiter_and_callback(engine):
    """submit() does not wait: the outcome is waited for by any number of
    threads, and a callback added before or after it is set is called once."""
    @contextlib.contextmanager
    def connect():
        with engine.begin() as conn:
            yield conn

    group = GroupCommitter(connect)
    gate = threading.Event()

    def slow(conn):
        gate.wait(10)
        return insert(1)(conn)

    outcome = group.submit(slow)
    failing = group.submit(insert(1))  # the same key after slow's: fails alone
    assert not outcome.done()
    heard = []
    outcome.add_done_callback(lambda o: heard.append(("before", o.result())))
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        waiters = [pool.submit(outcome.result) for _ in range(3)]
        gate.set()
        assert [w.result(10) for w in waiters] == [1, 1, 1]
    outcome.add_done_callback(lambda o: heard.append(("after", o.result())))
    assert heard == [("before", 1), ("after", 1)] and outcome.done()
    with pytest.raises(sqlalchemy.exc.IntegrityError):
        failing.result()
    assert rows(engine) == [1]
