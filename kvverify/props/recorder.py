"""Counts examples and keeps the last failing one, for the zoo and the reports.

The last failing example is the property's keyword arguments (the target left out); a
``st.data()`` argument is replaced by what the body drew from it, by label, so the zoo's
summary shows a drawn case too (:func:`kvverify.zoo.describe_example`).
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from hypothesis.errors import UnsatisfiedAssumption


@dataclass
class Recorder:
    examples: int = 0
    first_failure_at: int | None = None
    last_failure: dict[str, Any] | None = None
    last_error: BaseException | None = None
    started_at: float = 0.0
    first_failure_seconds: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.examples, self.first_failure_at = 0, None
            self.last_failure, self.last_error = None, None
            self.started_at, self.first_failure_seconds = time.perf_counter(), None


RECORDER = Recorder()


class _DrawLog:
    """Stands in for ``st.data()``'s object in a property body and keeps what it drew, by label
    (duck-typed on its public ``draw``, as :mod:`kvverify.reports.capture` does)."""

    def __init__(self, data: Any) -> None:
        self._data = data
        self.draws: dict[str, Any] = {}

    def draw(self, strategy: Any, label: Any = None) -> Any:
        value = self._data.draw(strategy, label=label)
        self.draws[str(label) if label is not None else f"draw_{len(self.draws)}"] = value
        return value

    def __repr__(self) -> str:
        return "data(...)"


def _is_data_object(value: Any) -> bool:
    return callable(getattr(value, "draw", None)) and not isinstance(value, type)


def _failing_example(kwargs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in kwargs.items():
        if k == "target":
            continue
        if isinstance(v, _DrawLog):
            out.update(v.draws)
        else:
            out[k] = v
    return out


def recorded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a property body: count calls, remember the last failing arguments."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        RECORDER.examples += 1
        kwargs = {k: _DrawLog(v) if k != "target" and _is_data_object(v) else v for k, v in kwargs.items()}
        try:
            return fn(*args, **kwargs)
        except UnsatisfiedAssumption:
            raise  # assume() rejected the example: not a failure
        except BaseException as e:  # noqa: BLE001 - recorded, then re-raised unchanged
            if RECORDER.first_failure_at is None:
                RECORDER.first_failure_at = RECORDER.examples
                RECORDER.first_failure_seconds = time.perf_counter() - RECORDER.started_at
            RECORDER.last_failure = _failing_example(kwargs)
            RECORDER.last_error = e
            raise

    return wrapper
