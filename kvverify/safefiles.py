"""Files written safely: atomically, never through a symlink, never onto anything but a regular
file, with the mode the umask gives a new file (``0o666 & ~umask``, not ``mkstemp``'s 0600).

Two steps, so a command can refuse a bad output path *before* any work: :func:`check_output`
(the suffix decides the format, the parent is a writable directory, the target is absent or a
regular file and not a symlink) and :func:`write_text` (temp file in the same directory, then
``os.replace``; the target is checked again just before, so a symlink that appeared meanwhile is
replaced, never followed).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from kvverify.errors import KVVerifyError

_UMASK_LOCK = threading.Lock()


class UnsafeOutput(KVVerifyError):
    """An output path kvverify will not write (the message says why and names the path)."""


def current_umask() -> int:
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _refuse_target(path: Path, what: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise UnsafeOutput(f"{what} {path}: cannot inspect it ({e.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeOutput(f"{what} {path}: is a symbolic link; kvverify never writes through one (remove it or "
                           "choose another path)")
    if stat.S_ISDIR(st.st_mode):
        raise UnsafeOutput(f"{what} {path}: is a directory; give a file name")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeOutput(f"{what} {path}: is not a regular file (a device, pipe or socket); kvverify only "
                           "replaces regular files")


def check_output(path: str | os.PathLike[str], *, what: str, formats: Mapping[str, str] | None = None,
                 create_parent: bool = False) -> tuple[Path, str | None]:
    """Validate an output path before any work; returns it and its format (by suffix, from
    ``formats``: suffix -> format name). Raises :class:`UnsafeOutput`."""
    p = Path(path)
    fmt = None
    if formats is not None:
        suffix = p.suffix.lower()
        if suffix not in formats:
            allowed = ", ".join(f"{s} ({f})" for s, f in formats.items())
            raise UnsafeOutput(f"{what} {p}: the file's suffix chooses the format; "
                               f"{suffix or 'no suffix'} is not one: use {allowed}")
        fmt = formats[suffix]
    if p.name in ("", ".", ".."):
        raise UnsafeOutput(f"{what} {p}: give a file name")
    parent = p.parent
    if create_parent and not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UnsafeOutput(f"{what} {p}: cannot create the directory {parent} ({e.strerror})") from None
    if not parent.exists():
        raise UnsafeOutput(f"{what} {p}: the directory {parent} does not exist")
    if not parent.is_dir():
        raise UnsafeOutput(f"{what} {p}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UnsafeOutput(f"{what} {p}: the directory {parent} is not writable")
    _refuse_target(p, what)
    if p.exists() and not os.access(p, os.W_OK):
        raise UnsafeOutput(f"{what} {p}: the file exists and is not writable")
    return p, fmt


def write_text(path: str | os.PathLike[str], text: str, *, what: str = "output") -> Path:
    """Write ``text`` to ``path`` atomically with the umask's mode; never through a symlink or
    onto a non-regular file (:class:`UnsafeOutput`). Creates missing parent directories."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UnsafeOutput(f"{what} {p}: cannot create the directory {p.parent} ({e.strerror})") from None
    _refuse_target(p, what)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as e:
        raise UnsafeOutput(f"{what} {p}: cannot write in {p.parent} ({e.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())
        _refuse_target(p, what)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return p
