#!/usr/bin/env python
"""Levers for the zero-shot and few-shot rows of bench_logo.py, measured on one direction and dtype
(issue 49, items 3-5): bench_logo's tables, models and protocol, with variants side by side.

    python bench/bench_logo_levers.py DIRECTION DTYPE CAP SCORE_CAP VARIANTS [HELD|ALL] [lp] [ens]

CAP: problems loaded per device (at random, seed 0); SCORE_CAP: of the held-out device's, scored.
VARIANTS (comma-separated), zero-shot models across the other five:
  base (bench_logo's), kind (+ the solver-kind columns, solvers.KIND_FEATURES), gen (+ matrix cores
  and wave size of the arch config), kindgen, kind_nosid (miopen+kinds' columns: kinds, no solver
  id), kindgen_nosid; a suffix %N trains on N problems of each other device, @nearW weighs the
  nearest device's rows W; kind_drop: one model with the kind columns and the solver id, the id
  missing on half of its training rows at random and for a solver no training device lists. With kind and kind_nosid (or base and kind_nosid) also the hybrid: a
  solver no training device lists ranked by the kinds model (what bench_logo adopted), and the
  same with that solver's score halfway between the two models' (hyb-half).
  few:FEATURES:WEIGHT[:EXPLORE][:ft|:ftall]: few-shot at 5% (sweep.active.ranker's sweep with
  EXPLORE x floor(sqrt(n)) explored solvers, default 0.5; the sweep's rows weigh WEIGHT; ft: more
  trees on the sweep's rows only from the zero-shot model, ftall: on the five and the sweep's).
lp: also a classifier of "listed or not" across the five combined with the ranking; ens: the mean
of two models' scores. Data: bench_logo's imports (LOGO_DATA: --data of bench_logo.py, default
below); LOGO_OUT: a folder for the results as JSON (none written without it).
"""
import os, sys, time, json, dataclasses
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np
from bench_logo import (DEVICES, BUNDLED, ceiling_split, device_config, load_device, with_hw, rows_of,
                        nearest, sweep_rows)
from bench_unseen import RECIPE, fit_on, predict_rows, report, ranked_rows, bundle_scores
from ckheur.learn.training import concat_tables
from ckheur.families.miopen.solvers import kind_of, KIND_FEATURES
from bench_miopen_fdb import ROOT

def main() -> None:
    """Every variant on every held-out device of one direction and dtype; means printed, JSON written."""
    direction, dtype = sys.argv[1], sys.argv[2]
    cap = int(sys.argv[3]); score_cap = int(sys.argv[4]); variants = sys.argv[5].split(',')
    helds = sys.argv[6].split(',') if len(sys.argv) > 6 and sys.argv[6] != 'ALL' else list(DEVICES)
    seed = 0
    DATA = Path(os.environ.get('LOGO_DATA', '/tmp/ckheur_logo_data'))
    from ckheur.stages import compose_config, plain
    model = {**plain(compose_config([f"op=miopen/{direction}"]).model), **RECIPE, "threads": 2}
    cfgs = {d: device_config(d) for d in DEVICES}
    t0 = time.perf_counter()
    tables = {d: load_device(DATA, d, direction, dtype, cap, seed) for d in DEVICES}
    union = {}
    for tb in tables.values():
        for k in tb.kernels: union.setdefault(k.name, k)
    union_list = sorted(union.values(), key=lambda k: k.solver_id)
    hw = {d: with_hw(tb, cfgs[d], dtype, union_list) for d, tb in tables.items()}
    kinds = np.array([kind_of(k.name) for k in union_list], dtype=np.float32)

    def extend(t, d, kind=True, gen=True, drop_solver=False):
        cols, names = [t.X], list(t.feature_names)
        if kind:
            cols.append(kinds[t.kid]); names += list(KIND_FEATURES)
        if gen:
            c = cfgs[d]
            g = np.array([float(bool(c.get('matrix_cores'))), float(c['wavefront_size']) / 64], dtype=np.float32)
            cols.append(np.broadcast_to(g, (len(t.X), 2))); names += ['hw_matrix_cores', 'hw_wave64']
        X = np.hstack(cols)
        if drop_solver:
            i = names.index('solver'); X = np.delete(X, i, axis=1); names.pop(i)
        return dataclasses.replace(t, X=np.ascontiguousarray(X), feature_names=names)

    VAR = {'base': dict(kind=False, gen=False), 'kind': dict(kind=True, gen=False), 'kindgen': dict(kind=True, gen=True),
           'gen': dict(kind=False, gen=True), 'kindgen_nosid': dict(kind=True, gen=True, drop_solver=True),
           'kind_nosid': dict(kind=True, gen=False, drop_solver=True), 'kind_drop': dict(kind=True, gen=False)}

    out = {}
    for held in helds:
        tb = tables[held]; others = [d for d in DEVICES if d != held]
        # scored problems: at most score_cap of the held device's
        P = len(tb.problems)
        sp = np.sort(np.random.default_rng(seed + 3).choice(P, size=min(P, score_cap), replace=False))
        rows = np.flatnonzero(np.isin(tb.pid, sp))
        kept = ranked_rows(tb, tb.op, rows)
        res = {}
        def add(name, scores, r=rows, k=None):
            k = kept if k is None else k
            res[name] = report(tb, r, np.where(k & tb.listed[tb.kid[r]], scores, -np.inf))
        fallback = nearest(held, [d for d in others if DEVICES[d][0] in BUNDLED], cfgs, dtype)
        bundle = ROOT / "models" / f"miopen_{direction}_{dtype}_{DEVICES[fallback][0]}"
        bs = bundle_scores(bundle, tb)[0]
        res['bundle'] = report(tb, rows, np.where(tb.listed[tb.kid[rows]], bs[rows], -np.inf))
        zs = {}
        for v in variants:
            if v.startswith('few'):
                continue
            spec = VAR[v.split('@')[0].split('%')[0]]
            tcap = int(v.split('%')[1].split('@')[0]) if '%' in v else None
            def trows(d):
                t = tables[d]; ok = t.listed[t.kid]
                if tcap and len(t.problems) > tcap:
                    keep = np.random.default_rng(seed + 11).choice(len(t.problems), size=tcap, replace=False)
                    ok = ok & np.isin(t.pid, keep)
                return np.flatnonzero(ok)
            nw = float(v.split('@near')[1]) if '@near' in v else None
            near = nearest(held, others, cfgs, dtype)
            tr = [extend(rows_of(hw[d], trows(d), nw if d == near else (1.0 if nw else None)), d, **spec) for d in others]
            mine = extend(hw[held], held, **spec)
            fit_t = concat_tables(tr)
            if v.startswith('kind_drop'):
                # one model, two paths: the solver id read as missing on half of the training rows (the
                # kind columns must carry them), and on the held-out device for a solver no row lists
                sc = fit_t.feature_names.index('solver')
                X = fit_t.X.copy()
                X[np.random.default_rng(seed + 5).random(len(X)) < 0.5, sc] = np.nan
                fit_t = dataclasses.replace(fit_t, X=X)
                seen_k = np.zeros(len(union_list), bool)
                for t in tr:
                    seen_k[np.unique(t.kid[t.tflops > 0])] = True
                Xm = mine.X.copy()
                Xm[~seen_k[mine.kid], sc] = np.nan
                mine = dataclasses.replace(mine, X=Xm)
            zero, _ = fit_on(fit_t, None, model, seed)
            z = predict_rows(zero, mine, np.arange(len(tb.pid)))
            zs[v] = (z, zero, tr, mine)
            add('zero ' + v, z[rows])
            if 'lp' in sys.argv[7:]:
                from ckheur.threads import lightgbm
                lgb = lightgbm()
                allt = concat_tables(tr)
                cat = [allt.feature_names.index(c) for c in ("solver", "algorithm", "implementation") if c in allt.feature_names]
                clf = lgb.train({'objective': 'binary', 'num_leaves': 15, 'learning_rate': 0.15, 'verbose': -1,
                                 'num_threads': 2, 'seed': seed, 'min_data_in_leaf': 20},
                                lgb.Dataset(allt.X, (allt.tflops > 0).astype(float), categorical_feature=cat), 200)
                pl = clf.predict(mine.X[rows])
                add('zero ' + v + ' *p', z[rows] * pl)
                add('zero ' + v + ' p>.5 first', z[rows] + 10 * (pl > 0.5))
                add('zero ' + v + ' p>.3 first', z[rows] + 10 * (pl > 0.3))
        for a, b in (('kind', 'kind_nosid'), ('base', 'kind_nosid'), ('kindgen', 'kindgen_nosid')):
            if a in zs and b in zs:
                seen = np.zeros(len(union_list), bool)
                for t in zs[a][2]:
                    seen[np.unique(t.kid[t.tflops > 0])] = True
                zh = np.where(seen[tb.kid], zs[a][0], zs[b][0])
                zs['hyb_' + a] = (zh, None, zs[a][2], zs[a][3])
                add(f'zero hyb {a}|{b}', zh[rows])
                # shrunk: an unseen solver's score halfway between the two models' (the id model reads it blind)
                add(f'zero hyb-half {a}|{b}', np.where(seen[tb.kid], zs[a][0], (zs[a][0] + zs[b][0]) / 2)[rows])
        if 'ens' in sys.argv[7:] and len(zs) > 1:
            for a, b in (('base', 'kind_nosid'), ('kind', 'kind_nosid')):
                if a in zs and b in zs:
                    add(f'zero ens {a}+{b}', (zs[a][0] + zs[b][0])[rows] / 2)
        # few-shot variants: few:<feature variant>:<weight>[:ft]
        test = ceiling_split(len(tb.problems), seed)
        for v in variants:
            if not v.startswith('few'):
                continue
            parts = v.split(':')
            _, fv, w = parts[:3]
            explore = float(parts[3]) if len(parts) > 3 else 0.5
            z, zero, tr, mine = zs[fv]
            allrows = np.arange(len(tb.pid))
            kept_all = ranked_rows(tb, tb.op, allrows)
            swept = sweep_rows(tb, kept_all, z, 0.05, seed, explore)
            measured = np.zeros(len(tb.problems), bool); measured[tb.pid[swept]] = True
            both = np.flatnonzero(test[tb.pid] & ~measured[tb.pid])
            if 'ft' in parts[4:]:  # more trees on the sweep's rows only, from the zero-shot model
                few, _ = fit_on(rows_of(mine, swept), None, {**model, 'max_trees': 200}, seed, init_model=zero)
            elif 'ftall' in parts[4:]:
                few, _ = fit_on(concat_tables([*tr, rows_of(mine, swept, float(w))]), None, {**model, 'max_trees': 200}, seed, init_model=zero)
            else:
                few, _ = fit_on(concat_tables([*tr, rows_of(mine, swept, float(w))]), None, model, seed)
            add('few5 ' + v, predict_rows(few, mine, both), both, kept_all[both])
            if 'ceil' not in res:
                ceiling, _ = fit_on(mine, np.flatnonzero(~test[tb.pid] & tb.listed[tb.kid]), model, seed)
                add('ceil (few5 problems)', predict_rows(ceiling, mine, both), both, np.ones(len(both), bool))
        out[held] = res
        print(f"{direction} {dtype} {held} ({time.perf_counter()-t0:.0f}s): " + "; ".join(
            f"{n}: {100*r['top1']:.1f}/{100*r['efficiency']:.2f}/{100*r['not_listed']:.2f}" for n, r in res.items()), flush=True)
    names = list(dict.fromkeys(n for r in out.values() for n in r))
    for n in names:
        v = [r[n] for r in out.values() if n in r]
        print(f"MEAN {n:35s} top1 {100*np.mean([x['top1'] for x in v]):.1f} eff {100*np.mean([x['efficiency'] for x in v]):.2f} unl {100*np.mean([x['not_listed'] for x in v]):.2f}")
    if os.environ.get('LOGO_OUT'):  # the results as JSON, in the folder named
        Path(os.environ['LOGO_OUT'], f'logo_levers_{direction}_{dtype}_{cap}_{score_cap}_{sys.argv[5].replace(":","-").replace(",","_")}.json').write_text(json.dumps(out))


if __name__ == "__main__":
    main()
