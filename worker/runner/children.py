"""The effect that creates a parent's child runs (sub-agents): one per sub-agent call the machine
started, on the child's own partition (shared/children.py through the run's store), reported back as
``ChildrenStarted``. Idempotent: a resumed parent asking again finds the same children."""

from __future__ import annotations

import orjson

from shared.children import ChildSpec
from worker.core.config import Lineage
from worker.machine import ChildrenStarted, RunState, StartChildren
from worker.machine.children import child_task
from worker.runner.effect import EffectContext

__all__ = ["start_children"]


def _stores_content(cx: EffectContext, agent: str) -> bool:
    """The child's profile's storeContent (its runs' default), as a submission resolves it."""
    try:
        return cx.host.profile(agent).store_content
    except LookupError:  # no such profile here: the child's run fails on its own worker, as before
        return True


async def start_children(cx: EffectContext, state: RunState, cmd: StartChildren) -> None:
    cfg = state.cfg
    cx.check_lease("create child runs")
    budget = cmd.budget.model_dump(mode="json", by_alias=True, exclude_none=True) if cmd.budget else None
    specs = [ChildSpec(c.id, cmd.child_ids[c.id], cfg.agent_tools[c.name], child_task(c), budget,
                       cfg.store_content and _stores_content(cx, cfg.agent_tools[c.name]))
             for c in cmd.calls]  # fmt: skip
    root = cfg.root or state.run_id  # a root run's children are its tree's first
    lineage = Lineage(agents=[*cfg.ancestors, cfg.agent], max_depth=cfg.max_depth, root=root)
    raw = orjson.dumps(lineage.model_dump(mode="json", by_alias=True))
    done = await cx.ports.store.start_children(specs, raw, root)
    created = sum(1 for d in done.values() if d.created)
    if created:
        cx.host.observer.children_started(created)
    cx.post(ChildrenStarted(cx.now_ms(), {i: d.stream_key for i, d in done.items() if not d.error},
                            {i: d.error for i, d in done.items() if d.error}))  # fmt: skip
