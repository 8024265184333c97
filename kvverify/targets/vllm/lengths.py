"""vLLM's own answer to "which ``max_model_len``?": the real config loader and length check.

:func:`vllm_max_model_len` writes the ``config.json`` to a temporary directory, loads it with
upstream's ``get_config`` (transformers' config class for the model type, RoPE patches and
validation included), takes ``get_hf_text_config``, derives the length with the model type's
``ModelArchConfigConvertor`` and verifies the requested one with ``_get_and_verify_max_len``
under the given ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``: the steps ``ModelConfig`` runs, without the
tokenizer and weights a full ``ModelConfig`` would fetch. The length differential
(``properties/test_differential_lengths.py``) compares it with :mod:`kvverify.catalog.lengths`.

Capability probes (for :mod:`.compat` at merge): the modules ``vllm.transformers_utils.config``
(``get_config``, ``get_hf_text_config``), ``vllm.transformers_utils.model_arch_config_convertor``
(``MODEL_ARCH_CONFIG_CONVERTORS``, ``ModelArchConfigConvertorBase``) and ``vllm.config.model``
(``_get_and_verify_max_len``); a release without them raises :class:`ReleaseLacks`.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import types
from collections.abc import Iterator, Mapping
from typing import Any

from kvverify.targets.vllm.env import LOCK, preserved_environ, upstream
from kvverify.targets.vllm.refusals import ReleaseLacks

ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


@contextlib.contextmanager
def _allow_long(allow: bool) -> Iterator[None]:
    before = os.environ.get(ENV)
    os.environ[ENV] = "1" if allow else "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before


def _functions() -> types.SimpleNamespace:
    upstream()  # the environment, the CPU platform, vLLM imported once
    import importlib

    try:
        importlib.import_module("vllm.config")  # before transformers_utils.config (import order)
        cfg = importlib.import_module("vllm.transformers_utils.config")
        conv = importlib.import_module("vllm.transformers_utils.model_arch_config_convertor")
        model = importlib.import_module("vllm.config.model")
        return types.SimpleNamespace(get_config=cfg.get_config, get_hf_text_config=cfg.get_hf_text_config,
                                     convertors=conv.MODEL_ARCH_CONFIG_CONVERTORS,
                                     base=conv.ModelArchConfigConvertorBase,
                                     verify=model._get_and_verify_max_len)
    except (ImportError, AttributeError) as e:
        raise ReleaseLacks(str(getattr(upstream().vllm, "__version__", "?")),
                           "lacks the max_model_len derivation of vLLM 0.33.0 (model_arch_config_convertor, "
                           f"_get_and_verify_max_len): {type(e).__name__}: {e}") from None


def vllm_max_model_len(config: Mapping[str, Any], max_model_len: int | None, *,
                       allow_long: bool = False) -> dict[str, Any]:
    """``{"max_model_len": n}``, ``{"refused": message}`` (the length check raised) or
    ``{"config_error": message}`` (the config did not load)."""
    fns = _functions()
    with LOCK, preserved_environ(), tempfile.TemporaryDirectory(prefix="kvverify-len-") as where:
        with open(os.path.join(where, "config.json"), "w", encoding="utf-8") as f:
            json.dump(dict(config), f)
        try:
            hf = fns.get_config(where, trust_remote_code=False)
            text = fns.get_hf_text_config(hf)
            convertor = fns.convertors.get(getattr(hf, "model_type", ""), fns.base)(hf, text)
            arch = types.SimpleNamespace(derived_max_model_len_and_key=convertor.derive_max_model_len_and_key())
        except Exception as e:  # noqa: BLE001 - a config upstream cannot load is the answer
            return {"config_error": f"{type(e).__name__}: {e}"[:500]}
        with _allow_long(allow_long):
            try:
                length = fns.verify(hf_config=text, model_arch_config=arch, tokenizer_config=None,
                                    max_model_len=max_model_len, disable_sliding_window=False, sliding_window=None)
            except ValueError as e:
                return {"refused": str(e)[:500]}
            except Exception as e:  # noqa: BLE001 - e.g. a factor of the wrong type
                return {"config_error": f"{type(e).__name__}: {e}"[:500]}
    return {"max_model_len": int(length)}
