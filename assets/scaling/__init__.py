"""Partition scaling from the platform: the Spark work of a scaling plan (:mod:`assets.scaling.migrate`), the
stages that talk to Kafka directly (:mod:`assets.scaling.stages`) and the switch of the platform spec to the new
generation (:mod:`assets.scaling.spec_file`). The plan and the pure steps are the runtime's library,
:mod:`streaming.scaling`."""
