"""Named on/off switches held in a context variable: the machinery of flaws and fixes.

:mod:`kvverify.flaws` (bug-zoo flaws) and :mod:`kvverify.fixes` (proposed fixes for
findings) are each one :class:`Switches` over their catalogue. A switch is on for the
extent of a ``with enabled(...)`` block, or for the rest of a context (``set_global``,
what ``pytest --flaw`` / ``--fix`` use); a context variable keeps threads and Hypothesis
examples apart. An unknown name is a :class:`~kvverify.errors.ConfigError` naming the field.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator, Mapping

from kvverify.errors import ConfigError


class Switches:
    """The switches named in ``catalog`` (off by default); ``field`` names them in errors."""

    def __init__(self, field: str, catalog: Mapping[str, object]) -> None:
        self.field = field
        self.catalog = catalog
        self._active: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
            f"kvverify_{field}s", default=frozenset())

    def check_name(self, name: str) -> str:
        """``name`` if it is catalogued, else a ``ConfigError`` listing the known ones."""
        if name not in self.catalog:
            raise ConfigError(self.field, name, f"unknown {self.field}; known: {', '.join(self.catalog)}")
        return name

    def is_on(self, name: str) -> bool:
        """Whether switch ``name`` is on in the current context (an unknown name is an error:
        a misspelled switch would otherwise be silently off)."""
        if name in self._active.get():
            return True
        if name not in self.catalog:  # check_name's test, inlined: this runs on every scheduler step
            self.check_name(name)
        return False

    def active(self) -> frozenset[str]:
        """The switches on in the current context."""
        return self._active.get()

    @contextlib.contextmanager
    def enabled(self, *names: str) -> Iterator[None]:
        """Switch ``names`` on (in addition to those already on) for the extent of a ``with`` block."""
        token = self._active.set(self._active.get() | frozenset(self.check_name(n) for n in names))
        try:
            yield
        finally:
            self._active.reset(token)

    @contextlib.contextmanager
    def only(self, *names: str) -> Iterator[None]:
        """Exactly ``names`` on (nothing inherited) for the extent of a ``with`` block."""
        token = self._active.set(frozenset(self.check_name(n) for n in names))
        try:
            yield
        finally:
            self._active.reset(token)

    def set_global(self, names: Iterable[str]) -> None:
        """Switch exactly ``names`` on for the rest of this context."""
        self._active.set(frozenset(self.check_name(n) for n in names))
