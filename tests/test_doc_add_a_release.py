"""docs/add-a-release.md names only what exists, and says what the code does.

Every ``kvverify ...`` command in it parses; every option it names belongs to ``kvverify
releases``, the per-release pytest command or the install script; every dotted ``kvverify.``
name resolves; every ``python -m`` module exists; every module of kvverify/releases/ is in its
table; the stamps, defaults, exit statuses and defect names it quotes are the code's.
(Plain paths are checked for every doc by tests/test_doc_paths.py.)
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from kvverify.cli import build_parser
from kvverify.releases import defects, suite, venvs

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "add-a-release.md"
TEXT = DOC.read_text()
INSTALL = (ROOT / "scripts" / "install-vllm-target.sh").read_text()


def _spans() -> list[str]:
    """Inline code spans, and the lines of the doc's code blocks (comments cut)."""
    blocks = re.findall(r"```sh\n(.*?)```", TEXT, flags=re.S)
    lines = [ln.split("  #", 1)[0].strip() for b in blocks for ln in b.splitlines() if ln.strip()]
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", TEXT, flags=re.S))
    return lines + inline


def _commands(prefix: str) -> list[str]:
    return [s for s in _spans() if s.startswith(prefix)]


def _sample(argv: list[str]) -> list[str]:
    return [a.replace("X.Y.Z", "0.33.0").replace("DIR", "/tmp/venvs") for a in argv]


def test_every_kvverify_command_parses() -> None:
    cmds = _commands("kvverify ")
    assert len(cmds) >= 5
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for cmd in cmds:
        argv = _sample(shlex.split(cmd)[1:])
        assert argv[0] in sub.choices, cmd  # type: ignore[operator]
        if argv[0] == "releases":
            assert parser.parse_args(argv).command == "releases"  # SystemExit (2) on an unknown option


def _releases_options() -> set[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return {o for a in sub.choices["releases"]._actions for o in a.option_strings}  # type: ignore[attr-defined]


def test_every_option_named_belongs_to_its_command(tmp_path: Path) -> None:
    run = suite.pytest_command("py", junit=tmp_path / "j", reports_dir=tmp_path, workers=2, profile="ci",
                               absorb=["x"])
    known = _releases_options() | {a.split("=", 1)[0] for a in run if a.startswith("--")} \
        | set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", INSTALL))
    named = {s.split()[0].split("=", 1)[0] for s in _spans() if s.startswith("--")}
    named |= {a for c in _commands("kvverify releases") for a in shlex.split(c) if a.startswith("--")}
    assert {"--release", "--venvs", "--reattribute", "--absorb-flaws"} <= named
    assert not named - known, f"options the doc names that no command has: {sorted(named - known)}"
    for cmd in _commands("bash scripts/install-vllm-target.sh"):
        for opt in (a for a in shlex.split(cmd) if a.startswith("--")):
            assert re.search(rf"^\s+{re.escape(opt)}\)", INSTALL, flags=re.M), f"install script has no {opt}"


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj: Any = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def test_every_dotted_name_resolves() -> None:
    names = sorted({s for s in _spans() if re.fullmatch(r"kvverify(\.\w+)+", s)})
    assert len(names) >= 15
    for name in names:
        _resolve(name)  # ImportError / AttributeError names what the doc gets wrong


def test_every_python_m_module_exists_and_takes_its_arguments() -> None:
    cmds = _commands("python -m kvverify")
    assert len(cmds) >= 2
    for cmd in cmds:
        argv = shlex.split(cmd)
        module = argv[2]
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, cmd
        source = Path(spec.origin).read_text()
        assert "__main__" in source, cmd
        for opt in (a for a in argv[3:] if a.startswith("--")):
            assert f'"{opt}"' in source, f"{module} does not read {opt}"


def test_the_table_names_every_module_of_the_package() -> None:
    modules = sorted(p.name for p in (ROOT / "kvverify" / "releases").glob("*.py") if p.name != "__init__.py")
    assert len(modules) >= 10
    missing = [m for m in modules if f"`kvverify/releases/{m}`" not in TEXT]
    assert not missing, f"kvverify/releases/ modules the how-to does not place: {missing}"
    assert "`kvverify/cli/releases.py`" in TEXT


def test_templated_paths_match_files() -> None:
    templated = set(re.findall(r"constraints/vllm-X\.Y\.Z\.txt", TEXT))
    assert templated and list((ROOT / "constraints").glob("vllm-*.txt"))


def test_stamps_defaults_statuses_and_names_are_the_codes() -> None:
    for stamp in (*venvs.STAMPS, venvs.INSTALL_INFO):
        assert f"`{stamp}`" in TEXT and stamp in INSTALL, stamp
    args = build_parser().parse_args(["releases"])
    assert (args.max_passes, args.timeout, args.workers, args.profile) == (3, 1800.0, 2, "ci")
    assert "default 3" in TEXT and "1800 s" in TEXT and "`-n 2`" in TEXT and "`ci`" in TEXT
    said = re.search(r"\* (\d) \(`kvverify\.releases\.defects\.REPLAY_DIFFERENT`\)", TEXT)
    assert said and int(said.group(1)) == defects.REPLAY_DIFFERENT
    labels = [defects.Defect("t", "[a.b] x", "", "r.json", [], reference_reproduces=True).label,
              defects.Defect("t", "[a.b] x", "", "r.json", []).label,
              defects.Defect("t", "[a.b] x", "", None, []).label,
              defects.Defect("t", "ValueError: x", "", "r.json", []).label.replace("ValueError", "...")]
    for label in labels:
        assert f"`{label}`" in TEXT, label
    for ignored in ("--ignore", "python -m kvverify.releases.suite"):
        assert ignored in TEXT
    assert "-m kvverify.releases.suite" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("marker", ["README_BEGIN", "README_END"])
def test_the_readme_markers_exist(marker: str) -> None:
    from kvverify.releases import readme
    assert getattr(readme, marker) in (ROOT / "README.md").read_text()
