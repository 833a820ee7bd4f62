"""Application resets from the platform: the Dagster job ``reset_<app>`` (:mod:`assets.reset.jobs`), the records
``resets/<app>`` (:mod:`assets.reset.records`), and what a reset of an app of the platform spec needs
(:mod:`assets.reset.targets`, also used by ``brook app reset``; Dagster-free). The reset itself is the runtime's
library, :mod:`streaming.reset`."""
