"""The boot agent's evidence journal: sequence numbers, what survives a crash
(a record whose write was cut off never counted), the delivered mark and the
journal emptied once everything in it is delivered."""

import asyncio
import json
import os

from metalboot_framework import artifacts
from metalboot_framework.agent.journal import Journal


def _row(machine_id, kind="fetch"):
    return artifacts.evidence_row(machine_id, "fake", kind, "boot.ipxe", "10.0.0.1",
                                  timed=False)


def _journal(tmp_path):
    return Journal(str(tmp_path / "journal"), lambda machine_id: "p1", batch_size=4)


def _fill(journal, fetches, reports):
    async def scenario():
        journal.start()
        done = await asyncio.gather(*(journal.add(_row(f"m{i}")) for i in range(fetches)),
                                    *(journal.add(_row(f"r{i}", "report"), with_id=True)
                                      for i in range(reports)))
        await journal.close()
        return done
    return asyncio.run(scenario())


def test_records_numbered_written_and_pending(tmp_path):
    journal = _journal(tmp_path)
    done = _fill(journal, 6, 2)
    assert done[:6] == [None] * 6
    assert sorted(done[6:]) == done[6:] and all(isinstance(s, int) for s in done[6:])
    lines = [json.loads(line) for line in open(journal.path)]
    assert [r["seq"] for r in lines] == list(range(1, 9))
    assert {r["partition"] for r in lines} == {"p1"}
    assert {r["seq"] for r in lines if r["kind"] == "report"} == set(done[6:])
    assert all(r["created_at"].endswith("Z") for r in lines)
    assert journal.batches >= 2  # at most 4 rows a write
    again = _journal(tmp_path)
    assert [r["seq"] for r in again.pending] == list(range(1, 9))
    assert again.written == 8


def test_a_record_cut_off_by_a_crash_is_dropped(tmp_path):
    journal = _journal(tmp_path)
    _fill(journal, 3, 0)
    with open(journal.path, "ab") as f:
        f.write(b'{"seq":4,"machine_id":"m9"')  # no newline: its fsync never returned
    again = _journal(tmp_path)
    assert [r["seq"] for r in again.pending] == [1, 2, 3]
    assert open(again.path, "rb").read().endswith(b"}\n")
    assert _fill(again, 0, 1) == [4]  # the next number is the dropped one's


def test_delivered_mark_and_compaction(tmp_path):
    journal = _journal(tmp_path)
    _fill(journal, 5, 0)
    again = _journal(tmp_path)
    again.mark_delivered(3)
    assert [r["seq"] for r in again.pending] == [4, 5]
    assert [r["seq"] for r in _journal(tmp_path).pending] == [4, 5]
    assert os.path.getsize(again.path) > 0
    again.mark_delivered(5)
    again._executor.shutdown(wait=True)  # the compaction ran
    assert os.path.getsize(again.path) == 0
    third = _journal(tmp_path)
    assert third.pending == [] and third.written == 5
    assert _fill(third, 0, 1) == [6]  # numbers go on after the compaction


def test_a_journal_begun_anew_has_an_id_of_its_own(tmp_path):
    """Its records number from 1 again: the journal id keeps their delivery keys
    apart from those of an earlier journal of the same agent id (a rebuilt
    host), which the API would otherwise take for duplicates and drop."""
    first = _journal(tmp_path)
    _fill(first, 2, 0)
    first.mark_delivered(2)
    assert _journal(tmp_path).id == first.id  # kept across restarts
    rebuilt = _journal(tmp_path / "rebuilt")
    assert rebuilt.id != first.id and rebuilt.written == 0
