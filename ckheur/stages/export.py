"""stage=export: a model bundle as a self-contained C99 package, built and checked against Python."""

from __future__ import annotations

import csv
import io
import subprocess
import time
from pathlib import Path
from typing import Any

from ckheur.stages import Context, StageError, plain


def problems_csv(problems: list, fields: list[str]) -> str:
    """Problems as CSV with CK's field names (the input of ckheur_select)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(fields)
    for p in problems:
        w.writerow([getattr(p, f) for f in fields])
    return buf.getvalue()


def compare_with_python(selector: Any, problems: list, binary: Path, fields: list[str]) -> dict:
    """Run ckheur_select on the problems and compare its top-1 kernels and scores with the selector's."""
    r = subprocess.run([str(binary), "--k", "1"], input=problems_csv(problems, fields), capture_output=True,
                       text=True, timeout=600)
    if r.returncode not in (0, 1):
        raise StageError(f"{binary} failed (exit {r.returncode}): {r.stderr[-500:]}")
    c_rows = {int(row["row"]): (row["kernel"], float(row["score"])) for row in csv.DictReader(io.StringIO(r.stdout))}
    from ckheur.problems.base import ProblemError

    same = both_invalid = 0
    worst, mismatches = 0.0, []
    for i, p in enumerate(problems):
        try:
            ks, scores, _ = selector._scores(p)
        except ProblemError:
            both_invalid += i not in c_rows
            if i in c_rows:
                mismatches.append(f"{p.describe()}: Python rejects it, C ranks it")
            continue
        j = int(scores.argmax())
        if i not in c_rows:
            mismatches.append(f"{p.describe()}: C rejects it, Python ranks it")
            continue
        name, score = c_rows[i]
        worst = max(worst, abs(score - scores[j]) / max(abs(scores[j]), 1e-12))
        if name == ks[j].name:
            same += 1
        else:
            mismatches.append(f"{p.describe()}: C picks {name}, Python {ks[j].name}")
    return {"problems": len(problems), "same_top1": same, "both_invalid": both_invalid,
            "max_rel_score_diff": worst, "mismatches": mismatches}


def run(cfg: Any, ctx: Context) -> dict:
    """Export the op's model (or export.model_dir) to export.output; build and check it when a compiler exists."""
    from ckheur.files import private_folder, write_file
    from ckheur.models.compiled import build, compile_command, find_compiler
    from ckheur.models.export_c import export_bundle
    from ckheur.models.selector import Selector
    from ckheur.ops import get_family
    from ckheur.problems import random_problems
    from ckheur.stages.predict import default_model_dir

    op, opts = plain(cfg.op), cfg.export
    model_dir = default_model_dir(cfg, op, opts.model_dir)
    if not model_dir.is_dir():
        raise StageError(f"model dir {model_dir} not found: train one (stage=train) or give export.model_dir=")
    if str(opts.format) == "ck":
        return run_ck(cfg, model_dir)
    out = Path(opts.output or Path("exports") / op["model_name"])
    t0 = time.perf_counter()
    res = export_bundle(model_dir, out, opts.name, overwrite=bool(opts.overwrite))
    t_export = time.perf_counter() - t0
    print(f"export: {model_dir} -> {out}/ ({res.num_kernels} kernels, {res.num_trees} trees, "
          f"{res.source_bytes / 1e6:.2f} MB of source, {t_export:.1f} s)")
    for note in res.notes:
        print(f"export: NOTE {note}; the package says so")
    for f in res.files:
        print(f"  {f}")
    summary: dict = {"output": str(out), "name": res.name, "source_bytes": res.source_bytes,
                     "export_s": round(t_export, 2)}
    cc = find_compiler()
    srcs = [out / f"{res.name}.c", out / "ckheur_select.c"]
    command = " ".join(compile_command(cc or "cc", srcs, out / "ckheur_select", shared=False))
    if not opts.build or cc is None:
        print(f"export: not built ({'export.build=false' if cc else 'no C compiler found'}); build with:\n  {command}")
        return summary
    family = get_family(op["family"])
    selector = Selector.load(model_dir)
    groups = sorted({k.group for k in selector.kernels}, key=str)
    probs = random_problems(family, groups, int(opts.check_problems), int(opts.seed))
    # The check runs a binary built in a private folder from the sources just written, never one
    # another user could have swapped in the output folder; the program is then copied there.
    t0 = time.perf_counter()
    with private_folder("ckheur-export-") as tmp:
        for src in srcs + [out / f"{res.name}.h", out / "ckheur_abi.h"]:
            write_file(tmp / src.name, src.read_bytes())
        built = build(tmp, res.name, cc, shared=False)
        t_build = time.perf_counter() - t0
        check = compare_with_python(selector, probs, built, list(family.problems.FIELDS))
        binary = write_file(out / "ckheur_select", built.read_bytes(), mode=0o755)
    print(f"export: built {binary} in {t_build:.1f} s ({command})")
    print(f"export: check against the Python selector on {check['problems']} seeded random problems: "
          f"same top-1 kernel {check['same_top1']}/{check['problems'] - check['both_invalid']}, "
          f"max relative score difference {check['max_rel_score_diff']:.1e} "
          f"({check['both_invalid']} rejected by both)")
    summary.update(build_s=round(t_build, 2), check=check)
    if check["mismatches"]:
        raise StageError("the compiled selector disagrees with Python:\n  " + "\n  ".join(check["mismatches"][:10]))
    return summary


def run_ck(cfg: Any, model_dir: Path) -> dict:
    """Write the bundle as CK's dispatcher model folder, then rank seeded random problems with it
    the way CK's predictor does and compare with the Python selector."""
    from ckheur.models.ck_format import CKModel, export_ck, folder_name
    from ckheur.models.selector import Selector
    from ckheur.ops import get_family
    from ckheur.problems import random_problems

    op, arch, opts = plain(cfg.op), plain(cfg.arch), cfg.export
    out = Path(opts.output or Path("exports") / "ck" / folder_name(op, arch["name"]))
    res = export_ck(model_dir, out, overwrite=bool(opts.overwrite))
    print(f"export: {model_dir} -> {out}/ in CK's dispatcher format ({res['trees']} trees, {res['features']} CK "
          f"features): model_tflops.lgbm, feature_spec.json, train_manifest.json")
    selector = Selector.load(model_dir)
    ck = CKModel.load(out, arch)
    groups = sorted({k.group for k in selector.kernels}, key=str)
    problems = random_problems(get_family(op["family"]), groups, int(opts.check_problems), int(opts.seed))
    same = ranked = 0
    for p in problems:
        try:
            ks = selector._ranking(p)[0]
        except ValueError:
            continue
        ranked += 1
        same += [n for n, _ in ck.rank(p, ks)] == [k.name for k in ks]
    print(f"export: ranked as CK's predictor ranks (its features, LightGBM, expm1, sorted): the same order as "
          f"the Python selector on {same}/{ranked} seeded random problems")
    if same != ranked:
        raise StageError(f"the CK folder ranks {ranked - same} of {ranked} problems differently from the bundle")
    return {**res, "check": {"problems": ranked, "same_ranking": same}}
