"""kvverify: verification of paged-attention KV-cache capacity and admission logic.

The public surface mirrors upstream vLLM's names (``BlockPool``, ``get_kv_cache_configs``,
``allocate_slots``, ``resolve_kv_cache_block_sizes``...). See README.md.
"""

__version__ = "0.1.0"
