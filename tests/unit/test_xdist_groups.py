"""``--dist loadgroup`` keeps the tests of an ``xdist_group`` in one process (tests/conftest.py puts
the group after the node id where pytest 9 reads it): the chaos runs and the modules built on one
module-scoped cluster rely on it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

GROUPED = """
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("i", range(6))
def test_one_of_a_group(i: int) -> None:
    pass
"""


def test_a_groups_tests_run_in_one_process(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    # xdist and the plugin only: the suite's conftest and plugins import for seconds a process
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "xdist", "-n", "2", "--dist", "loadgroup",
         "-p", "tests.support.xdist_groups", "-c", str(tmp_path / "pytest.ini"), str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ran = re.findall(r"\[(gw\d+)\] .*PASSED .*test_one_of_a_group\[\d\]@together", out.stdout)
    assert len(ran) == 6 and len(set(ran)) == 1, out.stdout[-3000:]
