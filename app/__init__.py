"""The process roots, above both sides: the ``agentmill`` command (app.cli), a worker process and
its supervisor (app.worker, app.supervisor), the API's factory (app.api). The only package that
imports both ``producer`` and ``worker``: ``shared`` imports neither, and neither imports the other
(tests/unit/test_layers.py)."""
