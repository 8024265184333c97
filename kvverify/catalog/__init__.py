"""Real architectures' KV-cache layouts: the model catalog and Hugging Face ``config.json``.

A :class:`ModelLayout` says, per layer, what kind of KV state the layer keeps (full
attention, sliding window, chunked local, MLA, or Mamba-like state) and the numbers that
size it. Layouts come from three places:

* the shipped catalog (``kvverify/models/*.json``, schema in ``models/README.md``):
  :func:`list_models`, :func:`load_model`;
* a catalog-format file of your own: :func:`load_model_file`;
* a Hugging Face ``config.json`` (path, directory or dict): :func:`read_hf_config`.

:func:`build_layer_specs` turns a layout into per-layer :mod:`kvverify.reference.specs` (layer name
-> spec, as upstream's per-layer ``get_kv_cache_spec`` does), including what upstream does
around it for hybrid attention+Mamba models (``Platform._align_hybrid_block_size``): the
attention block size is raised to ``k * cdiv(mamba_page, k * p1)`` and the Mamba page is
padded to the attention page. :func:`build_model` returns the effective config (with the
aligned ``block_size``) together with the specs.

Every malformed input raises :class:`~kvverify.errors.ConfigError` naming the field (or
:class:`CatalogError` for a file that cannot be read or parsed).

One module per concern: ``layout`` (the layout model and the layer-kind vocabulary, derived
from :mod:`kvverify.reference.kinds`), ``files`` (catalog JSON files), ``hf`` (the Hugging
Face reader), ``build`` (layout -> specs). Every public name is importable from here.
"""

from kvverify.catalog.build import (
    BuiltModel,
    build_layer_specs,
    build_model,
    effective_config,
    hybrid_block_size,
)
from kvverify.catalog.files import (
    SCHEMA_VERSION,
    layout_from_dict,
    list_models,
    load_all_models,
    load_model,
    load_model_file,
)
from kvverify.catalog.hf import read_hf_config
from kvverify.catalog.layout import (
    ATTENTION_KINDS,
    DEFAULT_KERNEL_BLOCK_SIZE,
    LAYER_KIND_ALIASES,
    LAYER_KINDS,
    MAMBA_TYPES,
    MAX_DIM,
    MAX_LAYERS,
    MLA_KERNEL_BLOCK_ALIGNMENT,
    CatalogError,
    MambaLayout,
    ModelLayout,
)

__all__ = [
    "ATTENTION_KINDS", "BuiltModel", "CatalogError", "DEFAULT_KERNEL_BLOCK_SIZE", "LAYER_KINDS",
    "LAYER_KIND_ALIASES", "MAMBA_TYPES", "MAX_DIM", "MAX_LAYERS", "MLA_KERNEL_BLOCK_ALIGNMENT",
    "MambaLayout", "ModelLayout", "SCHEMA_VERSION", "build_layer_specs", "build_model",
    "effective_config", "hybrid_block_size", "layout_from_dict", "list_models", "load_all_models",
    "load_model", "load_model_file", "read_hf_config",
]
