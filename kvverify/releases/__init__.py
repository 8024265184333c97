"""The release matrix (``kvverify releases``): the unmodified suite against every installed vLLM release.

For each release venv (built by ``scripts/install-vllm-target.sh --version X.Y.Z``) it runs
``python -m pytest properties/ --target vllm -n 2 --hypothesis-profile=ci`` (the same
``--ignore`` list as ``.ci/run``'s vllm step) with JUnit XML output and the release's own
report directory (``reports/releases/X.Y.Z/``), then writes ``docs/releases.md``: release x
property -> passes / FAILS (defect, shrunk counterexample, report) / known finding (xfail) /
skipped (reason), a release x defect summary, and install / run times.

Distinct defects: every failure's report is replayed on the reference, faithful and with
each bug-zoo flaw switched on, then each pair when no single flaw does; the flaw (or
``A + B`` pair) whose replay reproduces the release's violation names the defect. Later
passes re-run only the failing tests with ``--absorb-flaws <the flaws identified so far>``,
so one defect does not hide the next, until a pass identifies nothing new.

Replays: each failure's report is replayed on the release's own venv (expected exit 1), then
on the later installed releases, oldest first, until it passes (exit 0: the first release
that fixed it), one process per venv, with ``kvverify replay``'s code. A failure without a
report says why it has none.

Results are kept per release (``reports/releases/X.Y.Z/result.json``, written atomically);
``--release X`` re-runs X only, ``--render-only`` re-renders the page from them. The page's
data goes to ``docs/releases.json`` too, and the README's real-release zoo table is
generated from it.

One module per step (docs/add-a-release.md walks through them):

* :mod:`.venvs` — which release venvs there are (discovery, versions, install cost);
* :mod:`.suite` — the pytest command every release runs (the reference-only ``--ignore``
  list, shared with ``.ci/run``);
* :mod:`.junit` — reading a run's JUnit XML (outcomes, violation and counterexample lines);
* :mod:`.defects` — the defect model (:class:`~.defects.Defect`, :class:`~.defects.ReleaseResult`);
* :mod:`.explain` — naming a failure by replaying its report on the reference with each
  bug-zoo flaw (then each pair) switched on;
* :mod:`.runs` — the passes of one release (later passes absorb the flaws found so far);
* :mod:`.replays` — each report replayed on its release and on the later ones, one process per venv;
* :mod:`.store` — the per-release results (``reports/releases/X.Y.Z/result.json``);
* :mod:`.page` — ``docs/releases.md`` and its data, ``docs/releases.json``;
* :mod:`.readme` — the README's real-release zoo table, generated from that data;
* :mod:`.publish` — the one writer of those three project files.
"""
