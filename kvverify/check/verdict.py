"""One voice: the check's headline, verdict sentence, exit code and per-run facts, all read
from the one result the check built (``run_check``'s dict), so the table, the JSON, the
picture and the exit status cannot disagree (``tests/test_check_voice.py`` checks them on
generated cases).

Headlines: ``OK`` (starts, and a full-length request completes: exit 0); ``REFUSED`` (vLLM
would not start: exit 1; ``REFUSED, needlessly`` when the refusing memory check is the only
reason and the request would complete on the pool); ``HANG`` (starts, and the request never
completes: exit 1); ``UNDECIDED`` (starts, but a run was not simulated: exit 1).
"""

from __future__ import annotations

from typing import Any, Mapping

EXIT_OK, EXIT_FAIL = 0, 1  # as kvverify.cli.common: 0 as expected, 1 a failure (2: bad input, never here)

HEADLINES = ("OK", "REFUSED", "REFUSED, needlessly", "HANG", "UNDECIDED")


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 token``, ``2 tokens`` (``words``: an irregular plural)."""
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def first_sentence(text: str | None) -> str:
    if not text:
        return "startup check failed"
    return text.split(". ")[0].rstrip(".")


def failing_check(r: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first startup check that refuses, or ``None``."""
    return next((c for c in r.get("startup_checks") or () if not c["passes"]), None)


def headline(r: Mapping[str, Any]) -> str:
    if r["starts"]:
        if r["servable"] is True:
            return "OK"
        return "UNDECIDED" if r["servable"] is None else "HANG"
    failing = failing_check(r)
    if r["servable"] is True and failing is not None and failing["check"] == "kv_cache_memory":
        return "REFUSED, needlessly"
    return "REFUSED"


def exit_code(r: Mapping[str, Any]) -> int:
    return EXIT_OK if headline(r) == "OK" else EXIT_FAIL


def run_outcome(run: Mapping[str, Any]) -> str:
    """How one run ended, in words (the table's run line and the picture's note start with it)."""
    if run["completed"] is True:
        return "completes"
    if run["completed"] is None:
        return ("would be preempted while alone on the pool (not simulated further)"
                if run.get("stall") == "preempted_alone" else "not simulated")
    return f"never completes ({run['stall'] or run['error']})"


def run_facts(run: Mapping[str, Any]) -> str:
    """The run line: outcome, tokens, steps (one source for the table and the picture)."""
    return (f"{run_outcome(run)}: {plural(run['prompt_tokens'], 'prompt token')} + "
            f"{plural(run['output_tokens'], 'output token')}, {plural(run['steps'], 'step')}")


def _stalled_run(r: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((run for run in r["servable_runs"] if run["completed"] is not True), None)


def verdict(r: Mapping[str, Any]) -> str:
    """The sentence under the table (and the picture's subtitle)."""
    length = r["max_model_len"]
    head = headline(r)
    hint = (f" Largest length that fits: --max-model-len {r['suggested_max_model_len']}."
            if r.get("suggested_max_model_len") else "")
    request = f"a request of {plural(length, 'token')}"
    if head == "OK":
        conc = r["max_concurrency"]
        tail = f"; vLLM would log {conc:.2f}x concurrency" if conc is not None else ""
        return (f"OK: starts, and {request} completes on the {r['usable_blocks']:,} usable blocks "
                f"({r['blocks_needed_per_request']:,} needed{tail}).")
    stalled = _stalled_run(r)
    hanging = next((t for t in r.get("traps") or () if t["stage"] == "runtime" and not t["passes"]), None)
    if head == "HANG" and stalled is None and hanging is not None:
        return (f"HANG: the startup checks pass, but {hanging['summary']}. Users would see those requests wait "
                f"forever.{hint}")
    if head in ("HANG", "UNDECIDED"):
        assert stalled is not None
        how = stalled["stall"] or stalled["error"] if stalled["completed"] is False else run_outcome(stalled)
        why = f"{stalled['split']}: {how}, running={stalled['running']}, waiting={stalled['waiting']}"
        if head == "UNDECIDED":
            return (f"UNDECIDED: starts, but whether {request} completes was not simulated ({why}); see the "
                    f"notes.{hint}")
        return (f"HANG: the startup check passes, but {request} never completes ({why}) — "
                f"{r['blocks_needed_per_request']:,} blocks needed, {r['usable_blocks']:,} usable (block 0 is "
                f"the null block). Users would see 0 tok/s.{hint}")
    failing = failing_check(r)
    assert failing is not None
    if failing["check"] != "kv_cache_memory":
        return f"REFUSED: vLLM would not start: {failing['summary']}.{hint}"
    if head == "REFUSED, needlessly":
        return (f"REFUSED, needlessly: vLLM would not start ({first_sentence(failing['message'])}), yet "
                f"{request} completes on this pool.{hint}")
    if r["num_blocks"] < 2:
        pool = (f"the pool has no usable block ({plural(max(r['num_blocks'], 0), 'block')}; block 0 is the "
                "null block)")
        return f"REFUSED: vLLM would not start: {pool}.{hint}"
    return (f"REFUSED: vLLM would not start: {request} needs {r['blocks_needed_per_request']:,} blocks, "
            f"{r['usable_blocks']:,} are usable.{hint}")
