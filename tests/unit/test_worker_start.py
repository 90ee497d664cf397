"""A worker process renders its scripts and builds the Functions library when it is made, before
its event loop holds runs: built on the loop, the first Scripts blocked it for about 150 ms (the
start of figure 4's loop-lag samples)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_the_worker_renders_its_scripts_before_its_loop_runs() -> None:
    code = textwrap.dedent(
        """
        from shared import scripts
        from shared.settings import Settings
        from worker.process.jobs import WorkerProcess
        assert scripts._rendered.cache_info().currsize == 0 and scripts.library.cache_info().currsize == 0
        WorkerProcess(Settings())
        print(scripts._rendered.cache_info().currsize, scripts.library.cache_info().currsize)
        """
    )  # a process of its own: the caches are per process, and other tests fill them
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["1", "1"], out.stderr
