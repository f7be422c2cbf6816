"""backend=replay: serve measurements from existing datasets (ours or CK CSVs).

Pairs absent from the data get status ``missing``; measured failures replay as failures, and
each pair's workspace bytes as recorded. Replayed simulated rows stay labeled ``sim``; data
mixing simulated and measured rows is refused, so that no simulated time passes for measured.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ckheur.backends import BackendError, Measurer, Results
from ckheur.data.dataset import SIMULATED
from ckheur.families import get_family


def make(cfg: Mapping[str, Any], op: Mapping[str, Any], arch: Mapping[str, Any]) -> Measurer:
    from ckheur.data.dataset import read_dataset

    if not cfg.get("paths"):
        raise BackendError("backend=replay needs backend.paths=[dataset or CK CSV, ...]")
    from ckheur.families.hardware import one_device

    df = read_dataset(cfg["paths"])
    df = df[(df.op.astype(str) == f"{op['family']}/{op['direction']}") & (df.arch == arch["name"])
            & (df.dtype == op["dtype"])]
    if df.empty:  # another op's, dtype's or arch's measurements: nothing here could ever answer a pair
        raise BackendError(f"backend.paths ({', '.join(map(str, cfg['paths']))}) hold no measurements of "
                           f"{op['family']}/{op['direction']} {op['dtype']} on {arch['name']}: replay reads the "
                           "job's own op, dtype and arch")
    device, note = one_device(df, arch)  # one device's times: MI50's and MI60's rows of a pair are not one
    if note:
        print(f"backend=replay: {note}")
        df = df[device]
    sources = ", ".join(map(str, cfg["paths"]))
    labels = set(map(str, df["backend"].unique()))
    simulated = labels == {SIMULATED}
    if SIMULATED in labels and not simulated:
        raise BackendError(f"backend.paths ({sources}) mix simulated (backend {SIMULATED}) and measured rows: "
                           "replay them separately, so simulated times stay labeled")
    cols = [*get_family(op["family"]).problems.FIELDS, "kernel"]
    results = ["latency_ms", "latency_spread_ms", "status", "error", "workspace_bytes"]
    table = {tuple(r[:-5]): r[-5:] for r in df[cols + results].itertuples(index=False, name=None)}

    def measure(pairs: Sequence[tuple[Any, Any]]) -> Results:
        out = Results()
        for p, k in pairs:
            hit = table.get((*p.key(), k.name))
            if hit is None:
                out.add(float("nan"), "missing", f"not in replayed data ({sources})")
            else:
                lat, spread, status, error, workspace = hit
                out.add(float(lat), str(status), "" if error is None else str(error), float(spread), int(workspace))
        return out

    return Measurer(name=SIMULATED if simulated else "replay", measure=measure, batch_pairs=int(cfg["batch_pairs"]))
