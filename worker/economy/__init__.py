"""The economy lane: model calls sent through a provider's batch endpoint at its batch price.

``store.py`` keeps an endpoint's requests and batches in Redis (each state durable before the next);
``wire.py`` writes a model call as its provider's batch request and reads the answer back;
``openai_batches.py`` speaks OpenAI's Batch API, ``anthropic_batches.py`` Anthropic's Message
Batches (both ``BatchProvider``s, ``provider.py``); ``batcher.py`` is the leased loop that closes,
sends, polls, cancels and delivers batches.
"""
