"""The merged /metrics of ``agentmill worker --processes N`` (worker/telemetry/metrics_merge.py), from the
expositions real worker registries render."""

from __future__ import annotations

import signal

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.supervisor import describe_exit, restart_delay
from shared.process_metrics import register_process_metrics
from worker.telemetry.metrics import MetricsObserver
from worker.telemetry.metrics_merge import MergedMetrics, parse


def process(finished: int, in_progress: int) -> str:
    m = MetricsObserver()
    register_process_metrics(m.registry)
    for _ in range(finished):
        m.run_started(resumed=False, job_try=1)
        m.run_finished("completed", iterations=2, duration_s=0.3)
    for _ in range(in_progress):
        m.run_started(resumed=False, job_try=1)
    return m.render().decode()


def rendered(merged: MergedMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = CollectorRegistry(auto_describe=False)
    r.register(merged)
    text = generate_latest(r).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_counters_and_histograms_are_summed_gauges_labelled_by_process() -> None:
    merged = MergedMetrics()
    merged.update("0", parse(process(finished=3, in_progress=1)))
    merged.update("1", parse(process(finished=4, in_progress=2)))
    m = rendered(merged)
    assert m[("agentmill_runs_finished_total", (("status", "completed"),))] == 7
    assert m[("agentmill_run_iterations_count", ())] == 7 and m[("agentmill_run_iterations_sum", ())] == 14
    assert m[("agentmill_run_duration_seconds_bucket", (("le", "+Inf"),))] == 7
    assert m[("agentmill_runs_in_progress", (("process", "0"),))] == 1
    assert m[("agentmill_runs_in_progress", (("process", "1"),))] == 2
    assert ("agentmill_runs_in_progress", ()) not in m
    assert m[("agentmill_build_info", (("process", "1"), ("version", "0.1.0")))] == 1


def test_a_process_that_died_keeps_its_counts_so_counters_never_go_down() -> None:
    merged = MergedMetrics()
    merged.update("0", parse(process(finished=3, in_progress=0)))
    merged.update("1", parse(process(finished=5, in_progress=1)))
    merged.retire("1")  # died; its replacement starts from 0
    merged.update("1", parse(process(finished=2, in_progress=0)))
    m = rendered(merged)
    assert m[("agentmill_runs_finished_total", (("status", "completed"),))] == 3 + 5 + 2
    assert m[("agentmill_run_iterations_count", ())] == 10
    assert m[("agentmill_runs_in_progress", (("process", "1"),))] == 0  # the new one's gauge only
    merged.retire("1")  # and again before the new one was fetched: nothing counted twice
    m = rendered(merged)
    assert m[("agentmill_runs_finished_total", (("status", "completed"),))] == 10
    assert ("agentmill_runs_in_progress", (("process", "1"),)) not in m


def test_restarts_back_off_while_processes_die_young() -> None:
    assert [restart_delay(n) for n in (1, 2, 3, 4, 10, 20)] == [0.5, 1.0, 2.0, 4.0, 30.0, 30.0]


def test_an_exit_says_its_code_or_signal() -> None:
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"
    assert describe_exit(-200) == "was killed by signal 200"
