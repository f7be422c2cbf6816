"""stage=search: surrogate search of the legal kernel space for one problem (or each of a set)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ckheur.files import write_file
from ckheur.stages import Context, plain

OUTPUTS = ("search.json",)


def run(cfg: Any, ctx: Context) -> dict:
    """Search for the problem given as problem.<field>=..., or for every problem of `problems`."""
    from ckheur.display import format_table
    from ckheur.job import Job
    from ckheur.problems import load_problem_set
    from ckheur.sweeping.search import SearchError, SearchOptions, check_searchable, search_problem
    from ckheur.stages.common import problem_from_cfg, selector_from_cfg

    job = Job.from_config(cfg)
    check_searchable(job.family)
    options = SearchOptions(**{k: v for k, v in plain(cfg.search).items() if k != "model_dir"})
    options.check()
    selector, label = selector_from_cfg(cfg, job, cfg.search.model_dir)
    single = problem_from_cfg(cfg, job)
    problems = [single] if single is not None else load_problem_set(plain(cfg.problems), job.family, job.direction, job.dtype)
    results = []
    for p in problems:
        try:
            results.append(search_problem(selector, job.pool.kernels, p, options))
        except SearchError as e:
            results.append({"problem": p.describe(), "skipped": str(e)})
    write_file(ctx.output_dir / "search.json", json.dumps({"surrogate": label, "results": results}, indent=1))
    done = [r for r in results if "top" in r]
    print(f"search: {cfg.search.method}, budget {cfg.search.budget}, surrogate: {label}")
    if single is not None and done:
        r = done[0]
        print(f"{r['problem']}: {r['legal_kernels']} legal kernels over {len(r['search_dims'])} traits; "
              f"{r['evaluations']} model evaluations")
        print(format_table(["rank", "kernel", "pred TFLOPS"],
                           [(i + 1, t["kernel"], f"{t['pred_tflops']:.2f}") for i, t in enumerate(r["top"])]))
        if "full_pool" in r:
            f = r["full_pool"]
            print(f"full pool argmax: {f['kernel']} ({f['pred_tflops']:.2f} TFLOPS); search best reaches "
                  f"{100 * f['ratio']:.2f}% of it{' (the same kernel)' if f['found'] else ''}")
    elif done:
        cmp = [r["full_pool"] for r in done if "full_pool" in r]
        print(f"searched {len(done)} problems ({len(results) - len(done)} skipped); mean evaluations "
              f"{np.mean([r['evaluations'] for r in done]):.0f}"
              + (f"; vs full-pool argmax: found {100 * np.mean([c['found'] for c in cmp]):.1f}%, mean ratio "
                 f"{100 * np.mean([c['ratio'] for c in cmp]):.2f}%" if cmp else ""))
    for r in results:
        if "skipped" in r:
            print(f"search: skipped {r['problem']}: {r['skipped']}")
    return {"results": results}
