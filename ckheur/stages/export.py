"""stage=export: a model bundle as a self-contained C99 package (built and checked against
Python) or as CK's dispatcher model folder (``ckheur.c_export.checked``); or a MIOpen tuning
database's measurements as MIOpen's user find-db (``ckheur.integrations.miopen.find_db.write_user_find_db``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckheur.stages import Context, StageError

OUTPUTS = ()  # the package or find-db goes to export.output


def run(cfg: Any, ctx: Context) -> dict:
    """Export the op's model (or export.model_dir) to export.output."""
    from ckheur.families.hardware import device_label
    from ckheur.job import Job
    from ckheur.learn.bundle import ANSWERS, bundle_file, load_spec
    from ckheur.selection.predicting import bundle_dir, other_device_of_arch, serving, sibling_words

    job, opts = Job.from_config(cfg), cfg.export
    if str(opts.format) == "miopen_find_db":
        return _user_find_db(cfg, job)
    if str(opts.format) == "dataset":
        return _dataset(cfg, job)
    from ckheur.stages.common import note_available

    note_available(job)
    model_dir = bundle_dir(job, models=cfg.paths.models, sim_models=cfg.paths.sim_models,
                           explicit=opts.model_dir)
    served = (serving(job, cfg.paths.models) if not opts.model_dir and not model_dir.is_dir()
              and not job.family.analytic else None)  # as stage=predict (selector_for) serves
    if served is not None:  # a GPU without a bundle of its own: what stage=predict serves it, for this device
        what = served.what + (", without its remembered answers," if served.nearest else "")
        print(f"export: {job.arch_name} has no bundle of its own: exporting {what} {served.path} for "
              f"{device_label(job.arch)} (its table's solvers{'' if served.nearest else ', its descriptors'})"
              f"{': ' + served.why if served.why else ''}")
        return _device_export(cfg, job, served.path, answers=False)
    if not model_dir.is_dir():
        raise StageError(f"model dir {model_dir} not found: train one (stage=train) or give export.model_dir=")
    spec = load_spec(model_dir)  # decides how it is exported; the export then loads the whole bundle once
    # GPU descriptors as features, for any GPU or made for another device of the arch: as predict ranks with it
    if spec.get("across_gpus") or other_device_of_arch(spec, job):
        what = "a model across GPUs" if spec.get("across_gpus") else f"made for {device_label(spec['arch'])}"
        print(f"export: {model_dir} is {what}: exporting it for {device_label(job.arch)}, its descriptors and its "
              f"table's solvers, as stage=predict ranks with it")
        return _device_export(cfg, job, model_dir, answers=not spec.get("across_gpus"))
    if not opts.model_dir:  # the arch's own bundle, which another device of the arch may have learned from
        words = sibling_words(job, spec.get("trained_devices") or [], spec.get("trained_archs") or [],
                              bundle_file(model_dir, ANSWERS) is not None)
        if words:
            print(f"export: {model_dir}{words}")
    return _export(cfg, job, model_dir)


def _device_export(cfg: Any, job: Any, src: Path, answers: bool) -> dict:
    """``src`` exported as a bundle of the job's device alone (``device_bundle``, with its remembered
    answers or without), written to a private folder first: as stage=predict ranks with it."""
    from ckheur.files import private_folder
    from ckheur.selection.predicting import device_bundle

    with private_folder() as tmp:
        return _export(cfg, job, device_bundle(src, job, tmp / job.model_name, answers=answers))


def _export(cfg: Any, job: Any, model_dir: Path) -> dict:
    """The bundle ``model_dir`` as a C package or CK's dispatcher folder (export.format)."""
    from ckheur.c_export.checked import export_c_package
    from ckheur.integrations.ck.model_folder import export_ck_folder, folder_name
    from ckheur.selection.predicting import applicability_of

    opts = cfg.export
    if int(opts.check_problems) < 1:  # the check is what shows the package ranks as Python does
        raise StageError(f"export.check_problems={opts.check_problems}: must be an integer >= 1 (export.build=false "
                         "writes the sources without building or checking)")
    if str(opts.format) == "ck":
        out = Path(opts.output or Path("exports") / "ck" / folder_name(job.op, job.arch_name))
        return export_ck_folder(model_dir, out, job.arch, overwrite=bool(opts.overwrite),
                                check_problems=int(opts.check_problems), seed=int(opts.seed))
    # op.applicability (op.listed, op.available) on the command line reach a bundle trained without them, as in stage=predict
    op = {k: v for k, v in applicability_of(job.op).items() if k in ("applicability", "listed", "available")}
    return export_c_package(model_dir, Path(opts.output or Path("exports") / job.model_name), name=opts.name,
                            overwrite=bool(opts.overwrite), build=bool(opts.build),
                            check_problems=int(opts.check_problems), seed=int(opts.seed), **op)


def _user_find_db(cfg: Any, job: Any) -> dict:
    """The tuning database's measurements into the user find-db export.output."""
    from ckheur.integrations.miopen.find_db import write_user_find_db

    opts = cfg.export
    if not opts.output:
        raise StageError(f"export.format=miopen_find_db needs export.output=<the user find-db>: MIOpen reads "
                         f"{job.arch_name}<CUs>.HIP.<MIOpen version>.ufdb.txt in $MIOPEN_USER_DB_PATH (default "
                         "~/.config/miopen/)")
    got = write_user_find_db(_tuning_db(cfg, job), Path(opts.output), job, merge=bool(opts.merge))
    print(f"export: {got['entries']} measurements of {got['problems']} problems from {got['database']} into "
          f"{got['find_db']} ({got['added']} keys added, {got['updated']} updated, {got['kept']} other lines kept"
          + (f"; its previous text: {got['backup']}" if got["backup"] else "")
          + ("; nothing changed, the file was left as it was" if not got["changed"] else "") + ")")
    if got["workspace_unknown"]:
        print(f"export: left out {got['workspace_unknown']} measurements whose workspace is unknown (MIOpen allocates "
              "by it; backend=command records it with backend.workspace_regex)")
    return got


def _tuning_db(cfg: Any, job: Any) -> Path | str:
    """export.tuning_db (a folder or a database URL), else stage=tune's."""
    from ckheur.stages.common import db_dir, folder_or_url

    return folder_or_url(cfg.export.tuning_db) if cfg.export.tuning_db else db_dir(cfg, job)


def _dataset(cfg: Any, job: Any) -> dict:
    """The job's campaign (or the URL's ?campaign=) of the tuning database as the dataset folder export.output."""
    from ckheur.data.database import campaign_of, mask_url
    from ckheur.data.tuning_db import export_dataset
    from ckheur.stages.common import default_campaign

    if not cfg.export.output:
        raise StageError("export.format=dataset needs export.output=<a new or empty folder>")
    db = _tuning_db(cfg, job)
    if not isinstance(db, str):
        raise StageError(f"export.format=dataset: the tuning database {db} is a folder, already a dataset; give "
                         "export.tuning_db=<database URL> (sqlite:///<path>.db or postgresql://...)")
    got = export_dataset(db, campaign_of(db) or default_campaign(job), cfg.export.output)
    print(f"export: {got['rows']} measurements of campaign {got['campaign']} from {mask_url(db)} into the dataset "
          f"folder {got['folder']}")
    return got
