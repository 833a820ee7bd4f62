"""The quiet defaults of Brook's Spark sessions (``assets/spark/session.py``): no progress bars, errors-only driver
log, pyspark's pandas warning filtered in workers, the JVM's startup notice dropped from its stderr and nothing else."""

from __future__ import annotations

import io
import warnings

import pytest

from assets.spark.session import LOG4J2_PROPERTIES, _forward_jvm_stderr, filter_pandas_version_warning, quiet_conf


def test_quiet_conf_fills_in_what_is_unset() -> None:
    conf = quiet_conf({"spark.master": "local[2]"})
    assert conf["spark.master"] == "local[2]"
    assert conf["spark.ui.showConsoleProgress"] == "false"
    assert conf["spark.executorEnv.PYTHONWARNINGS"] == "ignore:PySpark does not yet fully support pandas:FutureWarning"
    assert conf["spark.driver.extraJavaOptions"] == f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES.as_uri()}"
    assert LOG4J2_PROPERTIES.is_file()


def test_quiet_conf_keeps_what_the_conf_sets() -> None:
    own = {"spark.ui.showConsoleProgress": "true", "spark.executorEnv.PYTHONWARNINGS": "default",
           "spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=file:/etc/mine.properties -Xss4m"}
    assert quiet_conf(own) == own
    other = quiet_conf({"spark.driver.extraJavaOptions": "-Xss4m"})["spark.driver.extraJavaOptions"]
    assert other == f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES.as_uri()} -Xss4m"


def test_the_pandas_warning_is_filtered_and_only_it() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        filter_pandas_version_warning()
        warnings.warn("PySpark does not yet fully support pandas >= 3.0.0. Some features may not work correctly.",
                      FutureWarning, stacklevel=1)
        warnings.warn("something else", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["something else"]


def test_jvm_stderr_is_forwarded_without_the_incubator_notice(capfd: pytest.CaptureFixture[str]) -> None:
    jvm = io.BytesIO(b"WARNING: Using incubator modules: jdk.incubator.vector\n"
                     b"26/11/26 10:00:00 ERROR Executor: task failed\n"
                     b"Traceback from a Python worker\n")
    _forward_jvm_stderr(jvm)
    assert capfd.readouterr().err == "26/11/26 10:00:00 ERROR Executor: task failed\nTraceback from a Python worker\n"
