"""The history archive (AGENTMILL_ARCHIVE_URL, PostgreSQL): finished runs leave Redis for it.

``schema`` creates and migrates the tables (versioned, in a migrations table); ``store`` writes
batches of runs exactly once and reads them back; ``archiver`` moves finished runs from each
partition's archive index (keys.Partition.archive) into the store. docs/operations.md#archive.
"""
