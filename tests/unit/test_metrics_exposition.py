"""What a scrape shows before anything happened: every child that rate() and
increase() read is there at 0, so Prometheus sees its first increment (a series that appears at
its first increment hides it: a real Prometheus counted 62 of 185 completed runs); no _created
series; label values from fixed sets only. tests/integration/test_prometheus.py checks the same
against a real Prometheus."""

from __future__ import annotations

from agentmill_client.models import Usage
from producer.api.metrics import ApiMetrics
from tests.integration.helpers import metric_samples
from worker.telemetry.metrics import LABELS, MetricsObserver


def test_every_worker_child_exists_at_zero_before_first_use() -> None:
    obs = MetricsObserver(tools=["echo", "calculator"])
    text = obs.render().decode()
    m = metric_samples(text)
    assert "_created" not in text
    for status in ("completed", "failed", "aborted"):
        assert m[("agentmill_runs_finished_total", (("status", status),))] == 0
    for reason in ("http_503", "http_429", "timeout", "connection", "http_other", "other"):
        assert m[("agentmill_model_retries_total", (("reason", reason),))] == 0
    for outcome in ("success", "error"):
        assert m[("agentmill_model_calls_total", (("outcome", outcome),))] == 0
    for kind in LABELS["kind"]:
        assert m[("agentmill_events_published_total", (("kind", kind),))] == 0
    for reason in ("lease_expired", "job_lost"):
        assert m[("agentmill_runs_redispatched_total", (("reason", reason),))] == 0
    for tool in ("echo", "calculator", "recall_tool_call", "other"):
        assert m[("agentmill_tool_calls_total", (("outcome", "ok"), ("tool", tool)))] == 0
    step = (("from_state", "idle"), ("to_state", "preparing"))
    assert m[("agentmill_state_transitions_total", step)] == 0
    assert "agentmill_job_retries" not in text  # it never counted: a claimed job never runs again


def test_worker_label_values_come_from_fixed_sets() -> None:
    obs = MetricsObserver(tools=["echo"])
    before = len(metric_samples(obs.render().decode()))
    for i in range(50):  # what a model, a provider or a bug could hand the observer
        obs.tool_call(f"tool-{i}", "ok", duration_s=0.1)
        obs.tool_retry(f"tool-{i}")
        obs.model_retry(f"http_{500 + i}")
        obs.run_finished(f"status-{i}", iterations=1, duration_s=1)
        obs.event_published(f"kind-{i}")
        obs.throttled(f"why-{i}")
        obs.compaction(f"why-{i}")
        obs.transition(f"s-{i}", "idle", "Ev")
        obs.state_time(f"s-{i}", 1.0)
        obs.runs_redispatched(f"why-{i}")
    text = obs.render().decode()
    assert len(metric_samples(text)) == before
    m = metric_samples(text)
    assert m[("agentmill_tool_calls_total", (("outcome", "ok"), ("tool", "other")))] == 50
    assert m[("agentmill_runs_finished_total", (("status", "other"),))] == 50


def test_api_children_exist_at_zero_and_no_created_series() -> None:
    text = ApiMetrics().render()[0].decode()
    m = metric_samples(text)
    assert "_created" not in text
    for outcome in ("accepted", "replayed", "rejected"):
        assert m[("agentmill_api_submissions_total", (("outcome", outcome),))] == 0
    assert "agentmill_worker_slots_wanted" not in text  # no reading of Redis: absent, never 0


def test_held_back_jobs_are_those_over_their_tenants_free_running_room() -> None:
    from producer.gauges import ClusterGauges, held_back, running_caps
    from shared.quotas import Quotas
    from shared.settings import Settings

    # (cap, queued, running): at its cap, all 7 held; 3 of 5 room free, 2 held; room for all, none.
    assert held_back(20, [(10, 7, 10), (5, 5, 2), (100, 3, 0)]) == 7 + 2
    assert held_back(4, [(1, 9, 1)]) == 4  # never more than the queue holds
    assert ClusterGauges(queue_depth=20, running=12, awaiting=1, held=9).slots_wanted == 23
    quotas = Quotas(
        Settings(tenant_max_running=100, tenant_quotas='{"b": {"maxRunning": 2}, "c": {"maxRunning": 0}}')
    )
    assert running_caps(quotas, ["a", "default"]) == {"a": 100, "b": 2}  # default and c are uncapped


def test_token_and_cost_counters_by_configured_agent_and_model_only() -> None:
    obs = MetricsObserver(models=[("gpt", "fake-1")])
    m = metric_samples(obs.render().decode())
    for pair in ((("agent", "gpt"), ("model", "fake-1")), (("agent", "other"), ("model", "other"))):
        assert m[("agentmill_model_cost_usd_total", pair)] == 0
        for d in ("input", "output", "cache_read", "cache_write"):
            assert m[("agentmill_model_usage_tokens_total", (pair[0], ("direction", d), pair[1]))] == 0
    obs.tokens_used(
        Usage(
            input_tokens=100, output_tokens=20, cost_usd=0.0006, cache_read_tokens=70, cache_write_tokens=5
        ),
        agent="gpt",
        model="fake-1",
    )
    for i in range(20):  # an agent or model no profile configures mints no series
        obs.tokens_used(Usage(input_tokens=1, output_tokens=1, cost_usd=0.5), agent=f"a-{i}", model=f"m-{i}")
    m = metric_samples(obs.render().decode())
    assert (
        m[
            (
                "agentmill_model_usage_tokens_total",
                (("agent", "gpt"), ("direction", "input"), ("model", "fake-1")),
            )
        ]
        == 100
    )
    assert (
        m[
            (
                "agentmill_model_usage_tokens_total",
                (("agent", "gpt"), ("direction", "output"), ("model", "fake-1")),
            )
        ]
        == 20
    )
    assert m[("agentmill_model_cost_usd_total", (("agent", "gpt"), ("model", "fake-1")))] == 0.0006
    assert m[("agentmill_model_cost_usd_total", (("agent", "other"), ("model", "other")))] == 10
    assert m[("agentmill_model_tokens_total", (("direction", "input"),))] == 120
    assert m[("agentmill_model_tokens_total", (("direction", "cache_read"),))] == 70
    assert m[("agentmill_model_tokens_total", (("direction", "cache_write"),))] == 5
    key = (("agent", "gpt"), ("direction", "cache_read"), ("model", "fake-1"))
    assert m[("agentmill_model_usage_tokens_total", key)] == 70
    assert sum(1 for name, _ in m if name == "agentmill_model_usage_tokens_total") == 8


def test_the_worker_process_exports_its_build_and_process_series() -> None:
    from agentmill_client import __version__
    from shared.settings import Settings
    from worker.process.jobs import WorkerProcess

    wp = WorkerProcess(Settings(redis_url="redis://127.0.0.1:1/0", worker_metrics_port=-1))
    m = metric_samples(wp.metrics.render().decode())
    assert m[("agentmill_build_info", (("version", __version__),))] == 1
    assert m[("process_resident_memory_bytes", ())] > 0 and m[("process_cpu_seconds_total", ())] >= 0
    assert any(name == "python_info" for name, _ in m)
    assert m[("agentmill_runs_finished_total", (("status", "completed"),))] == 0  # its own, beside them


def test_the_api_exports_its_build_process_and_stream_series_from_start_up() -> None:
    from agentmill_client import __version__
    from producer.api.streams import SSE, StreamLimiter

    limiter = StreamLimiter(per_tenant=2, total=5)
    metrics = ApiMetrics(limiter)
    m = metric_samples(metrics.render()[0].decode())
    assert m[("agentmill_build_info", (("version", __version__),))] == 1
    assert m[("process_open_fds", ())] > 0 and any(name == "python_info" for name, _ in m)
    assert m[("agentmill_api_sse_streams_open", ())] == 0 and m[("agentmill_api_streams_max", ())] == 5
    slots = [limiter.acquire("a", SSE), limiter.acquire("b", SSE), limiter.acquire("b")]
    m = metric_samples(metrics.render()[0].decode())
    assert m[("agentmill_api_sse_streams_open", ())] == 2 and m[("agentmill_api_long_polls_open", ())] == 1
    for slot in slots:
        slot.release()
        slot.release()  # idempotent
    m = metric_samples(metrics.render()[0].decode())
    assert m[("agentmill_api_sse_streams_open", ())] == 0 and m[("agentmill_api_long_polls_open", ())] == 0


def test_the_children_found_once_are_the_series_a_scrape_shows() -> None:
    """A step's transition, event and time in its state go to the children MetricsObserver looks up
    at start-up (not by labels() each time): a known value's own series, another's ``other``, and
    no value adds to those lookups."""
    obs = MetricsObserver()
    sizes = [len(obs._step_kids), len(obs._event_kids), len(obs._state_kids), len(obs._token_kids)]
    for _ in range(3):
        obs.transition("idle", "preparing", "Started")
        obs.event_published("status")
        obs.state_time("preparing", 0.2)
    for i in range(5):
        obs.transition(f"s-{i}", "idle", "Ev")
        obs.event_published(f"kind-{i}", 2)
        obs.state_time(f"s-{i}", 1.0)
        obs.tokens_used(Usage(input_tokens=1), agent=f"a-{i}", model="m")
    m = metric_samples(obs.render().decode())
    assert m[("agentmill_state_transitions_total", (("from_state", "idle"), ("to_state", "preparing")))] == 3
    assert m[("agentmill_state_transitions_total", (("from_state", "other"), ("to_state", "other")))] == 5
    assert m[("agentmill_events_published_total", (("kind", "status"),))] == 3
    assert m[("agentmill_events_published_total", (("kind", "other"),))] == 10
    assert m[("agentmill_state_duration_seconds_count", (("state", "preparing"),))] == 3
    assert m[("agentmill_state_duration_seconds_count", (("state", "other"),))] == 5
    assert sizes == [len(obs._step_kids), len(obs._event_kids), len(obs._state_kids), len(obs._token_kids)]
