"""The ``sglang`` target: an adapter over an installed SGLang release's real objects.

Every SGLang import happens lazily in :mod:`.env` (importing kvverify never imports SGLang);
:mod:`.compat` reads the release's capabilities off what imported (never a version list);
:mod:`.probes` drives the real allocators, radix cache, ``validate_input_length``,
``init_req_max_new_tokens``, ``PrefillAdder`` and ``ScheduleBatch``; :mod:`.target` is the
:class:`SglangReleaseTarget`, the :class:`~kvverify.targets.sglang_contract.SglangTarget` contract over them. Install a release with
``bash scripts/install-sglang-target.sh [--version X.Y.Z]``.
"""

from __future__ import annotations

from kvverify.targets.sglang.target import SglangReleaseTarget

__all__ = ["SglangReleaseTarget"]
