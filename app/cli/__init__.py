"""The ``agentmill`` command (entry point ``app.cli:main``)."""

from __future__ import annotations

from app.cli.main import main as command_tree
from shared.settings_errors import exit_on_refusal

__all__ = ["main"]


def main() -> None:
    """The command tree; settings it reads that the environment got wrong: one line, exit code 2."""
    with exit_on_refusal("agentmill"):
        command_tree()
