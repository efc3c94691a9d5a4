"""The committed sample configuration is what oslo-config-generator writes now."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_sample_config_is_current(tmp_path):
    out = tmp_path / "metalboot.conf.sample"
    subprocess.run([sys.executable, "-m", "oslo_config.generator", "--config-file",
                    str(ROOT / "etc/metalboot/metalboot-config-generator.conf"),
                    "--output-file", str(out)], check=True, cwd=ROOT)
    committed = (ROOT / "etc/metalboot/metalboot.conf.sample").read_text()
    assert out.read_text() == committed, \
        "etc/metalboot/metalboot.conf.sample is stale: run tox -e genconfig"
