"""The ``agentmill`` command (entry point ``producer.cli:main``)."""

from __future__ import annotations

import sys

from producer.cli.main import main as command_tree
from shared.settings import SettingsError

__all__ = ["main"]


def main() -> None:
    """The command tree; settings the environment holds and they refuse are one line on stderr and
    exit code 2, whichever command read them."""
    try:
        command_tree()
    except SettingsError as exc:
        print(f"agentmill: {exc}", file=sys.stderr)
        sys.exit(2)
