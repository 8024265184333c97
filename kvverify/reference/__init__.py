"""The reference: vLLM 0.33.0's KV-cache logic in plain Python, under upstream's names.

One module per upstream concern: ``ops``/``arith`` (the shared capacity arithmetic, int and
z3), ``specs``, ``config``, ``grouping``, ``planner``, ``block_sizes``, ``pool``
(``BlockPool``), ``request``, ``managers/`` (per-type managers, coordinator),
``kv_cache_manager`` (``allocate_slots``), ``scheduler``, ``driver``, ``workloads``, ``dtypes``.
"""
