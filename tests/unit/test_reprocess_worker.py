"""What a reprocessing task does in a Spark Python worker besides the topology: where pyspark is imported from in
the preloading daemon, the garbage collector while a task runs, and the records tasks leave for one another."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pyspark

from assets.reprocess.job import _spill, _spilled, _task_collector
from streaming.batch import BatchOutput, BatchRecord


def test_the_daemon_imports_pyspark_installed_not_from_the_zips_spark_puts_first(tmp_path: Path) -> None:
    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = sorted(str(path) for path in lib.glob("*.zip"))
    assert zips, "a pip-installed pyspark ships pyspark.zip and py4j's zip"
    other = tmp_path / "other-spark.zip"  # a zip of another Spark installation stays first
    code = ("import sys; from assets.spark.worker_daemon import prefer_installed_pyspark; "
            "assert 'pyspark' not in sys.modules; prefer_installed_pyspark(); import pyspark, py4j; "
            "print(pyspark.__file__, py4j.__file__, sys.path.index(sys.argv[1]) < sys.path.index(sys.argv[2]))")
    result = subprocess.run([sys.executable, "-c", code, str(other), zips[0]], capture_output=True, text=True, check=True,
                            env={"PYTHONPATH": ":".join([str(other), *zips])},
                            cwd=Path(__file__).resolve().parents[2])
    pyspark_file, py4j_file, other_first = result.stdout.split()
    assert ".zip" not in pyspark_file and ".zip" not in py4j_file
    assert pyspark_file == pyspark.__file__
    assert other_first == "True"


def test_a_task_runs_with_the_collector_paused_and_leaves_it_as_it_found_it() -> None:
    assert gc.isenabled()
    with _task_collector():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.unfreeze()


def test_the_records_tasks_leave_read_back_equal_and_in_order(tmp_path: Path) -> None:
    outputs = [(day, BatchOutput("t", 1, 10 + n, b"k", b"v%d" % n, [("h", b"x")] if n else None, "0_1", n, 9 + n))
               for day in (0, 1) for n in range(3)]
    records = [(0, BatchRecord("f", 0, 5, 10, None, b"v", None))]
    _spill(str(tmp_path), "out", "0_1", {("t", 1): outputs, ("f", 0): records, ("e", 0): []})
    _spill(str(tmp_path), "out", "0_2", {("t", 1): outputs[:1]})
    assert list(_spilled(str(tmp_path), "out", ("t", 1))) == outputs + outputs[:1]
    assert list(_spilled(str(tmp_path), "out", ("f", 0))) == records
    assert list(_spilled(str(tmp_path), "out", ("e", 0))) == []
