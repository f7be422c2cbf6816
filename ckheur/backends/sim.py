"""backend=sim: the calibrated analytic model (ckheur.sim) with seeded noise. Not a measurement."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ckheur.backends import BackendError, Measurer, Results
from ckheur.parts import UNKNOWN_WORKSPACE
from ckheur.sim import simulate


def make(cfg: Mapping[str, Any], op: Mapping[str, Any], arch: Mapping[str, Any]) -> Measurer:
    if op["family"] == "miopen":  # solvers have no tiles to model: only measurements of them exist
        raise BackendError("backend=sim models CK's tile kernels, not MIOpen's solvers: for op=miopen/... use "
                           "backend=command (MIOpenDriver) or backend=replay (an imported find-db)")
    params = {**cfg["params"], "dtype": op["dtype"]}

    def measure(pairs: Sequence[tuple[Any, Any]]) -> Results:
        # Simulate the grid of distinct problems x kernels in the batch, then gather the pairs.
        pidx: dict[tuple, int] = {}
        kidx: dict[str, int] = {}
        probs, kerns = [], []
        for p, k in pairs:
            if p.key() not in pidx:
                pidx[p.key()] = len(probs)
                probs.append(p)
            if k.name not in kidx:
                kidx[k.name] = len(kerns)
                kerns.append(k)
        grid = simulate(probs, kerns, arch, params, op["direction"], seed=int(cfg["seed"]))
        lat = grid[[pidx[p.key()] for p, _ in pairs], [kidx[k.name] for _, k in pairs]]
        n = len(pairs)
        return Results(latency_ms=lat.tolist(), latency_spread_ms=[float("nan")] * n,
                       status=["ok"] * n, error=[""] * n, workspace_bytes=[UNKNOWN_WORKSPACE] * n)

    return Measurer(name="sim", measure=measure, warmup=0, repeat=1, batch_pairs=int(cfg["batch_pairs"]))

