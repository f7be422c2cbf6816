"""The main job on the embedded default (no GPU, no network): what the README's first command runs.

    python tools/main_job.py

1. The feedback loop on real data: the shipped gfx950 measurements replayed as the GPU (train on
   a third of the shapes, tune a second third with the model's top 3, retrain, evaluate on the
   last): ``bench/bench_feedback_loop.py --seeds 0``.
2. The simulated pipeline of all three directions as one multirun: sweep, train, evaluate
   (simulated data is labeled so everywhere).
3. A prediction with the shipped model for a MIOpenDriver line.

Each step is an ordinary command of the repo, printed before it runs; the job stops at the first
that fails, with its exit status.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = [
    ["bench/bench_feedback_loop.py", "--seeds", "0"],
    ["run.py", "-m", "stage=sweep,train,evaluate", "op=fwd,bwd_data,bwd_weight"],
    ["run.py", "stage=predict", "problem=convbfp16 -n 16 -c 256 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1"],
]


def main() -> int:
    """Run the steps in order from the repository root; the first failure's status, else 0."""
    for step in STEPS:
        print(f"\n$ python {shlex.join(step)}", flush=True)
        code = subprocess.call([sys.executable, *step], cwd=ROOT)
        if code:
            return code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
