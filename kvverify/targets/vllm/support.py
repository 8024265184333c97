"""Which vLLM releases the ``vllm`` target supports, and which one the reference mirrors: written once.

Everything else derives from these constants: the range check of :mod:`.compat`
(``unsupported_release``), the messages, the docs (``tests/test_supported_range.py`` asserts
that every ``A … B`` range in README.md and docs/ is :data:`SUPPORTED`) and the install
script, which reads them by running this file (it imports nothing, so any Python can)::

    python3 kvverify/targets/vllm/support.py pin      # 0.33.0
    python3 kvverify/targets/vllm/support.py range    # 0.19.1 … 0.33.0

A release is supported once its KV-cache API has been measured and its differences are
detected in :mod:`.compat` (``docs/vllm-target.md``, "Releases"); widen the range here then.
"""

from __future__ import annotations

import sys

#: Oldest and newest release the adapter supports (inclusive).
SUPPORTED_MIN: tuple[int, int, int] = (0, 19, 1)
SUPPORTED_MAX: tuple[int, int, int] = (0, 33, 0)
#: The release the reference mirrors (the pin: the differential compares against it).
REFERENCE_RELEASE = "0.33.0"


def dotted(version: tuple[int, ...]) -> str:
    """``(0, 19, 1)`` -> ``"0.19.1"``."""
    return ".".join(str(x) for x in version)


#: The range in words, as messages and docs write it.
SUPPORTED = f"{dotted(SUPPORTED_MIN)} … {dotted(SUPPORTED_MAX)}"

_QUERIES = {"pin": REFERENCE_RELEASE, "min": dotted(SUPPORTED_MIN), "max": dotted(SUPPORTED_MAX),
            "range": SUPPORTED}


def main(argv: list[str]) -> int:
    """Print one of :data:`_QUERIES` (for shell scripts)."""
    if len(argv) != 1 or argv[0] not in _QUERIES:
        print(f"usage: support.py {{{'|'.join(_QUERIES)}}}", file=sys.stderr)
        return 2
    print(_QUERIES[argv[0]])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))


__all__ = ["REFERENCE_RELEASE", "SUPPORTED", "SUPPORTED_MAX", "SUPPORTED_MIN", "dotted"]
