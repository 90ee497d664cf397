"""The worker's adapters: the ports' implementations on Redis (and in memory), and the clients they guard."""
