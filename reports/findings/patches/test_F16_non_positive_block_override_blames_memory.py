# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F16: CacheConfig accepts a num_gpu_blocks_override of 0
or less. The override then replaces the profiled block count, and the startup
check refuses with "No available memory for the cache blocks. Try increasing
`gpu_memory_utilization`", which names neither the flag nor its value (where
the check does not count the override, BlockPool.__init__ asserts instead).

Belongs in tests/config/test_cache_config.py. Runs offline on CPU.
"""

import pytest

from vllm.config import CacheConfig


@pytest.mark.parametrize("override", [0, -1, -16])
def test_non_positive_num_gpu_blocks_override_is_refused(override: int):
    with pytest.raises(ValueError, match="num_gpu_blocks_override"):
        CacheConfig(num_gpu_blocks_override=override)


def test_positive_or_unset_num_gpu_blocks_override_is_accepted():
    assert CacheConfig().num_gpu_blocks_override is None
    assert CacheConfig(num_gpu_blocks_override=1).num_gpu_blocks_override == 1
