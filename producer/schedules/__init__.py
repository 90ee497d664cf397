"""Cron schedules: a schedule's times (cron.py), schedules in Redis (store.py) and the
firing loop every worker and API process runs (firer.py)."""
