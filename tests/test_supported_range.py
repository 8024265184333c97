"""The supported vLLM range and the pin are written once (``kvverify/targets/vllm/support.py``).

Python derives from the constants; the install script and the nightly workflow read the pin
from support.py;
README.md and docs/ may write the range (``A … B``), and every such mention must be the
constant; no code, script or test writes it out.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from kvverify.targets.vllm import compat, support

ROOT = Path(__file__).resolve().parents[1]
#: a range of two X.Y.Z releases written with an ellipsis ("…" or "...")
RANGE = re.compile(r"(?<![\d.])(\d+\.\d+\.\d+)\s*(?:…|\.\.\.)\s*(\d+\.\d+\.\d+)(?![\d.])")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _code() -> list[Path]:
    files = [*sorted((ROOT / "kvverify").rglob("*.py")), *sorted((ROOT / "scripts").iterdir()),
             *sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "properties").rglob("*.py")),
             ROOT / ".ci" / "run"]
    return [p for p in files if p.is_file() and p.resolve() != Path(support.__file__).resolve()]


def test_the_range_is_well_formed() -> None:
    assert support.SUPPORTED_MIN < support.SUPPORTED_MAX
    assert support.SUPPORTED_MIN <= _version(support.REFERENCE_RELEASE) <= support.SUPPORTED_MAX
    assert support.SUPPORTED == f"{support.dotted(support.SUPPORTED_MIN)} … {support.dotted(support.SUPPORTED_MAX)}"
    assert compat.SUPPORTED is support.SUPPORTED and compat.REFERENCE_RELEASE is support.REFERENCE_RELEASE


def test_every_lock_is_a_supported_release() -> None:
    locks = [_version(p.stem.removeprefix("vllm-")) for p in (ROOT / "constraints").glob("vllm-*.txt")]
    assert locks and all(support.SUPPORTED_MIN <= v <= support.SUPPORTED_MAX for v in locks)
    assert support.SUPPORTED_MIN in locks and _version(support.REFERENCE_RELEASE) in locks


def test_every_range_in_the_docs_is_the_constant() -> None:
    found = [(doc.relative_to(ROOT), n, m.group(0)) for doc in _docs()
             for n, line in enumerate(doc.read_text().splitlines(), 1) for m in RANGE.finditer(line)]
    assert found, "README / docs should state the supported range once"
    wrong = [f"{doc}:{n}: {text}" for doc, n, text in found
             if (_version(RANGE.match(text)[1]), _version(RANGE.match(text)[2]))  # type: ignore[index]
             != (support.SUPPORTED_MIN, support.SUPPORTED_MAX)]
    assert not wrong, f"ranges that are not {support.SUPPORTED}:\n" + "\n".join(wrong)


def test_no_code_writes_the_range_out() -> None:
    spelled = [f"{p.relative_to(ROOT)}:{n}" for p in _code()
               for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if RANGE.search(line)]
    assert not spelled, "the range is written out here (derive it from kvverify/targets/vllm/support.py):\n" + \
        "\n".join(spelled)


def test_scripts_read_the_pin_from_support_py() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "kvverify/targets/vllm/support.py"), "pin"],
                         capture_output=True, text=True, timeout=30, cwd="/")
    assert run.returncode == 0 and run.stdout.strip() == support.REFERENCE_RELEASE
    script = (ROOT / "scripts" / "install-vllm-target.sh").read_text()
    assert "kvverify/targets/vllm/support.py\" pin" in script
    assert not re.search(r'PINNED_VERSION="\d', script)
    nightly = (ROOT / ".github" / "workflows" / "nightly.yml").read_text()
    assert 'run_path("kvverify/targets/vllm/support.py")["REFERENCE_RELEASE"]' in nightly
