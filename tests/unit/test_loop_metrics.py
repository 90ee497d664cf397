"""worker/telemetry/loop_metrics.py against prometheus-client: the same observations, through both, render
the same exposition byte for byte (names, _total, buckets and their bounds, sums, the order of the
series), and refuse the same misuse."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, disable_created_metrics
from prometheus_client import Counter as PromCounter
from prometheus_client import Histogram as PromHistogram
from prometheus_client.exposition import generate_latest

from worker.telemetry import loop_metrics

disable_created_metrics()  # type: ignore[no-untyped-call]  # as worker/telemetry/metrics.py does

BUCKETS = (0.005, 0.1, 0.5, 1, 2.5, 60)


def families(counter: type, histogram: type, registry: CollectorRegistry) -> dict[str, object]:
    return {
        "plain": counter("t_plain", "A counter without labels.", registry=registry),
        "by_kind": counter("t_by_kind", "A counter by kind.", ["kind"], registry=registry),
        "by_two": counter("t_by_two", "A counter by two labels.", ["tool", "outcome"], registry=registry),
        "seconds": histogram("t_seconds", "A histogram.", buckets=BUCKETS, registry=registry),
        "by_state": histogram(
            "t_state_seconds", "A histogram by state.", ["state"], buckets=BUCKETS, registry=registry
        ),
    }


def play(f: dict[str, object], seed: int) -> None:
    rng = random.Random(seed)
    f["by_kind"].labels("precreated")  # type: ignore[attr-defined]  # a child at 0
    for _ in range(2000):
        what = rng.choice(list(f))
        # bucket bounds themselves, values between and beyond them, zero
        value = rng.choice([*BUCKETS, 0, 0.0049, 0.3, 7, 61, 1e9, rng.random() * 100])
        if what == "plain":
            f["plain"].inc(rng.choice([1, 2, 0.25]))  # type: ignore[attr-defined]
        elif what == "by_kind":
            f["by_kind"].labels(rng.choice("abc")).inc(rng.choice([1, 3]))  # type: ignore[attr-defined]
        elif what == "by_two":
            f["by_two"].labels(rng.choice(["echo", "calc"]), rng.choice(["ok", "error"])).inc()  # type: ignore[attr-defined]
        elif what == "seconds":
            f["seconds"].observe(value)  # type: ignore[attr-defined]
        else:
            f["by_state"].labels(rng.choice(["x", "y", "z"])).observe(value)  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_same_observations_render_the_same_exposition(seed: int) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    a = families(loop_metrics.Counter, loop_metrics.Histogram, ours)
    b = families(PromCounter, PromHistogram, theirs)
    assert generate_latest(ours) == generate_latest(theirs)  # nothing observed yet
    play(a, seed)
    play(b, seed)
    text = generate_latest(ours)
    assert text == generate_latest(theirs)
    assert b'le="0.5"' in text and b"_total" in text and b"_created" not in text
    assert ours.get_sample_value("t_seconds_count") == theirs.get_sample_value("t_seconds_count") > 0


def test_misuse_is_refused_as_prometheus_client_refuses_it() -> None:
    for counter, histogram in ((loop_metrics.Counter, loop_metrics.Histogram), (PromCounter, PromHistogram)):
        f = families(counter, histogram, CollectorRegistry())
        with pytest.raises(ValueError):
            f["plain"].inc(-1)  # type: ignore[attr-defined]
        with pytest.raises(ValueError):
            f["by_kind"].labels("a", "b")  # type: ignore[attr-defined]
        with pytest.raises(ValueError):
            f["by_kind"].inc()  # type: ignore[attr-defined]  # a labelled family has no value of its own
        with pytest.raises(ValueError):
            f["by_state"].observe(1)  # type: ignore[attr-defined]


def test_a_name_registered_twice_is_refused() -> None:
    registry = CollectorRegistry()
    loop_metrics.Counter("t_once", "Once.", registry=registry)
    with pytest.raises(ValueError):
        PromCounter("t_once", "Again.", registry=registry)


def test_label_values_that_are_not_strings_share_one_child() -> None:
    c = loop_metrics.Counter("t_codes", "By code.", ["code"], registry=CollectorRegistry())
    c.labels(503).inc()  # type: ignore[arg-type]
    c.labels(503).inc()  # type: ignore[arg-type]
    c.labels("503").inc()
    assert next(iter(c.collect())).samples[0].value == 3
