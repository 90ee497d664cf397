"""``python -m worker``: one worker process (``agentmill worker --processes 1``; a process of
``agentmill worker --processes N`` is one of these)."""

from __future__ import annotations

from shared.settings import get_settings
from shared.settings_errors import exit_on_refusal
from worker.start import start_worker


def main() -> None:
    with exit_on_refusal("agentmill worker"):  # one line and exit code 2, as `agentmill worker` says it
        settings = get_settings()
        start_worker(settings, processes=1)


if __name__ == "__main__":
    main()
