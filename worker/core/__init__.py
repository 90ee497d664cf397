"""The run's pure core beside the machine: configuration, policy, prompt, context and compaction, and
the values the ports (worker/ports.py) exchange, no I/O."""
