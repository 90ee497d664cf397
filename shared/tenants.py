"""The named tenants a process's settings know of, and the rule that a process making their runs
holds AGENTMILL_ID_SECRET.

A named tenant's runs, sessions and schedules are kept under ids made with AGENTMILL_ID_SECRET
(producer.scope.Scope); unset, under a public development key. A run one process makes under that
key is listed but unreadable to a process that has the real one, so the API and the workers refuse
to start without it whenever their settings name a tenant (``require_id_secret``): an API token
(AGENTMILL_API_TOKENS, AGENTMILL_API_TOKENS_FILE, with auth on) or a quota
(AGENTMILL_TENANT_QUOTAS) for a tenant other than ``default``. A worker given neither cannot know
at start; its schedule firer refuses a named tenant's firing instead (producer.schedules.firer).
Sub-agent children need no key: a child's id is derived from its parent's stored id
(worker.machine.child_run_id) and read back as it is.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from shared.quotas import DEFAULT_TENANT, Quotas
from shared.settings import Settings
from shared.settings_errors import SettingsError

__all__ = ["named_tenants", "parse_tokens", "require_id_secret"]


def parse_tokens(spec: str) -> dict[str, str]:
    """ "token=tenant,token2=tenant2" (or one per line) -> {token: tenant} (no tenant: ``default``)."""
    out: dict[str, str] = {}
    for item in spec.replace("\n", ",").split(","):
        item = item.strip()
        if not item or item.startswith("#"):
            continue
        token, _, tenant = item.partition("=")
        out[token.strip()] = tenant.strip() or DEFAULT_TENANT
    return out


def named_tenants(settings: Settings) -> dict[str, list[str]]:
    """The tenants other than ``default`` the settings name, by the setting naming them (empty: a
    single-tenant process). A tokens file or quota JSON that cannot be read names none here: the
    process's own reading of it reports that."""
    found: dict[str, list[str]] = {}
    if not settings.auth_disabled:
        tokens = parse_tokens(settings.api_tokens or "")
        if settings.api_tokens_file:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                tokens.update(parse_tokens(Path(settings.api_tokens_file).read_text()))
        names = sorted({t for tok, t in tokens.items() if tok and t != DEFAULT_TENANT})
        if names:
            found["AGENTMILL_API_TOKENS"] = names
    try:
        quotas = Quotas(settings).overrides
    except (ValueError, OSError):
        quotas = {}
    names = sorted(t for t in quotas if t != DEFAULT_TENANT)
    if names:
        found["AGENTMILL_TENANT_QUOTAS"] = names
    return found


def require_id_secret(settings: Settings) -> None:
    """SettingsError (one line naming AGENTMILL_ID_SECRET) when the settings name a tenant and hold
    no ID secret: the process would keep that tenant's new runs where no other process reads them."""
    if settings.id_secret:
        return
    named = named_tenants(settings)
    if not named:
        return
    setting, names = next(iter(named.items()))
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    raise SettingsError(
        f"AGENTMILL_ID_SECRET is not set, but {setting} names tenants ({shown}): their runs' ids are "
        "made with it; set the same value on every API and worker process, once, and never change it"
    )
