"""stage=search: surrogate search of the legal kernel space for one problem (or each of a set)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ckheur.files import write_file
from ckheur.stages import Context, StageError, plain


def search_problem(selector: Any, pool: list, problem: Any, cfg: Any) -> dict:
    """Search one problem's legal space with the selector's model; compare with the full pool."""
    from ckheur.search import METHODS, Objective, Space
    from ckheur.sim import kernel_arrays as sim_kernel_arrays

    s = cfg.search
    fam = selector.family
    group = [k for k in pool if k.group == problem.group]
    if not group:
        raise StageError(f"no kernel for {problem.describe()} in the pool")
    mask, reason = fam.kernels.support_mask(problem, fam.kernels.support_arrays(group), selector.op)
    legal = [k for k, ok in zip(group, mask) if ok]
    if not legal:
        raise StageError(reason)
    space = Space.of(legal, [c for c in fam.kernels.COLUMNS if c != "ndim"])
    feats = selector.engine.kernel_arrays(legal) if selector.engine is not None else None
    simk = sim_kernel_arrays(legal)

    def score(idx: np.ndarray) -> np.ndarray:
        f = {k: v[idx] for k, v in feats.items()} if feats is not None else None
        return selector._predict_arrays(problem, f, {k: v[idx] for k, v in simk.items()})[0]

    if s.method not in METHODS:
        raise StageError(f"search.method={s.method!r}: allowed values are {', '.join(METHODS)}")
    objective = Objective(score)
    kw = {"population": s.population, "mutation": s.mutation, "crossover": s.crossover} if s.method == "de" else {}
    METHODS[s.method](space, objective, int(s.budget), int(s.seed), **kw)
    found = sorted(objective.cache.items(), key=lambda kv: (-kv[1], kv[0]))[: int(s.top_k)]
    idx = np.array([i for i, _ in found])
    out = {"problem": problem.describe(), "method": s.method, "legal_kernels": len(legal),
           "search_dims": space.traits, "evaluations": objective.evaluations, "top": []}
    full_best = None
    if len(legal) <= int(s.full_pool_max):
        all_scores = score(np.arange(len(legal)))
        full_best = int(np.argmax(all_scores))
        idx = np.append(idx, full_best)
    _, tflops = selector._predict_arrays(problem, {k: v[idx] for k, v in feats.items()} if feats is not None else None,
                                        {k: v[idx] for k, v in simk.items()})
    out["top"] = [{"kernel": legal[i].name, "score": sc, "pred_tflops": float(tf)}
                  for (i, sc), tf in zip(found, tflops)]
    if full_best is not None:
        out["full_pool"] = {"kernel": legal[full_best].name, "pred_tflops": float(tflops[-1]),
                            "found": legal[found[0][0]].name == legal[full_best].name,
                            "ratio": float(tflops[0] / tflops[-1]) if tflops[-1] > 0 else float("nan")}
    return out


def run(cfg: Any, ctx: Context) -> dict:
    """Search for the problem given as problem.<field>=..., or for every problem of `problems`."""
    from ckheur.display import format_table
    from ckheur.kernels import enumerate_pool
    from ckheur.problems import load_problem_set
    from ckheur.stages.predict import load_selector, problem_from_cfg

    op, arch = plain(cfg.op), plain(cfg.arch)
    for name in ("top_k", "budget", "population"):
        if int(cfg.search[name]) < 1:
            raise StageError(f"search.{name}={cfg.search[name]}: must be >= 1")
    selector, label = load_selector(cfg, op, arch, cfg.search.model_dir)
    pool = enumerate_pool(op, arch, cfg.kernels.filter).kernels
    single = problem_from_cfg(cfg, op)
    problems = [single] if single is not None else load_problem_set(plain(cfg.problems), op["family"])
    results = []
    for p in problems:
        try:
            results.append(search_problem(selector, pool, p, cfg))
        except StageError as e:
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
