"""What a process checks before it connects anywhere: configuration that could only fail later
(a profile's model key unset, the archive's driver not installed) refused at start-up as a
SettingsError, which the entry points print as one line and exit 2 (``exit_on_refusal``).

Settings the model refuses (``REDIS_URL`` without a scheme, …) and profile files that do not
validate (unknown tools, an openai provider without ``baseUrl``) raise the same error when read;
what is here needs more than the values: the environment, the installed packages.
"""

from __future__ import annotations

import importlib
import os

from shared.connections import connections_from
from shared.profile_refusals import PROFILES_ENV
from shared.profiles import AgentProfile, profiles_from
from shared.settings import Settings
from shared.settings_errors import SettingsError

__all__ = ["check_api", "check_archive_driver", "check_worker", "missing_keys"]


def check_archive_driver(settings: Settings) -> None:
    """With the archive on, its driver (asyncpg, the ``archive`` extra) must import."""
    if not settings.archive_url:
        return
    try:
        importlib.import_module("asyncpg")
    except ImportError as exc:
        raise SettingsError(
            "AGENTMILL_ARCHIVE_URL is set but the archive's driver cannot be imported "
            f"({type(exc).__name__}: {exc}); install agentmill with its `archive` extra "
            "(pip install 'agentmill[archive]'), or unset AGENTMILL_ARCHIVE_URL"
        ) from None


def check_worker(settings: Settings) -> dict[str, AgentProfile]:
    """A worker's start: the archive's driver, its profiles, and every key they name (it calls
    the providers). The profiles, loaded."""
    check_archive_driver(settings)
    profiles = profiles_from(settings.profiles, dev=settings.dev_profiles)
    connections_from(settings.providers, dev=settings.dev_profiles)  # the tenants' agents' connections
    if (why := missing_keys(profiles)) is not None:
        raise SettingsError(why)
    for p in profiles.values():  # each model's prices looked up now, its unpriced warning logged at start
        p.provider.prices()
    return profiles


def check_api(settings: Settings) -> dict[str, AgentProfile]:
    """The API's start: the archive's driver and its profiles. Not their keys: the API validates
    runs against the profiles but never calls a provider, so its pods need no model keys."""
    check_archive_driver(settings)
    connections_from(settings.providers, dev=settings.dev_profiles)
    return profiles_from(settings.profiles, dev=settings.dev_profiles)


def missing_keys(profiles: dict[str, AgentProfile]) -> str | None:
    """Why these profiles' model calls would go out without their key, or None: an ``apiKeyEnv``
    naming a variable that is unset or empty, an ``apiKeyFile`` that cannot be read. Checked by
    the processes that call the providers (workers)."""
    for p in profiles.values():
        for i, cfg in enumerate(p.chain):
            where = "provider" if p.providers is None else f"providers.{i}"
            if cfg.api_key_env and not os.environ.get(cfg.api_key_env):
                return (
                    f"{PROFILES_ENV}: profile {p.name!r}: {where}.apiKeyEnv names {cfg.api_key_env}, "
                    "which is not set in this process's environment"
                )
            if cfg.api_key_file and not os.access(cfg.api_key_file, os.R_OK):
                return f"{PROFILES_ENV}: profile {p.name!r}: {where}.apiKeyFile {cfg.api_key_file} cannot be read"
    return None
