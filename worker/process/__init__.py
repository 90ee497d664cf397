"""The worker process: its start and shutdown, the arq worker, its lease, reconciler and side loops."""
