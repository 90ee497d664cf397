"""Settings is the one reader of AGENTMILL_* (and REDIS_URL), every setting is described, and
docs/settings.md is the table generated from them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared import settings_doc
from shared.profiles import dev_profiles_enabled, load_profiles
from shared.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("producer", "worker", "shared")
# Environment reads that are not settings, each for its reason: none of them may name ours.
NOT_SETTINGS = {
    "worker/models/openai.py": "the API key variable a profile names (apiKeyEnv)",
    "shared/preflight.py": "whether the API key variable a profile names (apiKeyEnv) is set",
    "worker/tools/http.py": 'a header secret a profile names ("env:NAME")',
    "worker/tools/mcp_transport.py": 'an MCP server header secret a profile names ("${env:NAME}")',
    "app/cli/submit.py": "XDG_STATE_HOME, the platform's state directory",
    "app/supervisor.py": "its worker processes' environment: its own, each process's socket and id added",
    "worker/telemetry/tracing.py": "the standard OTEL_* variables, whether an OTLP endpoint is set (the SDK reads the rest)",
}
ENV_READ = re.compile(r"\b(?:environ|getenv)\b|\benvvar\s*=")
OURS = re.compile(r"AGENTMILL_|REDIS_URL")


def _product_files() -> list[Path]:
    return sorted(p for d in PRODUCT for p in (ROOT / d).rglob("*.py") if p != ROOT / "shared/settings.py")


def test_the_checked_in_doc_is_the_generated_one() -> None:
    doc = (ROOT / "docs" / "settings.md").read_text()
    assert doc == settings_doc.document(), (
        "docs/settings.md is out of date: python -m shared.settings_doc > docs/settings.md"
    )


def test_every_setting_has_a_description() -> None:
    missing = settings_doc.undescribed()
    assert not missing, (
        f"settings without a description: {', '.join(missing)}; give each a "
        "Field(description=...), then: python -m shared.settings_doc > docs/settings.md"
    )


def test_every_variable_is_in_the_table_under_its_env_name() -> None:
    doc = settings_doc.document()
    for name, field in Settings.model_fields.items():
        for env in settings_doc.env_names(name, field):
            assert f"`{env}`" in doc, env
    assert "`REDIS_URL`" in doc and "`AGENTMILL_SHUTDOWN_GRACE_S`" in doc  # the aliases stay


def test_only_settings_reads_our_variables() -> None:
    """No product module reads the environment except for a reason listed above, and none of
    those reads names an AGENTMILL_ variable or REDIS_URL: those are Settings fields."""
    readers: dict[str, list[str]] = {}
    for path in _product_files():
        lines = [ln.strip() for ln in path.read_text().splitlines() if ENV_READ.search(ln)]
        if lines:
            readers[str(path.relative_to(ROOT))] = lines
    ours = {f: [ln for ln in lines if OURS.search(ln)] for f, lines in readers.items()}
    assert not {f: ls for f, ls in ours.items() if ls}, "read these through shared.settings.Settings"
    unexplained = sorted(set(readers) - set(NOT_SETTINGS))
    assert not unexplained, (
        f"{unexplained} read the environment: add a Settings field instead (or, for a variable that is "
        "not ours, a reason in NOT_SETTINGS)"
    )


@pytest.mark.parametrize("value", ["true", "t", "yes", "y", "on", "1", "false", "f", "no", "off", "0"])
def test_dev_profiles_is_parsed_by_one_rule(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """The profile loader and Settings agree on AGENTMILL_DEV_PROFILES, whatever its spelling."""
    monkeypatch.setenv("AGENTMILL_DEV_PROFILES", value)
    dev = Settings().dev_profiles
    assert dev_profiles_enabled() is dev
    assert ("scripted" in load_profiles(None)) is dev


def test_new_variables_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables once read beside Settings are its fields, by the same names."""
    for env, value in {
        "AGENTMILL_SSE_HEARTBEAT_S": "0.2",
        "AGENTMILL_WEBHOOKS": "false",
        "AGENTMILL_TOKEN": "tok",
        "AGENTMILL_FAILPOINTS": "after_tool_effect:1",
    }.items():
        monkeypatch.setenv(env, value)
    s = Settings()
    assert (s.sse_heartbeat_s, s.webhooks, s.token, s.failpoints) == (
        0.2,
        False,
        "tok",
        "after_tool_effect:1",
    )


def test_a_beat_that_cannot_keep_the_lease_is_refused_and_an_unset_one_follows_a_short_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shared.settings import SettingsError, get_settings
    from worker.process.jobs import lease_margin_ms

    # Unset: 500 ms, or a third of a shorter lease; with a 0.8 s lease the default beat (500 ms)
    # came after the worker counted its lease over (0.8 s less a 0.4 s margin), at every beat.
    assert Settings().heartbeat_ms == 500
    short = Settings(lease_ms=800)
    assert short.heartbeat_ms == 266 and short.heartbeat_ms < short.lease_ms - lease_margin_ms(short)
    with pytest.raises(ValueError, match="AGENTMILL_HEARTBEAT_MS=600 must be at most a third"):
        Settings(lease_ms=1_500, heartbeat_ms=600)
    # From the environment: one line naming the settings as they are set, not a traceback's worth.
    get_settings.cache_clear()
    monkeypatch.setenv("AGENTMILL_LEASE_MS", "soon")
    with pytest.raises(
        SettingsError, match=r"^invalid settings: AGENTMILL_LEASE_MS: .*integer.* \(got 'soon'\)$"
    ):
        get_settings()
    monkeypatch.setenv("REDIS_URL", "redis://x:1/0")
    monkeypatch.setenv("AGENTMILL_LEASE_MS", "1500")
    monkeypatch.setenv("AGENTMILL_HEARTBEAT_MS", "900")
    get_settings.cache_clear()
    with pytest.raises(SettingsError, match="AGENTMILL_HEARTBEAT_MS=900 must be at most a third"):
        get_settings()
    get_settings.cache_clear()


@pytest.mark.parametrize(
    "argv", [["-m", "app.cli", "worker"], ["-m", "app.worker"], ["-m", "app.cli", "api"]]
)
def test_a_process_started_with_refused_settings_says_so_in_a_line_and_exits_2(argv: list[str]) -> None:
    """Started as ``python -m …`` through the fork server (tests/support/forkserver.py): the settings
    are read at start, not at import, so a child of a process that imported the module meets them
    as a fresh interpreter would."""
    import os

    from tests.support import forkserver

    env = {**os.environ, "AGENTMILL_LEASE_MS": "1500", "AGENTMILL_HEARTBEAT_MS": "900"}
    done = forkserver.run(argv, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "AGENTMILL_HEARTBEAT_MS=900 must be at most a third" in lines[0], done.stderr
