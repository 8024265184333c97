"""``--plot`` / ``--json FILE`` / reports write safely: never through a symlink or onto a
non-regular file, refused with exit 2 and a message *before any work*, the umask's mode, the
suffix decides the format (or is refused), the verdict printed first and each file named."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from kvverify.cli import main
from kvverify.reports.common import ReportError, atomic_write_text
from kvverify.safefiles import UnsafeOutput, check_output, write_text

SEED = ["check", "--model", "llama-3.1-8b", "--max-model-len", "512", "--num-gpu-blocks-override", "64"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*SEED, *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record whether the check planned anything (it must not, for a refused output path)."""
    import kvverify.cli.check as cli_check

    calls: list[str] = []
    real = cli_check.run_check

    def spy(*a, **k):
        calls.append("run_check")
        return real(*a, **k)

    monkeypatch.setattr(cli_check, "run_check", spy)
    return calls


def test_picture_and_json_written_with_the_umask_mode_and_named(tmp_path: Path, capsys) -> None:
    old = os.umask(0o027)
    try:
        code, out, err = run(capsys, "--plot", str(tmp_path / "p.svg"), "--json", str(tmp_path / "r.json"))
    finally:
        os.umask(old)
    assert code == 0
    assert out.index("OK: starts") >= 0  # the verdict (the table) went to stdout
    assert f"wrote the check's SVG picture to {tmp_path / 'p.svg'}" in err
    assert f"wrote the check's JSON to {tmp_path / 'r.json'}" in err
    for name in ("p.svg", "r.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o640
    assert json.loads((tmp_path / "r.json").read_text())["headline"] == "OK"
    assert (tmp_path / "p.svg").read_text().startswith("<svg")


def test_the_suffix_decides_the_format(tmp_path: Path, capsys) -> None:
    code, _, _ = run(capsys, "--plot", str(tmp_path / "p.json"))
    assert code == 0
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["runs"] and "trace" in data["runs"][0]


@pytest.mark.parametrize("name", ["x.png", "x", "x.SVG.txt", "x.pdf"])
def test_an_unknown_suffix_is_refused_before_any_work(tmp_path: Path, capsys, no_work, name: str) -> None:
    code, out, err = run(capsys, "--plot", str(tmp_path / name))
    assert code == 2 and not no_work and "suffix chooses the format" in err and ".svg" in err
    assert not (tmp_path / name).exists() and "Traceback" not in err


@pytest.mark.parametrize("flag,suffix", [("--plot", ".svg"), ("--json", ".json")])
def test_dangerous_targets_are_refused_before_any_work(tmp_path: Path, capsys, no_work, flag: str,
                                                       suffix: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / f"link{suffix}"
    link.symlink_to(victim)
    (tmp_path / f"dir{suffix}").mkdir()
    fifo = tmp_path / f"pipe{suffix}"
    os.mkfifo(fifo)
    file_parent = tmp_path / "afile"
    file_parent.write_text("x")
    cases = {link: "symbolic link", tmp_path / f"dir{suffix}": "is a directory", fifo: "not a regular file",
             file_parent / f"p{suffix}": "is not a directory", tmp_path / "missing" / f"p{suffix}": "does not exist"}
    for path, why in cases.items():
        code, _, err = run(capsys, flag, str(path))
        assert code == 2 and why in err and "Traceback" not in err, (path, err)
    assert not no_work
    assert victim.read_text() == "keep me" and link.is_symlink()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere: the directory check is moot")
def test_an_unwritable_directory_is_refused(tmp_path: Path, capsys) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    code, _, err = run(capsys, "--plot", str(locked / "p.svg"))
    assert code == 2 and "not writable" in err


def test_a_device_file_is_never_replaced() -> None:
    with pytest.raises(UnsafeOutput, match="not a regular file"):
        check_output("/dev/null", what="--plot")
    with pytest.raises(UnsafeOutput, match="not a regular file"):
        write_text("/dev/null", "x")


def test_a_symlink_that_appears_late_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    out = tmp_path / "r.json"
    check_output(out, what="--json", formats={".json": "JSON"})
    out.symlink_to(victim)  # a race between the check and the write
    with pytest.raises(UnsafeOutput, match="symbolic link"):
        write_text(out, "{}")
    assert victim.read_text() == "keep me"


def test_reports_refuse_a_symlinked_report_file(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (tmp_path / "r.json").symlink_to(victim)
    with pytest.raises(ReportError, match="symbolic link"):
        atomic_write_text(tmp_path / "r.json", "{}")
    assert victim.read_text() == "keep me"


def test_no_picture_when_no_run_is_simulated(tmp_path: Path, capsys) -> None:
    code = main(["check", "--model", "mistral-7b-v0.1", "--max-model-len", "65536", "--kv-cache-memory-bytes",
                 "20GiB", "--plot", str(tmp_path / "p.svg")])
    _, err = capsys.readouterr()
    assert code == 1 and "no picture written" in err and not (tmp_path / "p.svg").exists()
