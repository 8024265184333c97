"""The ``KVTransferConfig`` that makes upstream build kvverify's scripted connector.

Upstream's factory imports ``kv_connector_module_path`` and reads ``kv_connector`` off it: the
class lives in :mod:`kvverify.targets.vllm.connector`. This module only names it, so that the
config builder (:mod:`.config`) can set the transfer config without importing the scheduler.
"""

from __future__ import annotations

from typing import Any

from kvverify.reference.connector import ConnectorScript
from kvverify.targets.vllm.env import upstream

#: the connector class name upstream's factory looks up in this module
CONNECTOR_NAME = "KVVerifyScriptedConnector"
MODULE_PATH = "kvverify.targets.vllm.connector"  #: the module holding the connector class
#: ``kv_connector_extra_config`` key naming the script state
SCRIPT_KEY = "kvverify_script"


def transfer_config(script: ConnectorScript | None, script_id: str | None) -> Any:
    """The ``KVTransferConfig`` that makes upstream build the scripted connector."""
    up = upstream()
    role = script.kv_role if script is not None else "kv_both"
    policy = script.kv_load_failure_policy if script is not None else "fail"
    return up.KVTransferConfig(kv_connector=CONNECTOR_NAME, kv_connector_module_path=MODULE_PATH,
                               kv_role=role, kv_load_failure_policy=policy,
                               kv_connector_extra_config={SCRIPT_KEY: script_id} if script_id else {})


__all__ = ["CONNECTOR_NAME", "MODULE_PATH", "SCRIPT_KEY", "transfer_config"]
