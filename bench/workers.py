"""Two worker processes of one app against one, for Brook and for the loop (two loop processes in one group):
the stateless workload; the speed-up of each and the broker's CPU.

    .venv/bin/python bench/workers.py [--records N]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness as H
from bench import stateless
from bench.stateless import brook, loop  # noqa: F401 - the stateless sides


def main(argv: list[str] | None = None) -> int:
    with H.Run("workers", "two worker processes against one (stateless)", argv, rounds=1) as run:
        source = run.topic("in")
        ends = {source: H.load(run.bootstrap, source, H.orders(run.args.records))}
        check = stateless.verify(run.bootstrap, run.args.records)
        for _ in run.rounds():
            for kind in ("loop", "brook"):
                for processes in (1, 2):
                    label = f"{kind} x{processes}"
                    run.side(label, kind, run.cfg(f"{kind}{processes}", topics=[source], ends=ends,
                                                  out=run.topic(f"out-{kind}{processes}")),
                             run.args.records, verify=check, processes=processes)
        speedup = {kind: (run.sides[f"{kind} x2"].get("rate") or 0) / (run.sides[f"{kind} x1"].get("rate") or 1)
                   for kind in ("loop", "brook")}
        for kind, value in speedup.items():
            run.ratio(f"{kind} speed-up, 2 processes / 1", value, 1.0, None)
        run.ratio("brook speed-up / loop speed-up", speedup["brook"], speedup["loop"], 0.9)
        return run.finish()


if __name__ == "__main__":
    sys.exit(main())
