"""Whether the fuzzing tests (hypothesis, schemathesis) replay a fixed set of inputs: they do unless
asked to explore. A fixed set (hypothesis' ``derandomize``: a seed from the test's own code) means a
run finds what the last one found, and a test that asks to have reached an answer (an ``invalid_cursor``
400 among the generated audit queries) is not passed or failed by chance.

To explore new inputs: ``AGENTMILL_FUZZ_EXPLORE=1 bin/dev pytest tests/integration/test_fuzz_routes.py``
(a fresh seed each run; ``--hypothesis-seed=N`` replays seed N), with more examples from
``AGENTMILL_FUZZ_EXAMPLES``. A bug found that way gets a named test of its own, so the fixed set
need not find it again."""

from __future__ import annotations

import os

__all__ = ["DERANDOMIZE"]

DERANDOMIZE = os.environ.get("AGENTMILL_FUZZ_EXPLORE") != "1"
