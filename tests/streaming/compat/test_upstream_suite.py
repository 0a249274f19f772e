"""Issue 41: mosaicml-streaming v0.13.0's own test suite (its public-behaviour files) passes against ours.

The suite is fetched from PyPI at run time by ``scripts/upstream_streaming_suite.py`` (never copied here); the
test skips when it can be neither downloaded nor found in ``.cache/upstream-streaming``. Every failure must be
one of the documented deliberate differences (``DELIBERATE`` in the script, the table in
``docs/guides/from-mosaicml-streaming.md``).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "upstream_streaming_suite.py"


def _script_module():
    spec = importlib.util.spec_from_file_location("upstream_streaming_suite", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_upstream_suite_passes(tmp_path: Path) -> None:
    suite = _script_module()
    try:
        suite.fetch_sdist()
        suite.fetch_pytest()
    except (subprocess.CalledProcessError, OSError) as err:
        pytest.skip(
            f"mosaicml-streaming {suite.VERSION}'s sdist or pytest could not be fetched from PyPI: {err}"
        )
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--keep", str(tmp_path / "suite")],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["total"] >= 200, result
    unexpected = sorted(set(result["failures"]) - set(suite.DELIBERATE))
    assert not unexpected, f"failures that are not documented deliberate differences: {unexpected}"
    assert result["rate"] >= 0.97, result
