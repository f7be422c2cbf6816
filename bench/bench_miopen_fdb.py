#!/usr/bin/env python
"""MIOpen find-db: import speed and memory, and how well a model picks MIOpen's solver.

1. Import: `stage=import` of each find-db file in a fresh process: wall time and peak memory
   (targets: a 175k-problem file in <= 20 s and <= 2 GB).
2. Solver choice, per direction (and data type), on the imported datasets: a seeded random 80/20
   split by problem (TunaNet's kind of split) and a split grouped by geometry ignoring the batch
   size (the same layer at another batch never on both sides). Training (`relative` objective,
   censored solvers labeled 0, early stopping on 15% of the training problems) is timed; the
   held-out problems are scored in MIOpen's terms and ours, in both protocols (open: choose
   among every solver of the arch's table; listed: among the listed ones only), see
   ckheur.metrics.censored_choice_report.
   Targets (MI300X, random split, open protocol): top-1 >= 93%, mean efficiency >= 99%, P10 >= 97%.
   With MIOpen's TunaNet files (--tunanet, default ../shared/data/miopen_tunanet), TunaNet is
   scored beside the model on the same held-out problems, those in its domain, and a table of
   both ends the output.

3. With --tunanet-of ARCH (e.g. gfx908, a GPU no file here measured): that GPU's TunaNet on each
   file's problems in its domain, labeled as another GPU's measurements: how often its first pick
   is a solver the file lists (beside chance: a uniform pick among its solvers, and beside the same
   network fed permuted inputs) and how often its first listed pick is the file's fastest. Prints
   the table and stops (no import, no training).

    python bench/bench_miopen_fdb.py --tunanet-of gfx908 --files ../shared/data/miopen_fdb/gfx90a68.HIP.fdb.txt.bz2
    python bench/bench_miopen_fdb.py [--files F ...] [--directions fwd bwd_data bwd_weight] [--dtypes fp16]
                               [--leaves N] [--trees N] [--lr X] [--min-data N] [--pool-dtypes] [--cross]

4. With --applicability MODE [MODE ...] (none, rules, listed, both: op.applicability): each shipped
   bundle's picks when it ranks only the solvers the mode leaves (rules: MIOpen's IsApplicable rules
   ckheur carries; listed: the kinds of problem its own file lists each solver for), on its own file
   (in-sample) and on the other GPU's (keys its file lists too, and the others): the unlisted-pick
   rate (the open pick is a solver the file does not list), open and listed top-1 / efficiency.
   Prints the table and stops.

    python bench/bench_miopen_fdb.py --applicability none rules listed both --dtypes fp32 fp16 \
        --files ../shared/data/miopen_fdb/gfx942130.HIP.fdb.txt.bz2 ../shared/data/miopen_fdb/gfx90a68.HIP.fdb.txt.bz2

   The model settings default to ``conf/model/relative.yaml`` (15 leaves, at most 1,000 trees:
   MIOpen's default recipe when the documented figures were measured; ``relative_wide`` is now);
   the flags override them.

5. With --budgets N [N ...] (random split): quality per microsecond. The model trained on the split
   is cut at each tree count (and kept whole: early stopping's count); each cut is scored on the
   held-out problems, then timed as the shipped bundle of its direction, dtype and GPU would run it
   (its folder with this model in place, exported and built: C ``ckheur_select`` p50 over distinct
   problems, the compiled and the Python ``Selector.rank``, as bench/bench_compiled_selector.py),
   beside the shipped bundle itself, timed the same way (needs a C compiler).

    python bench/bench_miopen_fdb.py --splits random --budgets 50 100 200 400 --leaves 63 --lr 0.25 \
        --files ../shared/data/miopen_fdb/gfx942130.HIP.fdb.txt.bz2 --directions fwd --dtypes fp16
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "miopen_fdb"
FILES = [SHARED / "gfx942130.HIP.fdb.txt.bz2", SHARED / "gfx90a68.HIP.fdb.txt.bz2"]
TUNANET = SHARED.parent / "miopen_tunanet"
sys.path.insert(0, str(ROOT))  # this checkout's ckheur, not an installed one


def tunanet_on_other_gpu(arch: str, folder: str, files: list, seed: int) -> None:
    """``arch``'s TunaNet on each file's in-domain problems (another GPU's measurements): first
    pick listed (beside chance and permuted inputs) and first listed pick fastest, per direction and dtype."""
    from ckheur.integrations.miopen.find_db import arch_from_name, read_find_db
    from ckheur.integrations.miopen.tunanet import first_pick_rates, load_tunanet

    net = load_tunanet(folder, arch)
    print(f"TunaNet {arch} ({net.path.name}: {len(net.features)} inputs, {len(net.solvers)} solvers; the file embeds "
          f"{'no' if np.isnan(net.check()) else 'a'} reference output)")
    perm = np.random.default_rng(seed).permutation(len(net.features))
    for f in map(Path, files):
        other, _ = arch_from_name(f, ["gfx90a", "gfx942", "gfx950"])
        fdb = read_find_db(f)
        rates, shuffled = first_pick_rates(net, fdb), first_pick_rates(net, fdb, perm)
        print(f"\n{arch}'s TunaNet scored on {f.name}: measured on {other}, ANOTHER GPU (not {arch}'s own timings)")
        print(f"{'direction':10s} {'dtype':5s} {'problems':>8s} {'1st pick listed':>15s} {'chance':>7s} "
              f"{'permuted inputs':>15s} {'listed top-1':>12s}")
        for (direction, dtype), r in sorted(rates.items()):
            print(f"{direction:10s} {dtype:5s} {r['problems']:8d} {100 * r['first_listed']:14.1f}% "
                  f"{100 * r['chance_listed']:6.1f}% {100 * shuffled[(direction, dtype)]['first_listed']:14.1f}% "
                  f"{100 * r['listed_top1']:11.1f}%")


def import_file(path: Path, data: Path) -> dict:
    """stage=import in a fresh process: wall seconds and the child's peak RSS."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, str(ROOT / "run.py"), "stage=import", f"import.path={path}",
                        f"paths.data={data}", f"hydra.run.dir={data / 'run' / path.stem}"],
                       capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if r.returncode:
        sys.exit(f"import of {path} failed:\n{r.stderr[-3000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = [ln for ln in r.stdout.splitlines() if ln.startswith("import: done")]
    stage_s = done[-1].split()[-1] if done else "none: already imported (give a fresh --data to time it)"
    return {"file": path.name, "wall_s": round(wall, 1), "stage_s": stage_s,
            "peak_gib": round(max(peak, before) / 2**20, 2), "log": r.stdout}


def split_groups(table, kind: str) -> np.ndarray:
    """Per problem, its group for the split: itself (random) or its geometry without N."""
    if kind == "random":
        return np.arange(len(table.problems))
    keys = [tuple(v for f, v in p.to_dict().items() if f != "N") for p in table.problems]
    index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    return np.array([index[k] for k in keys])


def split_rows(table, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows to fit on, rows for early stopping (15% of the training problems), held-out rows (20%)."""
    from sklearn.model_selection import GroupShuffleSplit

    groups = split_groups(table, kind)[table.pid]
    tr, te = next(GroupShuffleSplit(n_splits=1, test_size=0.2, random_state=seed).split(table.X, groups=groups))
    inner_tr, inner_va = next(GroupShuffleSplit(n_splits=1, test_size=0.15, random_state=seed + 1)
                              .split(tr, groups=groups[tr]))
    return np.sort(tr[inner_tr]), np.sort(tr[inner_va]), te


def score(table, booster, rows: np.ndarray) -> dict:
    """The booster's picks on some problems' rows, in MIOpen's terms and ours."""
    from ckheur.metrics import censored_choice_report
    from ckheur.threads import predict

    scores = predict(booster, table.X[rows], num_iteration=booster.best_iteration or None)
    time_ms = np.where(table.tflops[rows] > 0, table.flops_over_tflops[rows], np.nan)
    return censored_choice_report(table.pid[rows], scores, time_ms)


def train(table, fit_rows, valid_rows, model: dict, objective: str, seed: int, init_model=None):
    """One booster with early stopping (after ``init_model``'s trees, when given), and its training seconds."""
    from ckheur.learn.training import fit

    cat = [table.feature_names.index(c) for c in ("solver", "algorithm", "implementation", "dtype")
           if c in table.feature_names]
    t0 = time.perf_counter()
    booster = fit(table, fit_rows, model, objective, cat, seed, model["max_trees"], valid_rows=valid_rows,
                  init_model=init_model)
    return booster, time.perf_counter() - t0


def choice(table, model: dict, kind: str, seed: int, objective: str = "relative", tunanet=None) -> dict:
    """Train on 80% of the problems (by split kind), score the other 20%; with ``tunanet`` (a
    ``TunaNetRanker``), also TunaNet and the model on the held-out problems in TunaNet's domain."""
    fit_rows, valid_rows, te = split_rows(table, kind, seed)
    booster, train_s = train(table, fit_rows, valid_rows, model, objective, seed)
    out = {"split": kind, "train_s": round(train_s, 1),
           "trees": int(booster.best_iteration or booster.current_iteration()),
           "train_problems": int(len(np.unique(table.pid[np.concatenate([fit_rows, valid_rows])]))),
           **score(table, booster, te)}
    if tunanet is not None:
        out["tunanet"] = tunanet_beside(table, booster, te, tunanet)
    out["booster"], out["held_out_rows"] = booster, te
    return out


def budget_curve(table, booster, rows: np.ndarray, budgets: list[int], shipped: Path, problems: int) -> list[dict]:
    """Quality per microsecond: ``booster`` cut at each budget (and whole) scored on ``rows``, each
    cut timed in the shipped bundle's folder (``shipped``, its model replaced), and the shipped
    bundle as it is, timed the same way (its quality is not on this split: it trained on all of it)."""
    import shutil
    import types

    from bench_compiled_selector import bundle_problems, measure

    from ckheur.learn.bundle import MODEL, write_model
    from ckheur.metrics import censored_choice_report
    from ckheur.c_export.compiled import find_compiler
    from ckheur.threads import predict

    cc = find_compiler()
    if cc is None:
        raise SystemExit("--budgets: no C compiler to time the cuts with")
    whole = int(booster.best_iteration or booster.current_iteration())
    cuts = sorted({min(b, whole) for b in budgets} | {whole})
    timing = types.SimpleNamespace(repeat=20, runs=3, rounds=3)
    time_ms = np.where(table.tflops[rows] > 0, table.flops_over_tflops[rows], np.nan)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        probs, fields = bundle_problems(shipped, problems)
        out.append({"trees": "shipped", **measure(shipped, probs, fields, tmp, cc, timing)})
        for n in cuts:
            rep = censored_choice_report(table.pid[rows], predict(booster, table.X[rows], num_iteration=n), time_ms)
            cut = tmp / f"{shipped.name}_{n}"
            shutil.copytree(shipped, cut)
            written = write_model(cut, MODEL, booster, n)  # as a bundle stores it (replacing a .gz one)
            out.append({"cut": n, **measure(cut, probs, fields, tmp, cc, timing), "open": rep["open"],
                        "size_kb": written.stat().st_size / 1024})
    return out


def print_curve(name: str, curve: list[dict]) -> None:
    """The --budgets table of one dataset."""
    print(f"\nquality per microsecond, {name} (held-out 20%, open protocol; C / compiled / Python: p50 over "
          f"{'distinct problems'}):")
    print("| trees | model file | C us | compiled us | Python us | top-1 | mean eff | eff lost per C us saved |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    whole = curve[-1]
    for c in curve:
        if "cut" not in c:
            print(f"| {c['trees']} (shipped, all data) | | {c['c_us']:.1f} | {c['compiled_us']:.1f} | {c['py_us']:.0f} "
                  f"| | | |")
            continue
        o, w = c["open"], whole["open"]
        saved = whole["c_us"] - c["c_us"]
        lost = 100 * (w["efficiency"]["mean"] - o["efficiency"]["mean"])
        rate = f"{lost / saved:.4f}" if saved > 0 else ""
        print(f"| {c['cut']} | {c['size_kb']:.0f} KB | {c['c_us']:.1f} | {c['compiled_us']:.1f} | {c['py_us']:.0f} | "
              f"{100 * o['top1']:.1f}% | {100 * o['efficiency']['mean']:.2f}% | {rate} |", flush=True)


def tunanet_beside(table, booster, rows: np.ndarray, ranker) -> dict:
    """The model's picks and TunaNet's on the same held-out problems, those in TunaNet's domain."""
    from ckheur.metrics import censored_choice_report
    from ckheur.threads import predict
    from ckheur.integrations.miopen.tunanet import in_domain

    held = np.unique(table.pid[rows])
    inside = [int(i) for i in held if in_domain(table.problems[i], ranker.dtype, ranker.net.arch)]
    keep = rows[np.isin(table.pid[rows], inside)]
    position = np.full(len(table.problems), -1)
    position[inside] = np.arange(len(inside))
    pid = table.pid[keep]
    tn = ranker.score_matrix([table.problems[i] for i in inside])[position[pid], table.kid[keep]]
    # the table's kernels must be the ranker's, in the same order, for kid to index both
    assert [k.name for k in ranker.kernels] == [k.name for k in table.kernels]
    time_ms = np.where(table.tflops[keep] > 0, table.flops_over_tflops[keep], np.nan)
    model = predict(booster, table.X[keep], num_iteration=booster.best_iteration or None)
    return {"problems": len(inside), "held_out_problems": int(len(held)),
            "model": censored_choice_report(pid, model, time_ms), "TunaNet": censored_choice_report(pid, tn, time_ms)}


def pooled_choice(tables: dict, model: dict, kind: str, seed: int, objective: str = "relative") -> dict:
    """One model for every dtype of a direction (the dtype a categorical feature), trained on the
    union of each dtype's training split of :func:`choice` and scored on each dtype's held-out part."""
    from ckheur.learn.training import Table

    dtypes = list(tables)
    splits = {d: split_rows(tables[d], kind, seed) for d in dtypes}
    row0 = np.cumsum([0] + [len(tables[d].X) for d in dtypes])
    pid0 = np.cumsum([0] + [len(tables[d].problems) for d in dtypes])
    cat = lambda get: np.concatenate([get(tables[d]) for d in dtypes])  # noqa: E731
    X = np.hstack([cat(lambda t: t.X), np.concatenate([np.full(len(tables[d].X), i, dtype=np.float32)
                                                       for i, d in enumerate(dtypes)])[:, None]])
    first = tables[dtypes[0]]
    pooled = Table(X=X, tflops=cat(lambda t: t.tflops),
                   pid=np.concatenate([tables[d].pid + pid0[i] for i, d in enumerate(dtypes)]),
                   kid=cat(lambda t: t.kid), problems=[p for d in dtypes for p in tables[d].problems],
                   kernels=first.kernels, feature_names=[*first.feature_names, "dtype"], full=cat(lambda t: t.full))
    pooled.flops_over_tflops = cat(lambda t: t.flops_over_tflops)
    shifted = lambda j: np.concatenate([splits[d][j] + row0[i] for i, d in enumerate(dtypes)])  # noqa: E731
    booster, train_s = train(pooled, shifted(0), shifted(1), model, objective, seed)
    return {"split": kind, "train_s": round(train_s, 1),
            "trees": int(booster.best_iteration or booster.current_iteration()),
            "per_dtype": {d: score(pooled, booster, splits[d][2] + row0[i]) for i, d in enumerate(dtypes)},
            "all": score(pooled, booster, shifted(2))}


def _rows(table, rows: np.ndarray):
    """The table restricted to some rows (problems renumbered)."""
    from ckheur.learn.training import Table

    used, pid = np.unique(table.pid[rows], return_inverse=True)
    sub = Table(X=table.X[rows], tflops=table.tflops[rows], pid=pid, kid=table.kid[rows],
                problems=[table.problems[i] for i in used], kernels=table.kernels, feature_names=table.feature_names,
                full=np.ones(len(used), dtype=bool))
    sub.flops_over_tflops = table.flops_over_tflops[rows]
    return sub


def cross_gpu(a, b, model: dict, seed: int, bundle=None) -> dict:
    """Train on GPU a's whole table (or take ``bundle``, a Selector of the bundle shipped for a),
    pick on GPU b's problems that a lists too (solvers of both tables only); beside it, a's own
    fastest solver as the pick on b: a lookup of the training file."""
    from ckheur.metrics import censored_choice_report
    from ckheur.learn.training import fit
    from ckheur.threads import predict

    common = {k.name for k in a.kernels} & {k.name for k in b.kernels}
    keep_a = np.flatnonzero(np.isin([a.kernels[i].name for i in a.kid], list(common)))
    keys_a = {p.key() for p in a.problems}
    b_shared = np.array([b.problems[i].key() in keys_a for i in b.pid])
    keep_b = np.flatnonzero(b_shared & np.isin([b.kernels[i].name for i in b.kid], list(common)))
    ta, tb = _rows(a, keep_a), _rows(b, keep_b)
    time_b = np.where(tb.tflops > 0, tb.flops_over_tflops, np.nan)
    if bundle is None:
        cat = [ta.feature_names.index(c) for c in ("solver", "algorithm", "implementation")]
        booster = fit(ta, np.arange(len(ta.X)), model, "relative", cat, seed, int(model["cross_trees"]))
        model_scores = predict(booster, tb.X)
    else:  # the shipped bundle's own ranking (its remembered answers included) of b's problems
        by_problem = []
        for prob in tb.problems:
            ks, sc, _ = bundle.scores(prob)
            by_problem.append(dict(zip((k.name for k in ks), sc)))
        # a solver the bundle does not rank for the problem is never its pick (-inf)
        model_scores = np.array([by_problem[tb.pid[r]].get(tb.kernels[tb.kid[r]].name, -np.inf)
                                 for r in range(len(tb.pid))])
    model_rep = censored_choice_report(tb.pid, model_scores, time_b)
    # a's measurement as the score: its fastest listed solver first, its censored ones last
    pair = lambda t, r: (t.problems[t.pid[r]].key(), t.kernels[t.kid[r]].name)  # noqa: E731
    time_a = {pair(ta, r): ta.flops_over_tflops[r] for r in range(len(ta.pid))}
    score = np.nan_to_num(-np.array([time_a.get(pair(tb, r), np.inf) for r in range(len(tb.pid))]), nan=-1e30)
    files_rep = censored_choice_report(tb.pid, score, time_b)
    return {"solvers_both": len(common), "shared_problems": int(len(tb.problems)), "model": model_rep,
            "other_file": files_rep}


def bundle_scores(bundle, table, problems: np.ndarray, fallback=None) -> dict[int, dict]:
    """The bundle's scores of some problems of the table (by problem id), by solver name: the
    solvers it ranks for each, as its ``op.applicability`` keeps them (a screen applies after
    that, as in use); where it keeps none, ``fallback``'s scores (a selector keeping every solver)."""
    from ckheur.families.problem_base import ProblemError

    out = {}
    for i in problems:
        try:
            ks, sc, _ = bundle.scores(table.problems[i])
        except ProblemError:
            if fallback is None:
                raise
            ks, sc, _ = fallback.scores(table.problems[i])
        out[int(i)] = dict(zip((k.name for k in ks), sc))
    return out


def scored_report(table, scores: dict[int, dict], rows: np.ndarray) -> dict:
    """The picks of :func:`bundle_scores` on some of the table's rows (a solver not scored for
    its problem is never the pick), in MIOpen's terms and ours."""
    from ckheur.metrics import censored_choice_report

    sc = np.array([scores[int(table.pid[r])].get(table.kernels[table.kid[r]].name, -np.inf) for r in rows])
    time_ms = np.where(table.tflops[rows] > 0, table.flops_over_tflops[rows], np.nan)
    return censored_choice_report(table.pid[rows], sc, time_ms)


def applicability_figures(load, own, other, modes: list[str], max_problems: int, seed: int) -> dict:
    """Unlisted picks, open and listed protocols of a shipped bundle per ``op.applicability`` mode
    (``load(mode, only)``: the bundle's selector in that mode, ranking only the solvers ``only``
    names when given): on its own training file (in-sample) and on the other GPU's file (its keys
    the training file lists too, and the others; there the selector ranks only solvers of both
    tables, as it would on a GPU with fewer solvers); at most ``max_problems`` problems of each
    (a seeded sample; every unseen key of the other file is kept)."""
    rng = np.random.default_rng(seed)
    common = {k.name for k in own.kernels} & {k.name for k in other.kernels}
    keys_own = {p.key() for p in own.problems}
    out = {}
    for label, tab, train_keys in (("in-sample", own, None), ("other GPU", other, keys_own)):
        only = None if train_keys is None else common
        selectors = {mode: load(mode, only) for mode in {*modes, "none"}}
        seen = np.array([train_keys is None or p.key() in train_keys for p in tab.problems])
        sample = np.flatnonzero(seen)
        if len(sample) > max_problems:
            sample = np.sort(rng.choice(sample, max_problems, replace=False))
        chosen = np.zeros(len(tab.problems), dtype=bool)
        chosen[sample] = True
        chosen |= ~seen
        solvers = {k.name for k in tab.kernels} if only is None else only
        rows = np.flatnonzero(np.isin([tab.kernels[i].name for i in tab.kid], list(solvers)) & chosen[tab.pid])
        scores = {mode: bundle_scores(selectors[mode], tab, np.flatnonzero(chosen), selectors["none"])
                  for mode in modes}
        splits = {"all": rows} if train_keys is None else \
            {"seen keys": rows[seen[tab.pid[rows]]], "unseen keys": rows[~seen[tab.pid[rows]]]}
        out[label] = {split: {mode: scored_report(tab, scores[mode], r) for mode in modes}
                      for split, r in splits.items() if len(r)}
    return out


def load_table(data: Path, arch: str, direction: str, dtype: str, name: str):
    from ckheur.data.dataset import read_dataset
    from ckheur.families.engines import get_engine
    from ckheur.kernels import enumerate_pool
    from ckheur.learn.training import build_table
    from ckheur.stages import compose_config, plain

    cfg = compose_config([f"op=miopen/{direction}", f"arch={arch}", f"op.dtype={dtype}", "model=relative"])
    op, arch_cfg = plain(cfg.op), plain(cfg.arch)
    df = read_dataset(data / f"miopen_{direction}_{dtype}_{arch}" / f"{name}.parquet")
    tb = build_table(df, op, arch_cfg, enumerate_pool(op, arch_cfg).kernels, get_engine("miopen"), None)
    flops = np.array([p.flops for p in tb.problems], dtype=float)[tb.pid]
    tb.flops_over_tflops = np.where(tb.tflops > 0, flops / np.maximum(tb.tflops, 1e-30) * 1e-9, np.nan)  # ms
    tb.op = op
    return tb, plain(cfg.model)


def applicability_summary(entries: list[dict]) -> list[str]:
    """Per place (in-sample; other GPU, seen and unseen keys) and mode: over every bundle, direction
    and dtype, the unlisted-pick rate (mean and worst) and the mean open and listed top-1 / efficiency."""
    cells: dict = {}
    for e in entries:
        for label, by_split in e.items():
            if not isinstance(by_split, dict) or label in ("bundle", "other"):
                continue
            for split, by_mode in by_split.items():
                for mode, r in by_mode.items():
                    cells.setdefault((label, split, mode), []).append((r, f"{e['bundle']} {e['direction']} {e['dtype']}"))
    lines = ["| on | keys | applicability | runs | unlisted picks: mean / worst (where) | open top-1 / eff | "
             "listed top-1 / eff |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for (label, split, mode), rs in cells.items():
        rate = [r["open"]["picks_outside_listed"] for r, _ in rs]
        worst = int(np.argmax(rate))
        mean = lambda proto, key: 100 * np.mean([r[proto][key] if key == "top1" else r[proto]["efficiency"]["mean"]  # noqa: E731
                                                 for r, _ in rs])
        lines.append(f"| {label} | {split} | {mode} | {len(rs)} | {100 * np.mean(rate):.2f}% / {100 * rate[worst]:.2f}% "
                     f"({rs[worst][1]}) | {mean('open', 'top1'):.1f}% / {mean('open', 'eff'):.2f}% | "
                     f"{mean('listed', 'top1'):.1f}% / {mean('listed', 'eff'):.2f}% |")
    return lines


def applicability_section(args, data: Path, results: dict) -> None:
    """--applicability: per direction and dtype, each shipped bundle in-sample and on the other file."""
    from ckheur import Selector
    from ckheur.integrations.miopen.find_db import arch_from_name, learn_listed, read_find_db

    files = list(map(Path, args.files))
    arches = [arch_from_name(f, ["gfx90a", "gfx942", "gfx950"])[0] for f in files]
    names = [f.name.split(".")[0] for f in files]
    print("| bundle | on | keys | direction | dtype | applicability | problems | unlisted picks | open top-1 / eff "
          "| listed top-1 / eff |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for direction in args.directions:
        listed = [learn_listed(read_find_db(f), direction) for f in files]
        for dtype in args.dtypes:
            tabs = [load_table(data, arch, direction, dtype, name)[0] for arch, name in zip(arches, names)]
            for i in range(len(files)):
                j = (i + 1) % len(files)
                folder = ROOT / "models" / f"miopen_{direction}_{dtype}_{arches[i]}"

                def load(mode, only=None, folder=folder, listed=listed[i]):
                    bundle = Selector.load(folder, applicability=mode, listed=listed,
                                           kernels=None if only is None else sorted(only))
                    if args.no_remember:
                        bundle.answers = {}  # the bundle's model alone, without its file's fastest solvers
                    return bundle
                figs = applicability_figures(load, tabs[i], tabs[j], args.applicability, args.max_problems,
                                             args.seed)
                results.setdefault("applicability", []).append(
                    {"bundle": arches[i], "remembered": not args.no_remember, "other": arches[j], "direction": direction, "dtype": dtype, **figs})
                for label, by_split in figs.items():
                    on = arches[i] if label == "in-sample" else arches[j]
                    for split, by_mode in by_split.items():
                        for mode, r in by_mode.items():
                            o, li = r["open"], r["listed"]
                            print(f"| {arches[i]} | {on} ({label}) | {split} | {direction} | {dtype} | {mode} | "
                                  f"{o['problems']:,} | {100 * o['picks_outside_listed']:.2f}% | "
                                  f"{100 * o['top1']:.1f}% / {100 * o['efficiency']['mean']:.2f}% | "
                                  f"{100 * li['top1']:.1f}% / {100 * li['efficiency']['mean']:.2f}% |", flush=True)
    print("\nOver every bundle, direction and dtype" + (" (the models alone)" if args.no_remember else "") + ":")
    print("\n".join(applicability_summary(results["applicability"])))
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"figures -> {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", nargs="+", default=[str(f) for f in FILES])
    ap.add_argument("--directions", nargs="+", default=["fwd", "bwd_data", "bwd_weight"])
    ap.add_argument("--dtypes", nargs="+", default=["fp16"])
    ap.add_argument("--splits", nargs="+", default=["random", "geometry"])
    ap.add_argument("--leaves", type=int, default=None, help="num_leaves (default: the model config's)")
    ap.add_argument("--trees", type=int, default=None, help="max_trees (default: the model config's)")
    ap.add_argument("--lr", type=float, default=None, help="learning_rate (default: the model config's)")
    ap.add_argument("--min-data", type=int, default=None, help="min_data_in_leaf (default: the model config's)")
    ap.add_argument("--distill-trees", type=int, default=None,
                    help="model.distill_trees: the model trained is distilled into a student of this many trees")
    ap.add_argument("--distill-leaves", type=int, default=None, help="model.distill_leaves: the student's leaves")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budgets", nargs="+", type=int, default=None,
                    help="tree counts: quality per microsecond of the random split's model cut at each (see 5.)")
    ap.add_argument("--budget-problems", type=int, default=50, help="--budgets: distinct problems timed per cut")
    ap.add_argument("--objective", default="relative", choices=["relative", "lambdarank", "regression_log"])
    ap.add_argument("--data", default=None, help="imported datasets folder (default: a temporary one)")
    ap.add_argument("--out", default="outputs/bench/miopen_fdb.json")
    ap.add_argument("--pool-dtypes", action="store_true",
                    help="also train one model per direction over every --dtypes (dtype a feature) and compare")
    ap.add_argument("--cross", action="store_true", help="also pick on each GPU's problems with the other GPU's model "
                    "(its shipped bundle, else one trained here on its whole file) beside a lookup of that file")
    ap.add_argument("--cross-train", action="store_true", help="--cross with models trained here, not the shipped ones")
    ap.add_argument("--cross-only", action="store_true", help="--cross alone: no held-out split, no TunaNet")
    ap.add_argument("--applicability", nargs="+", choices=["none", "rules", "listed", "both"],
                    help="the shipped bundles' unlisted picks, open and listed top-1 / efficiency with each "
                         "op.applicability, in-sample and on the other GPU's file (the listed table learned "
                         "from the bundle's own file), then stop")
    ap.add_argument("--no-remember", action="store_true", help="--applicability: the bundles' models alone, "
                    "without the remembered fastest solver of each training problem")
    ap.add_argument("--max-problems", type=int, default=3000, help="--applicability: at most this many problems "
                    "of each file per direction and dtype (a seeded sample; every unseen key is kept)")
    ap.add_argument("--tunanet", default=str(TUNANET) if TUNANET.is_dir() else None,
                    help="folder of MIOpen's <arch>.tn.model files: TunaNet beside the model on the held-out "
                         "problems in its domain (default: ../shared/data/miopen_tunanet when present)")
    ap.add_argument("--tunanet-of", metavar="ARCH", help="score ARCH's TunaNet (from --tunanet) on --files, "
                    "another GPU's measurements, and stop (see 3. above)")
    args = ap.parse_args()
    from ckheur.integrations.miopen.find_db import arch_from_name

    if args.tunanet_of:
        tunanet_on_other_gpu(args.tunanet_of, args.tunanet or str(TUNANET), args.files, args.seed)
        return

    given = {"num_leaves": args.leaves, "max_trees": args.trees, "learning_rate": args.lr,
             "min_data_in_leaf": args.min_data, "distill_trees": args.distill_trees,
             "distill_leaves": args.distill_leaves}
    overrides = {k: v for k, v in given.items() if v is not None}
    data = Path(args.data or tempfile.mkdtemp(prefix="ckheur_fdb_"))
    results = {"imports": [], "choice": []}
    for f in map(Path, args.files):
        rep = import_file(f, data)
        print(f"import {rep['file']}: {rep['wall_s']} s wall (stage {rep['stage_s']}), peak {rep['peak_gib']} GiB "
              f"(targets 20 s, 2 GiB)", flush=True)
        results["imports"].append({k: v for k, v in rep.items() if k != "log"})
    if args.cross_only:
        args.cross, args.splits, args.tunanet, args.pool_dtypes = True, [], None, False
    if args.applicability:
        applicability_section(args, data, results)
        return
    for f in map(Path, args.files):
        arch, _ = arch_from_name(f, ["gfx90a", "gfx942", "gfx950"])
        for direction in args.directions if args.splits or args.pool_dtypes else []:
            tables = {}
            for dtype in args.dtypes:
                tb, model = load_table(data, arch, direction, dtype, f.name.split(".")[0])
                tables[dtype] = tb
                model.update(overrides)
                if "model" not in results:
                    results["model"] = {k: model[k] for k in ("objective", "num_leaves", "learning_rate", "max_trees",
                                                              "min_data_in_leaf", "early_stopping_rounds")}
                    print(f"model settings: {results['model']}", flush=True)
                ranker = None
                if args.tunanet:
                    from ckheur.integrations.miopen.tunanet import TunaNetRanker, load_tunanet

                    ranker = TunaNetRanker(load_tunanet(args.tunanet, arch), tb.kernels, direction, dtype)
                for kind in args.splits:
                    r = choice(tb, model, kind, args.seed, args.objective, ranker)
                    booster, held = r.pop("booster"), r.pop("held_out_rows")
                    if args.budgets and kind == "random":
                        shipped = ROOT / "models" / f"miopen_{direction}_{dtype}_{arch}"
                        r["budgets"] = budget_curve(tb, booster, held, args.budgets, shipped, args.budget_problems)
                        print_curve(f"{arch} {direction} {dtype}", r["budgets"])
                    results["choice"].append({"arch": arch, "direction": direction, "dtype": dtype, **r})
                    o, li = r["open"], r["listed"]
                    print(f"{arch} {direction:10s} {dtype} {kind:8s}: open top-1 {100 * o['top1']:.1f}% (tie-aware "
                          f"{100 * o['top1_tie_aware']:.1f}%), slowdown {100 * o['mean_slowdown']:.2f}%, outside listed "
                          f"{100 * o['picks_outside_listed']:.2f}%, eff mean {100 * o['efficiency']['mean']:.2f}% "
                          f"P10 {100 * o['efficiency']['p10']:.2f}% time-weighted {100 * o['time_weighted']:.2f}% | "
                          f"listed top-1 {100 * li['top1']:.1f}%, eff {100 * li['efficiency']['mean']:.2f}% | "
                          f"{r['train_problems']} training problems, {r['trees']} trees, {r['train_s']} s", flush=True)
                    if "tunanet" in r:
                        t = r["tunanet"]
                        print(f"  beside TunaNet on its {t['problems']} of {t['held_out_problems']} held-out problems: "
                              + " | ".join(f"{who} listed top-1 {100 * t[who]['listed']['top1']:.1f}% eff "
                                           f"{100 * t[who]['listed']['efficiency']['mean']:.2f}%, open top-1 "
                                           f"{100 * t[who]['open']['top1']:.1f}% eff "
                                           f"{100 * t[who]['open']['efficiency']['mean']:.2f}%"
                                           for who in ("model", "TunaNet")), flush=True)
            if args.pool_dtypes and len(tables) > 1:
                for kind in args.splits:
                    r = pooled_choice(tables, model, kind, args.seed, args.objective)
                    results.setdefault("pooled", []).append({"arch": arch, "direction": direction, **r})
                    for dtype, o in [*r["per_dtype"].items(), ("all", r["all"])]:
                        o = o["open"]
                        print(f"{arch} {direction:10s} {dtype} {kind:8s} one model for {'+'.join(tables)}: open top-1 "
                              f"{100 * o['top1']:.1f}% (tie-aware {100 * o['top1_tie_aware']:.1f}%), eff mean "
                              f"{100 * o['efficiency']['mean']:.2f}% P10 {100 * o['efficiency']['p10']:.2f}% | "
                              f"{r['trees']} trees, {r['train_s']} s", flush=True)
    if args.cross and len(args.files) == 2:
        arches = [arch_from_name(f, ["gfx90a", "gfx942", "gfx950"])[0] for f in args.files]
        names = [Path(f).name.split(".")[0] for f in args.files]
        for direction in args.directions:
            for dtype in args.dtypes:
                tabs = [load_table(data, arch, direction, dtype, name) for arch, name in zip(arches, names)]
                for i, j in ((0, 1), (1, 0)):
                    model = {**tabs[i][1], **overrides, "cross_trees": 1000}
                    shipped = ROOT / "models" / f"miopen_{direction}_{dtype}_{arches[i]}"
                    bundle = None
                    if shipped.is_dir() and not args.cross_train:
                        from ckheur import Selector

                        bundle = Selector.load(shipped)
                    r = cross_gpu(tabs[i][0], tabs[j][0], model, args.seed, bundle)
                    r["model_from"] = str(shipped) if bundle is not None else "trained here on the whole file"
                    results.setdefault("cross", []).append({"from": arches[i], "to": arches[j], "direction": direction,
                                                            "dtype": dtype, **r})
                    m, f = r["model"]["open"], r["other_file"]["open"]
                    print(f"cross {arches[i]} -> {arches[j]} {direction:10s} {dtype}: {r['shared_problems']} shared "
                          f"problems, {r['solvers_both']} solvers on both: model ({r['model_from']}) top-1 "
                          f"{100 * m['top1']:.1f}%, eff "
                          f"{100 * m['efficiency']['mean']:.2f}%, unlisted picks {100 * m['picks_outside_listed']:.2f}% | the {arches[i]} file's own fastest: top-1 "
                          f"{100 * f['top1']:.1f}%, eff {100 * f['efficiency']['mean']:.2f}%", flush=True)
    beside = [r for r in results["choice"] if "tunanet" in r and r["split"] == "random"]
    if beside:
        print("\nThe model against MIOpen's TunaNet on the same held-out problems (random split, TunaNet's domain): "
              "first listed pick is the fastest listed solver / efficiency (listed protocol)")
        print("| GPU | direction | dtype | problems | TunaNet | ckheur |")
        print("| --- | --- | --- | --- | --- | --- |")
        for r in beside:
            t = r["tunanet"]
            cell = lambda who: f"{100 * t[who]['listed']['top1']:.1f}% / {100 * t[who]['listed']['efficiency']['mean']:.2f}%"  # noqa: E731
            print(f"| {r['arch']} | {r['direction']} | {r['dtype']} | {t['problems']:,} | {cell('TunaNet')} | "
                  f"{cell('model')} |")
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"figures -> {out}")


if __name__ == "__main__":
    main()
