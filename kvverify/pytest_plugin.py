"""The suite's pytest integration: profiles, ``--flaw NAME`` and ``--target NAME``.

``pytest properties/ --flaw null_block_not_reserved`` runs every property on the
reference with that bug-zoo flaw switched on (properties are then expected to fail);
``--target vllm`` runs them against the installed vLLM release (any supported one:
:mod:`kvverify.targets.vllm.support`) through its adapter; ``--target`` takes any name of
:data:`kvverify.targets.TARGETS` (each engine's properties run on the targets of their
engine, :func:`kvverify.targets.targets_for`). A ``--flaw`` / ``--fix`` name goes to its
engine's catalogue (:mod:`kvverify.engines`).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from kvverify import engines, exampledb, profiles
from kvverify.errors import KVVerifyError

pytest_plugins = ["kvverify.pytest_reports",  # counterexample reports for failing properties
                  "kvverify.pytest_attribution"]  # --attribute-flaws / --absorb-flaws


def _import_everything() -> None:
    """Load every kvverify module up front.

    Hypothesis draws constants from the local modules loaded so far, so a derandomized run
    would otherwise depend on which tests happened to import what before it.
    """
    import importlib
    import pkgutil

    import kvverify
    for info in pkgutil.walk_packages(kvverify.__path__, "kvverify."):
        try:
            importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 - optional extras (torch, vllm) may be missing
            pass


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvverify")
    group.addoption("--flaw", action="append", default=[], metavar="NAME",
                    help="switch a bug-zoo flaw on for the whole run (repeatable); see `kvverify zoo --list`")
    from kvverify.targets import DEFAULT_TARGET, TARGETS
    group.addoption("--target", default=os.environ.get("KVVERIFY_TARGET", DEFAULT_TARGET),
                    help=f"system under test: {' or '.join(TARGETS)} (default: {DEFAULT_TARGET}, which "
                         "runs every engine's reference)")
    group.addoption("--fix", action="append", default=[], metavar="NAME",
                    help="switch a finding's proposed fix on (repeatable; kvverify/fixes.py): the reference "
                         "runs with the fix option, --target vllm with the finding's patch applied "
                         "(reports/findings/patches/, see kvverify/targets/overlay.py)")


def pytest_configure(config: pytest.Config) -> None:
    # the profile first: settings objects built while importing inherit the loaded default;
    # its database scoped to this run's target, flaws and fixes (kvverify/exampledb.py)
    profile = config.getoption("hypothesis_profile", default=None) or profiles.default_profile()
    try:
        profiles.register_profiles(scope=exampledb.scope_for(
            config.getoption("target"), config.getoption("flaw") or [], config.getoption("fix") or []))
        profiles.check_database(profile)
    except KVVerifyError as e:
        raise pytest.UsageError(str(e)) from None
    settings.load_profile(profile)
    _configure_fixes(config)  # before anything can import vLLM: --target vllm --fix needs the overlay
    _import_everything()
    target = config.getoption("target")
    from kvverify.targets import get_engine_target, targets_for
    try:
        for name in targets_for(target).values():
            get_engine_target(name)  # an uninstalled engine is a clear error here, not in every test
    except ValueError as e:
        raise pytest.UsageError(f"--target {target}: {e}") from None
    names = config.getoption("flaw") or []
    if names:
        try:  # each engine's flaws go to its own catalogue
            engines.set_global(flaws=names)
        except ValueError as e:
            raise pytest.UsageError(str(e)) from None


def _configure_fixes(config: pytest.Config) -> None:
    """``--fix NAME``: the fix option on for the run (and in every xdist worker, which runs
    this hook too). Where vLLM is installed (``--target vllm``, and the differential, which
    runs whatever the target) the patched vLLM overlay goes first on sys.path."""
    import importlib.util

    all_names = config.getoption("fix", default=None) or []
    try:
        engines.set_global(fixes=all_names)  # each engine's fixes in its own catalogue
    except ValueError as e:
        raise pytest.UsageError(f"--fix: {e}") from None
    sglang_names = [n for n in all_names if engines.engine_of_fix(n).name == "sglang"]
    names = [n for n in all_names if engines.engine_of_fix(n).name == "vllm"]
    if sglang_names and config.getoption("target") == "sglang":
        try:
            from kvverify.targets.sglang import overlay as sglang_overlay
            sglang_overlay.activate(sglang_names)
        except ValueError as e:
            raise pytest.UsageError(f"--fix: {e}") from None
    if not names:
        return
    try:
        from kvverify.targets import overlay
        if config.getoption("target") == "vllm":
            overlay.activate(names)  # a fix without a patch is an error here
        elif importlib.util.find_spec("vllm") is not None and set(names) <= set(overlay.PATCHES):
            overlay.activate(names)  # for the differential
    except ValueError as e:
        raise pytest.UsageError(f"--fix: {e}") from None


def pytest_report_header(config: pytest.Config) -> list[str]:
    profile = config.getoption("hypothesis_profile", default=None) or profiles.default_profile()  # as configured
    lines = [f"kvverify: hypothesis profile={profile}, target={config.getoption('target')}, "
             f"database={profiles.describe_database(profile)}"]
    if engines.active_flaws():
        lines.append(f"kvverify: flaws ON: {', '.join(sorted(engines.active_flaws()))}")
    if engines.active_fixes():
        from kvverify.targets import overlay
        where = overlay.active()
        lines.append(f"kvverify: fixes ON: {', '.join(sorted(engines.active_fixes()))}"
                     + (f" (patched vLLM overlay {where})" if where else ""))
    return lines
