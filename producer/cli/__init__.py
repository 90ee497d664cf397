"""The ``agentmill`` command (entry point ``producer.cli:main``)."""

from producer.cli.main import main

__all__ = ["main"]
