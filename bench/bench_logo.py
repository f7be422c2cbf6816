#!/usr/bin/env python
"""Leave-one-GPU-out over the six find-dbs, with a few-shot bring-up: what serves a GPU never measured.

The six devices of ../shared/data/miopen_fdb (MI300X gfx942, MI210 gfx90a, MI50 gfx906 60 CUs,
MI60 gfx906 64 CUs, Vega 56 gfx900, an RDNA2 Radeon gfx1030), each a device config
(``ckheur.config.find_db_device``: the arch config with the device's CUs, clocks, peaks). Per
direction and dtype, each device held out in turn; scored on its (subsampled) problems in the open
protocol (every solver of its table is a candidate: the solvers of its arch's table that its file
lists at least once; a pick its file does not list for the problem counts 0):

- **zero-shot**: one model across the other five devices, hardware descriptors as features
  (``features.hardware``), ranking the held-out device's solver table with its descriptors, only
  the solvers MIOpen's rules keep (``op.applicability=rules``, the default);
- **zero-shot, adopted** (issue 49 item 5): the same, except that a solver none of the five lists
  (MI50's MLIR non-xdlops solvers, ...) is scored by a second model across the five on the
  ``miopen+kinds`` features (the solver by what its name says of it, no solver id); the few-shot
  sweep ranks with it;
- **zero-shot as served**: what ``stage=predict`` serves a GPU without a bundle of its own
  (``ckheur.selection.predicting.serving``): the nearest shipped bundle (below) where its GPU shares
  the held-out device's matrix cores and wave size (``SERVING_TRAITS``), else the zero-shot model;
  picked per cell from those two rows, nothing trained for it;
- **today's fallback**: the shipped bundle of the nearest other GPU that has one (gfx90a or gfx942,
  nearest by hardware descriptors scaled by their spread over the six), without its remembered
  answers: what ``stage=predict`` served every GPU without a bundle before the models across GPUs
  (the row keeps its name so that earlier runs' JSON reads alike);
- **nearest device's own model**: a model trained here on the nearest other device's data alone
  (what its bundle would be), on the solvers both tables have;
- **best single solver**: the solver of the five with the highest mean efficiency on their data
  (pooled), always picked;
- **TunaNet** of the held-out GPU where MIOpen ships one (gfx90a, gfx942), on its domain;
- **ceiling**: the held-out device's own model on a random 80/20 split of its problems, scored on
  the 20%;
- **few-shot**: random 1% and 5% of the held-out device's (problem, solver) pairs, measured as
  ``sweep.active.ranker`` does: problems drawn at random, each timed on the zero-shot model's
  floor(sqrt(n)) best solvers plus half that drawn from the rest (a solver its file does not list
  reads censored, as an import writes it); then a model across the five plus those rows (x20,
  ``train.target_weight``), scored on the device's problems the sweep did not measure, beside the
  zero-shot model and the ceiling's model on the same problems.
- the same-arch pair: MI50 <- MI60's own model and MI60 <- MI50's (a GPU whose sibling was measured).

Training rows leave out the solvers a device's file never lists (never tried on it: MI60's file
predates MIOpen's MLIR solvers). Models use bench_unseen's small recipe (15 leaves, at most 500
trees, lr 0.15). Problems are subsampled per device, direction and dtype (--max-problems, at
random) to fit small machines. The "applicability both" rows rank, beside MIOpen's rules, only the
solvers the training devices (and the sweep) list for problems of the same kind.

    python bench/bench_logo.py [--data DIR] [--directions fwd bwd_data bwd_weight] [--dtypes fp32 fp16]
                               [--max-problems 1500] [--jobs 6] [--out logo.json]
    python bench/bench_logo.py --from-json logo.json   # the tables and summary of an earlier run, no training
    python bench/bench_logo.py --zero-only --out zero.json   # only the zero-shot rows, in bench_logo's protocol,
                                                             # the product's (every solver of the arch's table) and
                                                             # the product's with op.available (the GPU's find-db)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_miopen_fdb import ROOT, SHARED, TUNANET, import_file  # noqa: E402
from bench_unseen import RECIPE, fit_on, predict_rows, ranked_rows, report  # noqa: E402

# device -> (arch, the find-db's CU count, its file)
DEVICES = {"MI300X": ("gfx942", 304, "gfx942130"), "MI210": ("gfx90a", 104, "gfx90a68"),
           "MI50": ("gfx906", 60, "gfx906_60"), "MI60": ("gfx906", 64, "gfx906_64"),
           "Vega56": ("gfx900", 56, "gfx900_56"), "RDNA2": ("gfx1030", 36, "gfx1030_36")}
SIBLINGS = (("MI50", "MI60"), ("MI60", "MI50"))
BUNDLED = ("gfx90a", "gfx942")  # archs with shipped bundles
TARGET_WEIGHT = 20.0  # train.target_weight's default: each of the held-out device's few rows
ADOPTED = "zero-shot, adopted: a solver the five never list ranked by its kind"
ZERO = "zero-shot: model across the other five"  # the recipe of the shipped models across GPUs
FALLBACK = "today's fallback: nearest shipped bundle"
AS_SERVED = "zero-shot as served: nearest bundle where it shares matrix cores and wave size, else the model across the other five"


def device_config(device: str) -> dict:
    """The device's arch config (its devices entry where it has one)."""
    from ckheur.config import find_db_device, load_arch

    arch, cus, _ = DEVICES[device]
    cfg = find_db_device(load_arch(arch), cus)
    assert cfg is not None, device
    return cfg


def device_rows(data: Path, device: str, direction: str, dtype: str, max_problems: int, seed: int):
    """A device's dataset rows of one direction and dtype, of at most ``max_problems`` problems drawn
    at random, and how many problems its file has."""
    from ckheur.data.dataset import read_dataset
    from ckheur.families.miopen.problems import FIELDS

    arch, _, name = DEVICES[device]
    df = read_dataset(data / f"miopen_{direction}_{dtype}_{arch}" / f"{name}.parquet")
    group = df.groupby(list(FIELDS), sort=True, observed=True, dropna=False).ngroup().to_numpy()
    total = int(group.max()) + 1
    if total > max_problems:
        keep = np.random.default_rng(seed).choice(total, size=max_problems, replace=False)
        df = df[np.isin(group, keep)]
    return df, total


def ceiling_split(problems: int, seed: int) -> np.ndarray:
    """The ceiling's test problems (a random 20%): the mask every leave-one-GPU-out bench scores on."""
    return np.random.default_rng(seed + 7).random(problems) < 0.2


def load_device(data: Path, device: str, direction: str, dtype: str, max_problems: int, seed: int,
                unlisted: Sequence[str] = ()):
    """A device's table of one direction and dtype, at most ``max_problems`` problems drawn at random;
    with ``unlisted`` (registry solvers its arch's table lacks) those in the table too, censored on
    every problem: what it would be offered, and not measured on, were its table MIOpen's registry."""
    from ckheur.families.engines import get_engine
    from ckheur.kernels import enumerate_pool
    from ckheur.learn.training import build_table
    from ckheur.stages import compose_config, plain

    arch = DEVICES[device][0]
    cfg = compose_config([f"op=miopen/{direction}", f"arch={arch}", f"op.dtype={dtype}"])
    op, arch_cfg = plain(cfg.op), device_config(device)
    df, total = device_rows(data, device, direction, dtype, max_problems, seed)
    if unlisted:
        df, op = with_unlisted(df, op, arch, unlisted)
    tb = build_table(df, op, arch_cfg, enumerate_pool(op, arch_cfg).kernels, get_engine("miopen"), None)
    flops = np.array([p.flops for p in tb.problems], dtype=float)[tb.pid]
    tb.flops_over_tflops = np.where(tb.tflops > 0, flops / np.maximum(tb.tflops, 1e-30) * 1e-9, np.nan)
    tb.op = op
    tb.total_problems = total
    # Solvers this device's file never lists (MI60's file predates MIOpen's MLIR solvers, which MI50's
    # lists for most problems): never tried there, not "slower or not applicable": not trained on.
    tb.listed = np.bincount(tb.kid[tb.tflops > 0], minlength=len(tb.kernels)) > 0
    return tb


def with_unlisted(df, op: dict, arch: str, names: Sequence[str]) -> tuple:
    """The rows with each solver of ``names`` censored on every problem (as an import reads a
    solver the file never lists), and the op with the arch's table holding them."""
    import pandas as pd

    from ckheur.families.miopen.problems import FIELDS
    from ckheur.families.miopen.solvers import arch_table, solver_tables

    registry = {s["name"]: s for s in solver_tables(op["direction"])["registry"]}
    first = df.drop_duplicates(list(FIELDS))
    added = [first.assign(kernel=n, solver_id=registry[n]["id"], algorithm=registry[n]["algorithm"],
                          implementation=registry[n]["implementation"], workspace=registry[n]["workspace"],
                          latency_ms=np.nan, latency_spread_ms=np.nan, tflops=np.nan, status="censored",
                          error="not in the arch's measured table", workspace_bytes=-1) for n in names]
    table = arch_table(op["direction"], arch, measured=set(names))
    return pd.concat([df.astype({"kernel": str}), *added], ignore_index=True), {**op, "solvers": {arch: table}}


def registry_unlisted(tables: dict, held: str, direction: str) -> list[str]:
    """The solvers a held-out device would be offered beside its arch's table were that table MIOpen's
    registry (``ckheur.families.miopen.solvers.registry_table``: an arch ckheur ships no table of)
    and that another of the six lists somewhere (a model across GPUs ranks no solver none of its
    GPUs measured)."""
    from ckheur.families.miopen.solvers import registry_table

    mine = {k.name for k in tables[held].kernels}
    seen = {k.name for d in DEVICES if d != held for k, ok in zip(tables[d].kernels, tables[d].listed) if ok}
    return sorted(({s["name"] for s in registry_table(direction, DEVICES[held][0])} - mine) & seen)


def with_hw(tb, cfg: dict, dtype: str, union: list, kinds: bool = False):
    """The table with the device's descriptors appended and its kernels indexed into ``union``
    (``kinds``: with the ``miopen+kinds`` features, solvers by kind instead of by id)."""
    from ckheur.families.engines import get_engine, pair_features
    from ckheur.families.hardware import DESCRIPTORS, descriptors

    hw = descriptors(cfg, dtype).astype(tb.X.dtype)
    at = {k.name: i for i, k in enumerate(union)}
    remap = np.array([at[k.name] for k in tb.kernels])
    X, names = tb.X, tb.feature_names
    if kinds:
        engine = get_engine("miopen+kinds")
        X = pair_features(engine, tb.problems, tb.kernels, tb.pid, tb.kid, cfg, tb.op["direction"])
        names = engine.feature_names()
    return dataclasses.replace(tb, X=np.hstack([X, np.broadcast_to(hw, (len(X), len(hw)))]),
                               feature_names=[*names, *DESCRIPTORS], kid=remap[tb.kid], kernels=union, weight=None)


def as_served(res: dict, held: str, cfgs: dict) -> dict | None:
    """The AS_SERVED row of a held-out device's results ``res``: the nearest bundle's row where its GPU
    shares the device's SERVING_TRAITS (``ckheur.selection.predicting.traits_apart``), else the
    zero-shot row; None without both."""
    from ckheur.selection.predicting import traits_apart

    if FALLBACK not in res or ZERO not in res:
        return None
    near = res[FALLBACK]["bundle"]
    if traits_apart(cfgs[held], cfgs[near]):
        return {**res[ZERO], "serves": "the model across the other five"}
    return {**{k: v for k, v in res[FALLBACK].items() if k != "bundle"}, "serves": f"{near}'s bundle"}


def problem_ranks(pid: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Each row's rank among its problem's rows by score (0 the lowest), rows grouped by problem."""
    order = np.lexsort((scores, pid))
    ranks = np.empty(len(pid))
    starts = np.r_[0, np.flatnonzero(np.diff(pid[order])) + 1]
    ranks[order] = np.arange(len(pid)) - np.repeat(starts, np.diff(np.r_[starts, len(pid)]))
    return ranks


def rows_of(tb, rows: np.ndarray, weight: float | None = None):
    """A table of some rows (problems renumbered), each weighing ``weight`` (None: 1)."""
    keep, pid = np.unique(tb.pid[rows], return_inverse=True)
    full = np.zeros(len(keep), dtype=bool) if tb.full is None else tb.full[keep]
    return dataclasses.replace(tb, X=tb.X[rows], tflops=tb.tflops[rows], pid=pid, kid=tb.kid[rows],
                               problems=[tb.problems[i] for i in keep], full=full,
                               weight=None if weight is None else np.full(len(rows), weight))


def nearest(held: str, among: list, cfgs: dict, dtype: str) -> str:
    """The device of ``among`` nearest ``held`` by hardware descriptors, each scaled by its spread over the six."""
    from ckheur.families.hardware import descriptors

    points = {d: descriptors(cfgs[d], dtype) for d in DEVICES}
    spread = np.std(np.array(list(points.values())), axis=0)
    spread[spread == 0] = 1.0
    return min(among, key=lambda d: float(np.linalg.norm((points[d] - points[held]) / spread)))


def best_single(tables: list) -> str:
    """The solver with the highest mean efficiency over the pooled problems of ``tables`` (unlisted: 0)."""
    eff_by: dict = {}
    for tb in tables:
        t = np.where(tb.tflops > 0, tb.flops_over_tflops, np.inf)
        best = np.full(len(tb.problems), np.inf)
        np.minimum.at(best, tb.pid, t)
        eff = np.where(np.isfinite(t), best[tb.pid] / t, 0.0)
        for k, e in zip(tb.kid, eff):
            name = tb.kernels[k].name
            eff_by[name] = eff_by.get(name, 0.0) + e
    return max(eff_by, key=eff_by.get)


def sweep_rows(tb, kept: np.ndarray, scores: np.ndarray, budget: float, seed: int, explore: float = 0.5,
               rounds: tuple = (), rerank=None, top=None) -> np.ndarray:
    """Rows a ``sweep.active.ranker`` sweep times within ``budget`` of the table's pairs: problems in a
    random order, each on the ranker's floor(sqrt(n)) best solvers (``top``: that many, as
    ``sweep.active.top``, or ``top(n)``) and ``explore`` times that drawn from the rest. With
    ``rounds`` (cumulative shares of the budget, ascending) and ``rerank``, the sweep is spent in
    rounds: once a round's share is timed, ``rerank(rows timed so far)`` gives the scores the next
    problems are ranked by (the same problems and counts: only the solvers differ)."""
    rng = np.random.default_rng(seed)
    limit = max(1, int(budget * len(tb.pid)))
    by_problem = np.split(np.arange(len(tb.pid)), np.flatnonzero(np.diff(tb.pid)) + 1)
    out: list = []
    ends = [max(1, int(share * limit)) for share in rounds if share < 1] if rerank is not None else []
    for p in rng.permutation(len(by_problem)):
        if ends and len(out) >= ends[0]:
            while ends and len(out) >= ends[0]:
                ends.pop(0)
            scores = rerank(np.sort(np.array(out, dtype=np.int64)))
        rows = by_problem[p]
        rows = rows[kept[rows]] if kept[rows].any() else rows
        top_n = max(1, math.isqrt(len(rows))) if top is None else top(len(rows)) if callable(top) else top
        top_n = min(top_n, len(rows))
        order = rows[np.argsort(-scores[rows], kind="stable")]
        rest = order[top_n:]
        drawn = min(len(rest), math.ceil(top_n * explore))
        out.extend([*order[:top_n], *(rng.choice(rest, size=drawn, replace=False) if drawn else rest[:0])])
        if len(out) >= limit:
            break
    return np.sort(np.array(out, dtype=np.int64))


def listed_of(parts: list) -> dict:
    """``op.listed`` learned from the listed rows of ``parts`` ((table, rows) pairs): for each solver,
    the kinds of problem it is listed for (``ckheur.families.miopen.solvers.listed_kinds``)."""
    import pandas as pd

    from ckheur.families.miopen.solvers import listed_kinds

    frames = []
    for tb, rows in parts:
        timed = rows[tb.tflops[rows] > 0]
        frame = pd.DataFrame([{"layout": p.layout, "dtype": tb.op["dtype"], "G": p.G, "C": p.C, "Z": p.Z, "Y": p.Y,
                               "X": p.X} for p in (tb.problems[i] for i in tb.pid[timed])])
        frame["kernel"] = [tb.kernels[k].name for k in tb.kid[timed]]
        frames.append(frame)
    return listed_kinds(pd.concat(frames, ignore_index=True))


def device_tables(data: Path, direction: str, dtype: str, max_problems: int, seed: int, threads: int,
                  recipe: dict | None = None) -> tuple:
    """What every leave-one-GPU-out bench starts from, for one direction and dtype: the model recipe
    (bench_unseen's small one, ``recipe`` over it), each device's config and table, the union of
    their solvers, each table with hardware descriptors over that union, and its listed rows (the
    training rows)."""
    from ckheur.stages import compose_config, plain

    model = {**plain(compose_config([f"op=miopen/{direction}"]).model), **RECIPE, **(recipe or {}), "threads": threads}
    cfgs = {d: device_config(d) for d in DEVICES}
    tables = {d: load_device(Path(data), d, direction, dtype, max_problems, seed) for d in DEVICES}
    union: dict = {}
    for tb in tables.values():
        for k in tb.kernels:
            union.setdefault(k.name, k)
    union_list = sorted(union.values(), key=lambda k: k.solver_id)
    hw = {d: with_hw(tb, cfgs[d], dtype, union_list) for d, tb in tables.items()}
    trained = {d: rows_of(hw[d], np.flatnonzero(tb.listed[tb.kid])) for d, tb in tables.items()}
    return model, cfgs, tables, union_list, hw, trained


def held_out(tables: dict, hw: dict, held: str) -> tuple:
    """A held-out device's table, its rows with descriptors, the other five devices, its row indices
    and the rows MIOpen's rules keep (the candidates every row of the benches ranks)."""
    tb = tables[held]
    rows = np.arange(len(tb.pid))
    return tb, hw[held], [d for d in DEVICES if d != held], rows, ranked_rows(tb, tb.op, rows)


def zero_only(data, direction: str, dtype: str, max_problems: int, seed: int, threads: int,
              fdb: str = str(SHARED), recipe: dict | None = None) -> dict:
    """``--zero-only``: the rows a GPU never measured gets (the model across the other five, today's
    fallback, as served, the best single solver) for every held-out device of one direction and
    dtype, in bench_logo's protocol (``held_out``: the candidates are the solvers the held-out file
    lists at least once) and in the product's (``held_out_product``: every solver of its arch's
    table that MIOpen's rules keep, as ``stage=predict`` and ``stage=evaluate`` rank them; a GPU
    never measured has no file to say which solvers its MIOpen runs), and in the product's with
    ``op.available`` given the held-out GPU's own find-db (``held_out_available``: of those, the
    solvers that file names, as ``ckheur.families.miopen.solvers.available_of`` reads it: what a
    user who knows their MIOpen gets). ``held_out_registry``: the product's, were the held-out arch
    one ckheur ships no table of: its table is then MIOpen's registry cut by the device rules
    (``registry_table``), so the registry's solvers its file never lists are candidates too, each
    scored 0 where picked (``registry_unlisted``: those another of the six lists, which a model
    across GPUs ranks)."""
    from bench_unseen import bundle_scores

    from ckheur.families.miopen.solvers import available_of
    from ckheur.learn.training import concat_tables

    t0 = time.perf_counter()
    model, cfgs, tables, union, hw, trained = device_tables(data, direction, dtype, max_problems, seed, threads, recipe)
    out = {"direction": direction, "dtype": dtype, "problems": {d: len(t.problems) for d, t in tables.items()},
           "total_problems": {d: t.total_problems for d, t in tables.items()}, "held_out": {}, "held_out_product": {},
           "held_out_available": {}, "available_dropped": {}, "held_out_registry": {}, "registry_unlisted": {}}
    for held in DEVICES:
        tb, mine, others, rows, kept = held_out(tables, hw, held)
        zero, _ = fit_on(concat_tables([trained[d] for d in others]), None, model, seed)
        single = best_single([tables[d] for d in others])
        fallback = nearest(held, [d for d in others if DEVICES[d][0] in BUNDLED], cfgs, dtype)
        bundle = ROOT / "models" / f"miopen_{direction}_{dtype}_{DEVICES[fallback][0]}"

        def rows_scored(tb, mine, rows, kept):
            scored = [(ZERO, np.where(kept, predict_rows(zero, mine, rows), -np.inf), {}),
                      ("best single solver of the five", np.array([1.0 if tb.kernels[k].name == single else 0.0
                                                                   for k in tb.kid]), {"solver": single})]
            if bundle.is_dir():
                scored.append((FALLBACK, bundle_scores(bundle, tb)[0], {"bundle": fallback}))
            return scored

        scored = rows_scored(tb, mine, rows, kept)
        shipped = available_of({"direction": direction, "available": str(Path(fdb) / f"{DEVICES[held][2]}.HIP.fdb.txt.bz2")})
        out["available_dropped"][held] = sorted(k.name for k in tb.kernels if k.name not in shipped)
        available = np.array([tb.kernels[k].name in shipped for k in tb.kid])
        for key, among in (("held_out", tb.listed[tb.kid]), ("held_out_product", np.ones(len(rows), dtype=bool)),
                           ("held_out_available", available)):
            res = {name: {**report(tb, rows, np.where(among, scores, -np.inf)), **extra}
                   for name, scores, extra in scored}
            if as_served(res, held, cfgs) is not None:
                res[AS_SERVED] = as_served(res, held, cfgs)
            out[key][held] = res
        unlisted = registry_unlisted(tables, held, direction)
        reg = load_device(Path(data), held, direction, dtype, max_problems, seed, unlisted) if unlisted else tb
        out["registry_unlisted"][held] = sorted({k.name for k in reg.kernels} - {k.name for k in tb.kernels})
        reg_rows = np.arange(len(reg.pid))
        res = {name: {**report(reg, reg_rows, scores), **extra} for name, scores, extra in
               rows_scored(reg, with_hw(reg, cfgs[held], dtype, union), reg_rows, ranked_rows(reg, reg.op, reg_rows))}
        if as_served(res, held, cfgs) is not None:
            res[AS_SERVED] = as_served(res, held, cfgs)
        out["held_out_registry"][held] = res
        print(f"{direction} {dtype} {held} ({time.perf_counter() - t0:.0f} s): " + "; ".join(
            f"{n}: {100 * r['efficiency']:.2f} (bench) / {100 * out['held_out_product'][held][n]['efficiency']:.2f} "
            f"(product) / {100 * out['held_out_available'][held][n]['efficiency']:.2f} (product, op.available)"
            for n, r in out["held_out"][held].items()), flush=True)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def one_op(args: tuple) -> dict:
    """Every held-out device of one direction and dtype."""
    data, direction, dtype, max_problems, seed, budgets, threads, tunanet, only_zero, fdb, recipe = args
    if only_zero:  # --zero-only: the zero-shot rows in the three protocols, nothing else
        return zero_only(data, direction, dtype, max_problems, seed, threads, fdb, recipe)

    t0 = time.perf_counter()
    model, cfgs, tables, union_list, hw, trained = device_tables(data, direction, dtype, max_problems, seed, threads,
                                                                 recipe)
    by_kind = {d: with_hw(tb, cfgs[d], dtype, union_list, kinds=True) for d, tb in tables.items()}
    trained_kind = {d: rows_of(by_kind[d], np.flatnonzero(tb.listed[tb.kid])) for d, tb in tables.items()}
    own = {d: fit_on(trained[d], None, model, seed)[0] for d in DEVICES}  # each device's own model (all its problems)
    out = {"direction": direction, "dtype": dtype, "problems": {d: len(t.problems) for d, t in tables.items()},
           "total_problems": {d: t.total_problems for d, t in tables.items()}, "held_out": {}}
    print(f"{direction} {dtype}: tables and own models in {time.perf_counter() - t0:.0f} s", flush=True)
    for held in DEVICES:
        tb, mine, others, rows, kept = held_out(tables, hw, held)
        res: dict = {}

        def add(name, scores, on=rows, **extra):
            # the device's table: the solvers its file lists (a solver it never lists was never tried there)
            res[name] = {**report(tb, on, np.where(tb.listed[tb.kid[on]], scores, -np.inf)), **extra}

        from ckheur.learn.training import concat_tables

        zero, _ = fit_on(concat_tables([trained[d] for d in others]), None, model, seed)
        z_id = np.where(kept, predict_rows(zero, mine, rows), -np.inf)
        add(ZERO, z_id)
        # the adopted recipe: a solver none of the five lists is ranked by a model of solvers by kind
        # (miopen+kinds), the others as before
        by_kind_model, _ = fit_on(concat_tables([trained_kind[d] for d in others]), None, model, seed)
        seen = np.zeros(len(union_list), dtype=bool)
        for d in others:
            seen[np.unique(trained[d].kid[trained[d].tflops > 0])] = True
        z = np.where(seen[mine.kid], z_id, np.where(kept, predict_rows(by_kind_model, by_kind[held], rows), -np.inf))
        add(ADOPTED, z, unseen_solvers=len(np.unique(mine.kid[~seen[mine.kid] & tb.listed[tb.kid]])))
        # op.applicability=both: also only the solvers the five list for problems of the same kind
        both_op = {**tb.op, "applicability": "both",
                   "listed": listed_of([(tables[d], np.arange(len(tables[d].pid))) for d in others])}
        add("zero-shot (adopted), applicability both (what the five list)", np.where(ranked_rows(tb, both_op, rows), z, -np.inf))
        fallback = nearest(held, [d for d in others if DEVICES[d][0] in BUNDLED], cfgs, dtype)
        bundle = ROOT / "models" / f"miopen_{direction}_{dtype}_{DEVICES[fallback][0]}"
        if bundle.is_dir():
            from bench_unseen import bundle_scores

            add(FALLBACK, bundle_scores(bundle, tb)[0], bundle=fallback)
            res[AS_SERVED] = as_served(res, held, cfgs)
        near = nearest(held, others, cfgs, dtype)
        theirs = {k.name for k in tables[near].kernels}
        known = np.array([k.name in theirs for k in tb.kernels])
        add("nearest device's own model", np.where(kept & known[tb.kid], predict_rows(own[near], mine, rows), -np.inf),
            device=near)
        single = best_single([tables[d] for d in others])
        add("best single solver of the five", np.array([1.0 if tb.kernels[k].name == single else 0.0
                                                         for k in tb.kid]), solver=single)
        arch = DEVICES[held][0]
        if arch in BUNDLED and Path(tunanet).is_dir():
            from bench_unseen import tunanet_rows

            tunanet_rows(tb, arch, direction, dtype, tunanet,
                         lambda name, scores, on: add("its own TunaNet (MIOpen's, its domain)", scores, on))
        # the ceiling: the device's own model on 80% of its problems, scored on the other 20%
        test = ceiling_split(len(tb.problems), seed)
        te = np.flatnonzero(test[tb.pid])
        ceiling, _ = fit_on(mine, np.flatnonzero(~test[tb.pid] & tb.listed[tb.kid]), model, seed)
        add("ceiling: its own model, random split (20%)", predict_rows(ceiling, mine, te), te)
        for budget in budgets:
            swept = sweep_rows(tb, kept, z, budget, seed)
            measured = np.zeros(len(tb.problems), dtype=bool)
            measured[tb.pid[swept]] = True
            rest = np.flatnonzero(~measured[tb.pid])
            few, _ = fit_on(concat_tables([*(trained[d] for d in others), rows_of(mine, swept, TARGET_WEIGHT)]), None,
                            model, seed)
            tag = f"{100 * budget:g}%"
            add(f"few-shot {tag}: five + the sweep's rows, retrained", np.where(kept[rest],
                predict_rows(few, mine, rest), -np.inf), rest, pairs=int(len(swept)),
                problems_swept=int(measured.sum()))
            add(f"few-shot {tag}: zero-shot (adopted) on the same problems", z[rest], rest)
            few_op = {**tb.op, "applicability": "both", "listed": listed_of(
                [*((tables[d], np.arange(len(tables[d].pid))) for d in others), (tb, swept)])}
            add(f"few-shot {tag}, applicability both (the five and the sweep list)",
                np.where(ranked_rows(tb, few_op, rest), predict_rows(few, mine, rest), -np.inf), rest)
            # beside the ceiling on the same problems: its 20% the sweep did not measure
            both = np.flatnonzero(test[tb.pid] & ~measured[tb.pid])
            add(f"few-shot {tag}, on the ceiling's unmeasured 20%", np.where(kept[both],
                predict_rows(few, mine, both), -np.inf), both)
            add(f"ceiling, on the same problems (few-shot {tag})", predict_rows(ceiling, mine, both), both)
        for a, b in SIBLINGS:
            if held == a:
                sib = {k.name for k in tables[b].kernels}
                kn = np.array([k.name in sib for k in tb.kernels])
                add(f"sibling {b}'s own model", np.where(kept & kn[tb.kid], predict_rows(own[b], mine, rows), -np.inf))
        out["held_out"][held] = res
        line = "; ".join(f"{n}: {100 * r['top1']:.1f} / {100 * r['efficiency']:.2f} / {100 * r['not_listed']:.2f}"
                         for n, r in res.items())
        print(f"{direction} {dtype} {held} ({time.perf_counter() - t0:.0f} s): {line}", flush=True)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def table_md(results: list) -> list[str]:
    """Markdown: per direction, dtype and held-out device, top-1 / mean efficiency / unlisted picks of each row."""
    names: list = []
    for r in results:
        for res in r["held_out"].values():
            for n in res:
                if n not in names:
                    names.append(n)
    lines = []
    for n in names:
        lines.append(f"\n**{n}** (top-1 % / mean efficiency % / unlisted picks %)\n")
        lines.append("| direction | dtype | " + " | ".join(DEVICES) + " |")
        lines.append("| --- | --- | " + " | ".join("---" for _ in DEVICES) + " |")
        for r in results:
            cells = []
            for d in DEVICES:
                x = r["held_out"].get(d, {}).get(n)
                cells.append("" if x is None else f"{100 * x['top1']:.1f} / {100 * x['efficiency']:.2f} / "
                             f"{100 * x['not_listed']:.2f}")
            lines.append(f"| {r['direction']} | {r['dtype']} | " + " | ".join(cells) + " |")
    return lines


def summary(results: list) -> list[str]:
    """Means over every held-out device, direction and dtype, and the targets' checks."""
    f = FALLBACK
    rows = [(r, d, res) for r in results for d, res in r["held_out"].items()]
    mean = lambda name, key: 100 * np.mean([res[name][key] for _, _, res in rows if name in res])  # noqa: E731
    out = ["\n| selector | cells | mean top-1 | mean efficiency | mean unlisted picks | of which a slot lost |",
           "| --- | --- | --- | --- | --- | --- |"]
    names = list(dict.fromkeys(n for _, _, res in rows for n in res))
    for n in names:
        cells = sum(1 for _, _, res in rows if n in res)
        lost = [res[n]["slot_lost"] for _, _, res in rows if n in res and "slot_lost" in res[n]]  # runs after it
        out.append(f"| {n} | {cells} | {mean(n, 'top1'):.1f} | {mean(n, 'efficiency'):.2f} | "
                   f"{mean(n, 'not_listed'):.2f} | {f'{100 * np.mean(lost):.2f}' if lost else ''} |")
    single = "best single solver of the five"
    for z in (ZERO, ADOPTED, AS_SERVED):
        wins = [(res[z]["efficiency"] - res[f]["efficiency"]) for _, _, res in rows if f in res and z in res]
        if wins:
            out.append(f"\n{z} minus today's fallback, mean efficiency: mean {100 * np.mean(wins):+.2f} points, "
                       f"worst {100 * min(wins):+.2f}, at least as good in {sum(w >= 0 for w in wins)} of {len(wins)} "
                       "cells")
            per = {d: [res[z]["efficiency"] - res[f]["efficiency"] for _, e, res in rows if e == d and f in res and z in res]
                   for d in DEVICES}
            out.append("  per held-out device (mean over its cells): " + ", ".join(
                f"{d} {100 * np.mean(v):+.2f}" for d, v in per.items() if v))
            top = [res[z]["top1"] - res[single]["top1"] for _, _, res in rows if single in res and z in res]
            out.append(f"  top-1 minus the best single solver: mean {100 * np.mean(top):+.1f} points")
    out += mlir_only_lines(rows)
    for tag in ("1%", "5%"):
        few, ceil = f"few-shot {tag}, on the ceiling's unmeasured 20%", f"ceiling, on the same problems (few-shot {tag})"
        gaps = [(res[ceil]["efficiency"] - res[few]["efficiency"], res[ceil]["top1"] - res[few]["top1"])
                for _, _, res in rows if few in res]
        if gaps:
            g = np.array(gaps)
            out.append(f"few-shot {tag}: ceiling minus few-shot on the same problems: mean efficiency "
                       f"{100 * g[:, 0].mean():+.2f} points (worst {100 * g[:, 0].max():+.2f}), top-1 "
                       f"{100 * g[:, 1].mean():+.2f} points (worst {100 * g[:, 1].max():+.2f})")
    for a, b in SIBLINGS:
        cells = [r["held_out"][a] for r in results if a in r["held_out"]]
        sib = f"sibling {b}'s own model"
        d = [x[ADOPTED]["efficiency"] - x[sib]["efficiency"] for x in cells if sib in x and ADOPTED in x]
        if d:
            out.append(f"{a} held out: zero-shot (adopted) minus {sib}, mean efficiency {100 * np.mean(d):+.2f} points "
                       f"(worst {100 * min(d):+.2f})")
    return out


def mlir_only_lines(rows: list) -> list[str]:
    """Where a held-out file lists an MLIR implicit GEMM and nothing else for some problems (MI50's),
    the zero-shot rows on its other problems, and the means over every cell with those problems left
    out of that file's (runs before ``mlir_only`` have no such lines)."""
    hit = sorted({d for _, d, res in rows for x in res.values() if x.get("mlir_only", 0) > 0})
    if not hit:
        return []
    out = ["\nProblems whose entry lists an MLIR implicit GEMM and nothing else (no other solver, not even a "
           "GEMM: the file says nothing of the others there, and any other pick counts 0):"]
    for d in hit:
        cells = [res for _, e, res in rows if e == d]
        share = np.mean([next(iter(res.values()))["mlir_only"] for res in cells])
        out.append(f"  {d}: {100 * share:.1f}% of its problems (mean over its {len(cells)} cells); on its other problems "
                   "(top-1 / efficiency / unlisted %):")
        for n in (ZERO, FALLBACK, AS_SERVED):
            got = [res[n].get("without_mlir_only", res[n]) for res in cells if n in res]
            if got:
                out.append(f"    {n}: " + " / ".join(f"{100 * np.mean([g[k] for g in got]):.{1 if k == 'top1' else 2}f}"
                                                    for k in ("top1", "efficiency", "not_listed")))
    got = [res[AS_SERVED].get("without_mlir_only", res[AS_SERVED]) for _, _, res in rows if AS_SERVED in res]
    base = [res[FALLBACK].get("without_mlir_only", res[FALLBACK]) for _, _, res in rows
            if AS_SERVED in res and FALLBACK in res]
    if got:
        line = (f"  every cell, those problems left out: {AS_SERVED}: "
                + " / ".join(f"{100 * np.mean([g[k] for g in got]):.{1 if k == 'top1' else 2}f}"
                             for k in ("top1", "efficiency", "not_listed")))
        if len(base) == len(got):
            gain = np.mean([g["efficiency"] - b["efficiency"] for g, b in zip(got, base)])
            line += f"; minus today's fallback {100 * gain:+.2f}"
        out.append(line)
    return out


def print_tables(results: list) -> None:
    """The tables and summary of a run (and of its product-protocol rows, ``--zero-only``)."""
    for line in [*table_md(results), *summary(results)]:
        print(line)
    product = [{**r, "held_out": r["held_out_product"]} for r in results if "held_out_product" in r]
    if product:
        print("\nThe same rows in the product's protocol (every solver of the arch's table MIOpen's rules keep):")
        for line in [*table_md(product), *summary(product)]:
            print(line)
    available = [{**r, "held_out": r["held_out_available"]} for r in results if "held_out_available" in r]
    if available:
        print("\nThe same rows in the product's protocol with op.available set to the held-out GPU's own find-db "
              "(the table's solvers its file names):")
        for line in [*table_md(available), *summary(available)]:
            print(line)
    registry = [{**r, "held_out": r["held_out_registry"]} for r in results if "held_out_registry" in r]
    if registry:
        print("\nThe same rows in the product's protocol, were each held-out arch one ckheur ships no table of (its "
              "table MIOpen's registry cut by the device rules; its solvers the file never lists, which another of "
              "the six does, are candidates scored 0; +N: how many such solvers the data-type rules keep):")
        for r in registry:
            print(f"  {r['direction']} {r['dtype']}: " + "; ".join(
                f"{held} +{len(names)}" for held, names in r["registry_unlisted"].items()))
        for line in [*table_md(registry), *summary(registry)]:
            print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/ckheur_logo_data", help="datasets (the six files imported once)")
    ap.add_argument("--fdb", default=str(SHARED), help="folder of the six find-db files")
    ap.add_argument("--tunanet", default=str(TUNANET), help="folder of MIOpen's TunaNet files")
    ap.add_argument("--directions", nargs="+", default=["fwd", "bwd_data", "bwd_weight"])
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "fp16"])
    ap.add_argument("--max-problems", type=int, default=1500, help="per device, direction and dtype, at random")
    ap.add_argument("--budgets", nargs="+", type=float, default=[0.01, 0.05])
    ap.add_argument("--jobs", type=int, default=1, help="directions x dtypes in parallel processes")
    ap.add_argument("--threads", type=int, default=2, help="LightGBM threads per process")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--zero-only", action="store_true", help="only the rows a GPU never measured gets, in bench_logo's "
                    "protocol and in the product's (every solver of the arch's table as candidates)")
    ap.add_argument("--leaves", type=int, default=None, help="num_leaves of every model trained here (default: "
                    f"bench_unseen's small recipe, {RECIPE['num_leaves']})")
    ap.add_argument("--trees", type=int, default=None, help=f"max_trees of every model trained here (default "
                    f"{RECIPE['max_trees']})")
    ap.add_argument("--out", default=None, help="write the results as JSON")
    ap.add_argument("--from-json", default=None, help="print the tables and summary of an earlier run's --out file "
                    "(rows this version derives from that run's, as AS_SERVED, added), training nothing")
    args = ap.parse_args()
    if args.from_json:
        results = json.loads(Path(args.from_json).read_text())
        cfgs = {d: device_config(d) for d in DEVICES}
        for r in results:
            for held, res in r["held_out"].items():
                if AS_SERVED not in res and as_served(res, held, cfgs) is not None:
                    res[AS_SERVED] = as_served(res, held, cfgs)
        print(f"leave-one-GPU-out over {len(DEVICES)} devices, from {args.from_json} ({len(results)} direction x dtype "
              "cells); nothing trained")
        print_tables(results)
        return
    data = Path(args.data)
    todo = [Path(args.fdb) / f"{name}.HIP.fdb.txt.bz2" for arch, _, name in DEVICES.values()
            if not (data / f"miopen_fwd_fp32_{arch}" / f"{name}.parquet").exists()]
    if todo:
        with ProcessPoolExecutor(max_workers=max(1, min(args.jobs, len(todo)))) as ex:
            for r in ex.map(import_file, todo, [data] * len(todo)):
                print(f"imported {r['file']} in {r['wall_s']} s", flush=True)
    recipe = {k: v for k, v in (("num_leaves", args.leaves), ("max_trees", args.trees)) if v is not None}
    jobs = [(str(data), d, t, args.max_problems, args.seed, args.budgets, args.threads, args.tunanet, args.zero_only,
             args.fdb, recipe) for d in args.directions for t in args.dtypes]
    t0 = time.perf_counter()
    results = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        for r in ex.map(one_op, jobs):
            results.append(r)
            if args.out:  # kept as each finishes: a run cut short keeps what it measured
                Path(args.out).write_text(json.dumps(results, indent=1, default=float))
    print(f"\nleave-one-GPU-out over {len(DEVICES)} devices, at most {args.max_problems} problems per device, "
          f"direction and dtype (drawn at random, seed {args.seed}); {time.perf_counter() - t0:.0f} s")
    print_tables(results)


if __name__ == "__main__":
    main()
