"""The run's pure core beside the machine: configuration, policy, prompt, context and compaction, no I/O."""
