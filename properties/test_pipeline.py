"""Pipeline parallelism: every split of a model's layers into stages plans clearly and serves (finding F15).

``test_pipeline_split_plans_clearly_and_serves`` (:mod:`kvverify.props.pipeline`): on the
reference, which mirrors 0.33.0's ``get_kv_cache_configs``, and on ``--target vllm``, where the
release's own planner plans the stages and its ``Scheduler`` runs the request. A strict known
failure (F15: a stage without KV cache layers makes planning raise ``ZeroDivisionError``) on
both, passing under the fix option / with the F15 patch (``--fix kv_less_stage_planned``).
``tests/test_pipeline_stages.py`` shows it catching the defect and a planted mutation.
"""

from kvverify import fixes
from kvverify.props.findings import known_failure
from kvverify.props.pipeline import test_pipeline_split_plans_clearly_and_serves as _split
from kvverify.targets import Feature, require

test_pipeline_split_plans_clearly_and_serves = known_failure(_split)


def test_pipeline_split_plans_clearly_and_serves_under_fix(target) -> None:
    """Under the proposed fix (a stage without KV cache layers planned as holding none) it passes."""
    require(target, Feature.FIX_OPTIONS)
    with fixes.enabled("kv_less_stage_planned"):
        _split(target=target)
