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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def steps(out: str) -> list[list[str]]:
    """The commands, writing their run folders under ``out`` (relative to the repository root).
    The simulated models are the main job's own: each run retrains them (train.overwrite=true)."""
    return [
        ["bench/bench_feedback_loop.py", "--seeds", "0"],
        ["run.py", "-m", "stage=sweep,train,evaluate", "op=fwd,bwd_data,bwd_weight", "train.overwrite=true",
         f"hydra.sweep.dir={out}/simulated"],
        ["run.py", "stage=predict", "problem=convbfp16 -n 16 -c 256 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1",
         f"hydra.run.dir={out}/predict"],
    ]


def outputs_summary(folder: Path) -> list[str]:
    """Lines naming the reports and plots under the job's folder, by run folder."""
    lines = []
    for report in sorted(folder.rglob("report.md")):
        plots = sorted(p.name for p in report.parent.glob("*.png"))
        record = report.parent / ".hydra" / "overrides.yaml"  # what the job was (a multirun numbers its folders)
        ops = [ln[2:].strip() for ln in record.read_text().splitlines() if ln.startswith("- op=")] \
            if record.is_file() else []
        lines.append(f"  {report.relative_to(ROOT) if report.is_relative_to(ROOT) else report}"
                     + (f" ({', '.join(ops)})" if ops else "") + (f"; plots: {', '.join(plots)}" if plots else ""))
    return lines


def main() -> int:
    """Run the steps in order from the repository root; the first failure's status, else 0."""
    out = f"outputs/main_job/{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    for step in steps(out):
        print(f"\n$ python {shlex.join(step)}", flush=True)
        code = subprocess.call([sys.executable, *step], cwd=ROOT)
        if code:
            return code
    print(f"\nmain job: outputs in {out}/; evaluation reports and plots:")
    print("\n".join(outputs_summary(ROOT / out)) or "  none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
