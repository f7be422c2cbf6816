"""stage=export: a model bundle as a self-contained C99 package (built and checked against
Python) or as CK's dispatcher model folder (``ckheur.models.exporting``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckheur.stages import Context, StageError


def run(cfg: Any, ctx: Context) -> dict:
    """Export the op's model (or export.model_dir) to export.output."""
    from ckheur.job import Job
    from ckheur.models.ck_format import folder_name
    from ckheur.models.exporting import export_c_package, export_ck_folder
    from ckheur.models.predicting import bundle_dir

    job, opts = Job.from_config(cfg), cfg.export
    model_dir = bundle_dir(job, bundles=cfg.paths.bundles, sim_bundles=cfg.paths.sim_bundles,
                           explicit=opts.model_dir)
    if not model_dir.is_dir():
        raise StageError(f"model dir {model_dir} not found: train one (stage=train) or give export.model_dir=")
    if str(opts.format) == "ck":
        out = Path(opts.output or Path("exports") / "ck" / folder_name(job.op, job.arch_name))
        return export_ck_folder(model_dir, out, job.arch, overwrite=bool(opts.overwrite),
                                check_problems=int(opts.check_problems), seed=int(opts.seed))
    return export_c_package(model_dir, Path(opts.output or Path("exports") / job.model_name), name=opts.name,
                            overwrite=bool(opts.overwrite), build=bool(opts.build),
                            check_problems=int(opts.check_problems), seed=int(opts.seed))
