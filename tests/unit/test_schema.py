"""The key schema is defined once (shared/keys.py): the Lua builds every key and job from the
partition's context, and what it builds equals what Python builds."""

from __future__ import annotations

import re

from shared import keys
from shared.calls import CALLS
from shared.scripts import LUA_DIR, SCRIPTS, source


def test_partition_tags_spread_over_equal_slot_ranges_and_ids_find_their_home() -> None:
    for count in (1, 3, 16, 64):
        layout = keys.Layout(count)
        for i, part in enumerate(layout.parts):
            assert i * keys.SLOTS // count <= part.slot < (i + 1) * keys.SLOTS // count
            assert keys.slot_of(part.run("x")) == keys.slot_of(part.queue) == part.slot
            assert layout.of_key(part.events("r")) is part
        homes = {layout.home(f"run_{n}").index for n in range(2000)}
        assert homes == set(range(count))  # every partition gets ids
        assert layout.home("run_7") is layout.home("run_7")


def test_job_ids_carry_their_partition_and_dispatch() -> None:
    layout = keys.Layout(16)
    part = layout.parts[5]
    for gen in (1, 2, 17):
        job = part.job_id("run-a.b:c", gen)
        assert layout.of_job(job) == (part, "run-a.b:c", gen)
        assert keys.slot_of(part.job_key(job)) == keys.slot_of(part.in_progress_key(job)) == part.slot


def test_no_script_spells_a_key_or_a_setting_of_its_own() -> None:
    for name in SCRIPTS:
        src = source(name)
        assert "am:" not in src and "arq:" not in src, name
        assert set(re.findall(r"__[A-Z_]+__", src)) <= {
            "__CONTEXT_FIELDS__",
            "__TERMINAL__",
            "__DEFAULT_PRIORITY__",
            "__NANO_USD__",  # a unit (shared.quotas.NANO_USD), not a setting
            "__SESSION_CALLS_KEPT__",  # a bound (agentmill_client.limits), not a setting
            "__SESSION_RUNS_SHOWN__",
            "__SESSION_LOOPS_KEPT__",
            "__INBOX_KEPT__",  # a bound of a worker's inbox (shared.keys), not a setting
            "__SCALE_ONE__",  # a budget hold's unit scale (shared.calls.budgets), not a setting
            "__CONTEXT_TOOLS__",  # tool names (shared.session_calls), not a setting
            "__WAKE_KEPT__",  # a bound of a wake list (shared.keys), not a setting
            "__LARGE_BYTES__",  # the size from which a payload is read apart (shared.off_loop), not a setting
            "__LISTING_FIELDS__",  # run hash fields (shared.listing_row), not a setting
            "__MIN_PRIORITY__",  # the priority range (agentmill_client.limits), not a setting
            "__MAX_PRIORITY__",
        }, name
    shared_code = {f for files in SCRIPTS.values() for f in files[:-1]}  # functions, not a script's body
    for path in LUA_DIR.glob("*.lua"):
        if path.stem in shared_code or path.stem == "submit":
            continue
        if path.stem in CALLS:  # declared (shared.calls): its header is generated from the declaration
            assert CALLS[path.stem].header() in source(path.stem), path.name
            continue
        assert re.search(r"^-- KEYS", path.read_text(), re.M), f"{path.name} documents no KEYS"


def test_every_key_of_a_partition_is_its_own_and_in_its_slot() -> None:
    """The keys are declared over several modules (keys.Partition and its bases): no two spell the
    same, every one carries the partition's tag but arq's own, and the context finds each prefix."""
    part = keys.Partition(3, 16)
    declared = {n: v for n, v in vars(part).items() if isinstance(v, str) and n not in ("tag", "base")}
    assert {"session_prefix", "index_prefix", "schedule_prefix", "run_prefix", "queue"} <= set(declared)
    assert len(set(declared.values())) == len(declared), declared
    for name, key in declared.items():
        assert key.startswith(("arq:", part.base)) and (
            key.startswith("arq:") or keys.slot_of(key) == part.slot
        ), name
    for field in keys.CONTEXT_FIELDS:
        assert field in ("job_id", "archive") or f"{field}_prefix" in declared, field
