"""Regression mode (``kvverify diff --base``): what did my change to vLLM break?

The same derandomized suite (``pytest properties/ --target vllm --hypothesis-profile=ci``,
the release matrix's command, :mod:`kvverify.releases.suite`) runs on a *base* vLLM (a
release, a venv, or a vLLM source tree) and on the *head* (the vLLM of the current
interpreter, or another path), and only what changed is reported:

* **new failures** — a property that passes (or skips) on the base and fails on the head,
  with its shrunk counterexample, violation, report and the zoo flaw that explains it;
* **new passes** — one that failed on the base and passes on the head;
* **known findings gone** — a strict known failure (xfail) that passes on the head: the
  change fixed a finding, and its expectation is to update.

Each change is confirmed by replaying its counterexample on the other side (one process
per side, ``kvverify replay``'s code): a head failure whose report also fails on the base
is not new (the two runs explore different examples: Hypothesis draws constants from the
local modules, and an editable checkout is local code), and is listed as such. Exit 1 on
a new failure, 0 otherwise, 2 when a side cannot run (a broken install, unknown drift).

One module per step: :mod:`.sides` (what ``--base`` / ``--head`` name), :mod:`.run` (the
suite on one side), :mod:`.compare` (what changed, confirmed by replays), :mod:`.render`
(text and JSON). The command line is :mod:`kvverify.cli.diff`.
"""
