"""A pytest plugin (tests/conftest.py loads it): ``--dist loadgroup`` with pytest 9.

A test marked ``xdist_group(name)`` gets ``@name`` after its node id, which is how xdist's
controller sends a group's tests to one process. pytest-xdist 3.8 appends it to ``item._nodeid``,
which pytest 9 no longer reads (a node's id is ``item._id``): every group was spread over the
processes (the chaos runs side by side, each process its own cluster of a module's). This puts
the same suffix where pytest 9 reads it, and does nothing where xdist's own already did.
"""

from __future__ import annotations

import pytest
from _pytest.nodeid import NodeId

__all__ = ["pytest_collection_modifyitems"]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each grouped test's node id ends in ``@group`` (sorted, joined by ``_``, as xdist names them)."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = {
            str(m.args[0] if m.args else m.kwargs.get("name", "default"))
            for m in item.iter_markers("xdist_group")
        }
        if names and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(sorted(names))}")
