"""The economy lane: model calls sent through a provider's batch endpoint at its batch price.

``store.py`` keeps an endpoint's requests and batches in Redis (each state durable before the next);
``openai_batches.py`` speaks OpenAI's Batch API; ``batcher.py`` is the leased loop that closes,
sends, polls and delivers batches. A provider with a batch endpoint of its own plugs in as another
``BatchProvider`` (``provider.py``).
"""
