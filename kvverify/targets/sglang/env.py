"""Importing the installed SGLang: the CPU stubs, the environment, a published ``ServerArgs``.

SGLang imports ``triton`` and ``torchvision`` unconditionally; ``stubs/sglang-cpu`` (shipped
in the repo) stands in for both and goes first on ``sys.path`` unless a real ``triton`` is
importable. Scheduler code reads a process-wide runtime context, so a ``ServerArgs`` built
from a temporary directory holding only a ``config.json`` (device cpu, no tokenizer, no hub)
is published before each probe whose settings differ from the last one.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

from kvverify.errors import KVVerifyError

INSTALL_HINT = ("install a CPU-only SGLang with `bash scripts/install-sglang-target.sh [--version X.Y.Z]` "
                "and run with its interpreter (`<venv>/bin/python -m pytest properties/ --target sglang`)")
STUBS = Path(__file__).resolve().parents[3] / "stubs" / "sglang-cpu"
LOCK = threading.RLock()
_DEFAULT_ENV = {"HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1", "SGLANG_DISABLE_REQUEST_LOGGING": "1"}
_MODEL_DIR: str | None = None
_PUBLISHED: tuple[Any, ...] | None = None
_MODEL_CONFIGS: dict[int, Any] = {}


class SglangNotInstalled(KVVerifyError):
    """No importable SGLang in this interpreter."""


class SglangDriftError(KVVerifyError):
    """The release's API differs from what the adapter knows (unknown drift): a clear error,
    never counted as a defect or a pass."""


def _put_stubs_first() -> None:
    if str(STUBS) in sys.path:
        return
    try:
        import triton  # noqa: F401
        if "kvverify.stub" not in getattr(triton, "__version__", "kvverify.stub"):
            return  # a real triton (a GPU machine): use it
    except ImportError:
        pass
    sys.path.insert(0, str(STUBS))


def load(name: str) -> ModuleType:
    """``import name`` from the installed SGLang (stubs and environment set first)."""
    import logging
    logging.getLogger("sglang").setLevel(logging.ERROR)
    with LOCK:
        for k, v in _DEFAULT_ENV.items():
            os.environ.setdefault(k, v)
        _put_stubs_first()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and (e.name == "sglang" or e.name.startswith("sglang.")) and name.startswith(e.name):
                raise SglangNotInstalled(f"{name} cannot be imported ({e}); {INSTALL_HINT}") from None
            raise


def version() -> str:
    import importlib.metadata as md
    try:
        return md.version("sglang")
    except md.PackageNotFoundError:
        raise SglangNotInstalled(f"sglang is not installed; {INSTALL_HINT}") from None


def model_dir() -> str:
    """A directory with one tiny Llama ``config.json`` (no weights, no tokenizer)."""
    global _MODEL_DIR
    if _MODEL_DIR is None:
        d = tempfile.mkdtemp(prefix="kvverify-sglang-model-")
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
               "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
               "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 1 << 22,
               "torch_dtype": "float32", "rms_norm_eps": 1e-5}
        (Path(d) / "config.json").write_text(json.dumps(cfg))
        _MODEL_DIR = d
    return _MODEL_DIR


def publish(page_size: int, context_len: int, chunked_prefill_size: int | None, max_prefill_tokens: int,
            max_running_requests: int) -> Any:
    """Publish a ``ServerArgs`` with these settings for the scheduler role; returns it."""
    global _PUBLISHED
    key = (page_size, context_len, chunked_prefill_size, max_prefill_tokens, max_running_requests)
    server_args_mod = load("sglang.srt.server_args")
    with LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if _PUBLISHED is not None and _PUBLISHED[0] == key:
            return _PUBLISHED[1]
        sa = server_args_mod.ServerArgs(model_path=model_dir(), device="cpu", skip_tokenizer_init=True,
                                        page_size=page_size, context_length=context_len,
                                        chunked_prefill_size=chunked_prefill_size if chunked_prefill_size else -1,
                                        max_prefill_tokens=max_prefill_tokens,
                                        max_running_requests=max_running_requests)
        server_args_mod.set_global_server_args_for_scheduler(sa)
        _PUBLISHED = (key, sa)
        return sa


def model_config(server_args: Any) -> Any:
    """``ModelConfig.from_server_args`` (cached per context length)."""
    key = server_args.context_length
    if key not in _MODEL_CONFIGS:
        mc = load("sglang.srt.configs.model_config")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _MODEL_CONFIGS[key] = mc.ModelConfig.from_server_args(server_args)
    return _MODEL_CONFIGS[key]
