"""A release's own requirements, for an install without a lock (scripts/install-vllm-target.sh).

    <venv>/bin/python scripts/vllm_metadata_requirements.py OUT_DIR

Run in a venv where ``vllm==X.Y.Z`` is installed with ``--no-deps``. Reads vLLM's
``Requires-Dist`` (markers evaluated for this interpreter, no extras) and writes:

* ``OUT_DIR/requirements.txt`` — every requirement with vLLM's own specifier, except
  the GPU stack and the packages below; installed with dependency resolution;
* ``OUT_DIR/nodeps.txt`` — :data:`NO_DEPS` with vLLM's specifiers; their versions are then
  chosen by pip's resolver *together* (a dry run with dependencies,
  ``--pick-nodeps REPORT``: an ``xgrammar`` that needs a newer ``apache-tvm-ffi`` than vLLM
  pins is never picked) and installed ``--no-deps`` (their own dependencies pull triton and
  a CUDA torch), as every lock does;
* ``OUT_DIR/left-out.txt`` — what was left out and why, one a line (the script prints it).

The rule is the locks' rule (``constraints/vllm-0.33.0.txt``'s header): torch is the CPU
build installed before, never re-resolved; the GPU stack (:data:`GPU_STACK`, and every
``nvidia-*`` / ``cuda-*`` distribution) is left out; everything else is what the release
asks for.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from pathlib import Path

#: the GPU stack: CUDA kernels, GPU media decoders, the torch family (torch is installed first,
#: the CPU build) and the JIT compilers the CPU KV-cache code never loads
GPU_STACK = frozenset({
    "torch", "torchaudio", "torchvision", "torchcodec", "triton", "xformers", "numba",
    "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "pynvvideocodec", "tilelang",
    "nvtx", "quack-kernels", "tokenspeed-mla", "humming-kernels", "fastsafetensors", "instanttensor",
    "deep-gemm", "cupy", "ray", "intel-extension-for-pytorch", "mooncake-transfer-engine",
})
#: installed at vLLM's exact pin without their dependencies (which pull triton / a CUDA torch)
NO_DEPS = frozenset({"xgrammar", "apache-tvm-ffi"})


def canon(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def gpu_only(name: str) -> bool:
    n = canon(name)
    return n in GPU_STACK or n.startswith(("nvidia-", "cuda-", "cupy-"))


def split_requirements(requires: list[str]) -> tuple[list[str], list[str], list[str]]:
    """``(resolved, no_deps, left_out)`` from vLLM's ``Requires-Dist`` lines."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # a fresh venv: pip's own copy
        from pip._vendor.packaging.requirements import Requirement

    resolved, nodeps, left = [], [], []
    for line in requires:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        spec = f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}{req.specifier}"
        if gpu_only(req.name):
            left.append(f"{spec}: the GPU stack (the CPU KV-cache code never imports it)")
        elif canon(req.name) in NO_DEPS:
            nodeps.append(f"{req.name}{req.specifier}")
        else:
            resolved.append(spec)
    return resolved, nodeps, left


def pick_nodeps(report: Path, out: Path) -> int:
    """``--pick-nodeps REPORT OUT``: from a ``pip install --dry-run --report`` of nodeps.txt, the
    version pip chose for each :data:`NO_DEPS` package, as exact pins (one a line) in OUT."""
    import json

    chosen = {canon(item["metadata"]["name"]): item["metadata"]["version"]
              for item in json.loads(report.read_text()).get("install", [])}
    pins = [f"{name}=={chosen[name]}" for name in sorted(NO_DEPS) if name in chosen]
    out.write_text("".join(f"{p}\n" for p in pins))
    print(f"resolved together: {', '.join(pins) or 'none'}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--pick-nodeps":
        return pick_nodeps(Path(argv[1]), Path(argv[2]))
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    try:
        requires = md.requires("vllm") or []
    except md.PackageNotFoundError:
        print("vllm is not installed in this venv", file=sys.stderr)
        return 1
    resolved, nodeps, left = split_requirements(requires)
    (out / "requirements.txt").write_text("".join(f"{r}\n" for r in resolved))
    (out / "nodeps.txt").write_text("".join(f"{r}\n" for r in nodeps))
    (out / "left-out.txt").write_text("".join(f"{r}\n" for r in left))
    print(f"{len(resolved)} requirements resolved from vLLM's metadata, {len(nodeps)} without their "
          f"dependencies ({', '.join(nodeps) or 'none'}), {len(left)} of the GPU stack left out")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
