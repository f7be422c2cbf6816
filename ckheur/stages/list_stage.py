"""stage=list: print the legal kernel pool and the problem set, with counts."""

from __future__ import annotations

import csv
from collections import Counter
from typing import Any

from ckheur.display import format_table
from ckheur.job import Job
from ckheur.problems import load_problem_set
from ckheur.stages import Context, plain
from ckheur.stages.common import note_available

OUTPUTS = ("kernels.csv", "problems.csv")


def _by_group(items: Any) -> str:
    counts = Counter(i.group for i in items)
    return ", ".join(f"{g}d: {counts[g]}" if isinstance(g, int) else f"{g}: {counts[g]}" for g in sorted(counts))


def run(cfg: Any, ctx: Context) -> dict:
    """Print pool and problems; write kernels.csv and problems.csv to the run's output dir."""
    job, st = Job.from_config(cfg), cfg.list
    note_available(job)
    op, arch, family, pool = job.op, job.arch, job.family, job.pool
    problems = load_problem_set(plain(cfg.problems), family, job.direction, job.dtype)
    op_choice = ctx.choices.get("op", op["direction"])
    space = f", tile_space={op['tile_space']}" if "tile_space" in op else ""
    print(f"op={op_choice} ({op['family']} {op['direction']}, {op['dtype']}{space})"
          f"  arch={arch['name']} ({arch['product']})")
    print(f"Kernel pool: {len(pool.kernels)} legal ({_by_group(pool.kernels)}); "
          f"{len(pool.rejected)} rejected by {arch['name']} rules"
          + (f"; {pool.filtered_out} removed by kernels.filter" if cfg.kernels.filter else ""))
    if not st.count_only:
        print(format_table(family.kernels.TABLE, [k.table_row() for k in pool.kernels], st.max_rows))
    if cfg.kernels.explain:
        print(f"\nRejected on {arch['name']} ({len(pool.rejected)}):")
        print(format_table(["kernel", "reason"], pool.rejected, st.max_rows) if pool.rejected else "  none")
    sh = cfg.problems.shard
    print(f"\nProblem set {cfg.problems.name}: {len(problems)} problems ({_by_group(problems)})"
          + (f", shard {sh.index} of {sh.count}" if sh.count > 1 else ""))
    if not st.count_only:
        rows = [(p.describe(), f"{p.flops / 1e9:.3f}", "x".join(str(v) for v in p.gemm(op["direction"])))
                for p in problems]
        print(format_table(["problem", "GFLOP", f"gemm G x M x N x K ({op['direction']})"], rows, st.max_rows))
    from ckheur.files import replacing

    with replacing(ctx.output_dir / "kernels.csv") as f:
        w = csv.writer(f)
        fields = list(pool.kernels[0].traits()) if pool.kernels else ["name"]
        w.writerow(fields)
        w.writerows([k.traits()[c] for c in fields] for k in pool.kernels)
    with replacing(ctx.output_dir / "problems.csv") as f:
        w = csv.writer(f)
        w.writerow(family.problems.FIELDS)
        w.writerows(p.key() for p in problems)
    return {"kernels": len(pool.kernels), "rejected": len(pool.rejected), "problems": len(problems)}
