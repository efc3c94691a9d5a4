"""Every mechanism kept for speed can be taken out for a measurement.

``python -m benchmarks.ablation <mechanism>`` applies
``benchmarks/ablations/<mechanism>.diff`` to a copy of the checkout and runs a
benchmark with and without it; doc/architecture.rst says what each mechanism
buys. A diff that no longer applies (the code it touches moved) makes the
measurement impossible, so it fails here first.
"""

import pathlib
import re

import pytest

from benchmarks import ablation

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mechanism", ablation.mechanisms())
def test_ablation_applies_to_the_checkout(mechanism, tmp_path):
    diff = ablation.ABLATIONS / f"{mechanism}.diff"
    touched = re.findall(r"^\+\+\+ b/(\S+)", diff.read_text(), re.M)
    assert touched
    for name in touched:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    ablation.apply(diff, tmp_path)
    for name in touched:  # changed, and still Python
        text = (tmp_path / name).read_text()
        assert text != (ROOT / name).read_text(), f"{mechanism}.diff changed nothing"
        compile(text, name, "exec")


def test_every_mechanism_is_written_down_with_what_it_buys():
    """doc/architecture.rst has a paragraph per mechanism, headed by its name,
    and doc/benchmarks.rst a row of its measured gain."""
    architecture = (ROOT / "doc" / "architecture.rst").read_text()
    benchmarks = (ROOT / "doc" / "benchmarks.rst").read_text()
    for mechanism in ablation.mechanisms():
        assert re.search(rf"^\*\*{re.escape(mechanism)}\*\*", architecture, re.M), mechanism
        assert f"benchmarks.ablation {mechanism}" in benchmarks, mechanism


def test_a_diff_that_does_not_apply_is_refused_with_its_name(tmp_path):
    (tmp_path / "x.py").write_text("a = 1\n")
    diff = tmp_path / "broken.diff"
    diff.write_text("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 2\n+a = 3\n")
    with pytest.raises(SystemExit, match="broken.diff does not apply"):
        ablation.apply(diff, tmp_path)
    assert (tmp_path / "x.py").read_text() == "a = 1\n"


def test_the_benchmark_arguments_after_the_double_dash_reach_the_benchmark():
    args, bench = ablation.parse(["posix-write-lock", "--pairs", "1", "--",
                                  "--steps", "blocking", "--machines", "50000"])
    assert (args.mechanism, args.pairs, bench) == (
        "posix-write-lock", 1, ["--steps", "blocking", "--machines", "50000"])
    assert ablation.parse(["announcer"])[1] == ["--steps", "blocking"]
    assert ablation.parse(["announcer", "--benchmark", "bootstorm"])[1] == []
