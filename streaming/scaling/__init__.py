"""Partition scaling: take an application's co-partition group from M to N partitions with its state re-sharded.

- :mod:`streaming.scaling.groups`: the co-partition groups of a topology (what one partition count applies to);
- :mod:`streaming.scaling.store_keys`: per kind of store, the record key a changelog key belongs to (what decides
  its partition);
- :mod:`streaming.scaling.stream_time`: the new tasks' stream-time records;
- :mod:`streaming.scaling.in_place`: adding partitions to the existing topics (CreatePartitions), how keys move;
- :mod:`streaming.scaling.reshard`: a migration's pure steps (copy, re-shard, verify), for the Spark job;
- :mod:`streaming.scaling.plan`: the dry run's plan (a table and JSON), and the refusals.

The platform's scaling job executes a plan through these pure functions; DESIGN.md ("The platform") and issue 18
describe the whole.
"""

from streaming.scaling.errors import ScalingError
from streaming.scaling.groups import GroupTopic, ScalingGroup, scaling_groups
from streaming.scaling.plan import ScalingPlan, make_plan
from streaming.scaling.store_keys import Placement, StoreKind, StoreLayout, partition_key_function, store_layouts

__all__ = ["GroupTopic", "Placement", "ScalingError", "ScalingGroup", "ScalingPlan", "StoreKind", "StoreLayout",
           "make_plan", "partition_key_function", "scaling_groups", "store_layouts"]
