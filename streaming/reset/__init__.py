"""Application reset: reprocess an application's input from a point in time, as Kafka Streams' reset tool, plus
what that tool leaves to its users (local state on every worker, snapshots).

- :mod:`streaming.reset.topics`: what happens to each topic, from the application's own topology;
- :mod:`streaming.reset.positions`: where inputs go (earliest, an offset, a time, a duration back from now);
- :mod:`streaming.reset.plan`: the dry run's plan (a table and JSON) and :mod:`streaming.reset.cluster` what it
  saw of the cluster (its fingerprint);
- :mod:`streaming.reset.execute`: carrying out exactly that plan, or refusing when the cluster changed;
- the reset epoch (:mod:`streaming.runtime.reset_epoch`), by which workers wipe local state older than the reset;
- who is running (:mod:`streaming.runtime.membership`): a reset refuses while any instance is alive.

``brook app reset APP`` (``streaming/cli/app.py``) and the Dagster job ``reset_<app>`` (``assets/reset/``) run it;
``platform/runbooks/reset.md`` is the runbook.
"""

from streaming.reset.errors import ResetError, StalePlanError
from streaming.reset.execute import ResetResult, execute_plan
from streaming.reset.plan import ResetPlan, make_plan
from streaming.reset.positions import ResetPosition

__all__ = ["ResetError", "ResetPlan", "ResetPosition", "ResetResult", "StalePlanError", "execute_plan", "make_plan"]
