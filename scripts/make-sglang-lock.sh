#!/usr/bin/env bash
# Make the CPU-only lock constraints/sglang-X.Y.Z.txt for one SGLang release (maintainers only;
# scripts/install-sglang-target.sh installs from the lock, offline of any resolution).
#
#   scripts/make-sglang-lock.sh X.Y.Z
#
# In a scratch venv: torch==2.13.0+cpu, then sglang==X.Y.Z --no-deps, then the ordinary
# packages SGLang's KV-cache / admission imports need (IMPORT_DEPS below), each constrained
# by SGLang's own Requires-Dist specifier where it has one (torch* excepted: the CPU build is
# deliberate). The KV modules are then imported with the two stubs (stubs/sglang-cpu) to show
# the set is complete, and `pip freeze` becomes the lock.
set -euo pipefail
VERSION="${1:?usage: make-sglang-lock.sh X.Y.Z}"
[[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?$ ]] || { echo "bad version $VERSION" >&2; exit 2; }
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${KVVERIFY_PYTHON:-python3}"
SCRATCH="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$SCRATCH")"' EXIT
IMPORT_DEPS=(numpy orjson psutil pybase64 requests packaging pillow starlette msgspec pydantic pyzmq tqdm
             IPython aiohttp dill gguf partial-json-parser setproctitle einops uvicorn fastapi transformers
             tokenizers sentencepiece compressed-tensors openai zstandard xxhash)
NODEPS=(apache-tvm-ffi xgrammar)   # SGLang's exact pins, installed without their (GPU) dependencies
"$PYTHON" -m venv "$SCRATCH"
PIP=("$SCRATCH/bin/python" -m pip --disable-pip-version-check --no-input -q)
"${PIP[@]}" install --no-deps torch==2.13.0+cpu
"${PIP[@]}" install "setuptools>=77.0.3,<81" packaging filelock fsspec jinja2 networkx sympy typing_extensions
"${PIP[@]}" install --no-deps "sglang==$VERSION"
CONS="$(dirname "$SCRATCH")/sglang-specifiers.txt"
"$SCRATCH/bin/python" - "$CONS" "${NODEPS[@]}" <<'PY' > "$(dirname "$SCRATCH")/nodeps.txt"
import importlib.metadata as md, sys
from packaging.requirements import Requirement
out, nodeps = sys.argv[1], {n.lower() for n in sys.argv[2:]}
lines, pins = [], []
for r in md.requires("sglang") or []:
    req = Requirement(r)
    if req.marker and not req.marker.evaluate({"extra": ""}):
        continue
    name = req.name.lower().replace("_", "-")
    if name.startswith("torch"):
        continue
    if name in nodeps:
        pins.append(str(req).split(";")[0])
    elif req.specifier:
        lines.append(f"{req.name}{req.specifier}")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(pins))
PY
"${PIP[@]}" install -c "$CONS" "${IMPORT_DEPS[@]}" -c <(echo "torch==2.13.0+cpu")
if [[ -s "$(dirname "$SCRATCH")/nodeps.txt" ]]; then
  "${PIP[@]}" install --no-deps -r "$(dirname "$SCRATCH")/nodeps.txt"
fi
IMPORTS='
import sglang.srt.managers.schedule_batch, sglang.srt.managers.schedule_policy, sglang.srt.managers.utils
import sglang.srt.mem_cache.radix_cache, sglang.srt.mem_cache.memory_pool
print("imports ok")'
# (releases before 0.5.1x import sgl_kernel unconditionally, from mem_cache/memory_pool_host.py and
# the quantization layers' scalar types: they fail here, and get no lock)
(cd / && PYTHONPATH="$REPO_ROOT/stubs/sglang-cpu" "$SCRATCH/bin/python" -W ignore -c "$IMPORTS")
LOCK="$REPO_ROOT/constraints/sglang-$VERSION.txt"
{
  echo "# Pinned, CPU-only install of upstream SGLang $VERSION for kvverify's \`sglang\` target."
  echo "#"
  echo "# A LOCK (Python $("$SCRATCH/bin/python" -c 'import platform; print(platform.python_version())'), Linux x86_64), made by scripts/make-sglang-lock.sh $VERSION:"
  echo "# torch 2.13.0+cpu (SGLang declares a CUDA torch; its KV-cache and admission code is plain"
  echo "# Python + torch and runs on the CPU build), sglang --no-deps, and the packages its KV-cache /"
  echo "# admission imports need, each within SGLang's own declared specifier. triton and torchvision"
  echo "# are not installed: stubs/sglang-cpu stands in for them. Installed with --no-deps."
  echo "torch==2.13.0+cpu"
  "$SCRATCH/bin/python" -m pip freeze --all | grep -vE '^(torch==|pip==)' | sort -f
} > "$LOCK.tmp"
mv "$LOCK.tmp" "$LOCK"
echo "LOCK: $LOCK ($(grep -cE '==' "$LOCK") pins)"
