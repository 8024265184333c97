"""Counts examples and keeps the last failing one, for the zoo and the reports."""

from __future__ import annotations

import functools
import threading

from hypothesis.errors import UnsatisfiedAssumption
import time
from dataclasses import dataclass, field
from typing import Any, Callable


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


def recorded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a property body: count calls, remember the last failing arguments."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        RECORDER.examples += 1
        try:
            return fn(*args, **kwargs)
        except UnsatisfiedAssumption:
            raise  # assume() rejected the example: not a failure
        except BaseException as e:  # noqa: BLE001 - recorded, then re-raised unchanged
            if RECORDER.first_failure_at is None:
                RECORDER.first_failure_at = RECORDER.examples
                RECORDER.first_failure_seconds = time.perf_counter() - RECORDER.started_at
            RECORDER.last_failure = {k: v for k, v in kwargs.items() if k != "target"}
            RECORDER.last_error = e
            raise

    return wrapper
