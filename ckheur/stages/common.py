"""What several stages share: turning the config into a selector, a problem, a sweep plan, a
tuning database path. Stages import this module, never each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckheur.stages import StageError, plain


def note_available(job: Any) -> None:
    """Print what ``op.available`` (MIOpen: the solvers the user's MIOpen ships) keeps of the job's
    table and which it drops; nothing when it is not set."""
    note = getattr(job.family.kernels, "available_note", None)
    line = note(job.op, job.arch) if note is not None else ""
    if line:
        print(line)


def selector_from_cfg(cfg: Any, job: Any, model_dir: str | None = None, tuning_db: str | None = None,
                      find_db: str | None = None) -> tuple[Any, str]:
    """The job's selector and its label (``ckheur.selection.predicting.selector_for``): ``model_dir``,
    else predict.model_dir, else the bundle under paths.models / paths.sim_models, else analytic."""
    from ckheur.selection.predicting import selector_for

    note_available(job)
    return selector_for(job, models=cfg.paths.models, sim_models=cfg.paths.sim_models,
                        model_dir=model_dir or cfg.predict.model_dir, tuning_db=tuning_db,
                        find_db=find_db)


def problem_from_cfg(cfg: Any, job: Any) -> Any:
    """The single problem given as problem.<field>=... or problem="<MIOpenDriver line>" (refused
    when it contradicts the op's direction or data type), or None."""
    from ckheur.selection.selector import as_problem

    node = plain(cfg.problem)
    line = node.pop("driver_line", None)
    fields = {k: v for k, v in node.items() if v is not None}
    if line and fields:
        raise StageError("give the problem either as problem=\"<MIOpenDriver line>\" or as problem.<field>=..., not both")
    if line:
        if not hasattr(job.family.problems, "from_text"):
            raise StageError(f"problem=<MIOpenDriver line> is for convolutions; give {job.family.name} fields as problem.<field>=...")
        return as_problem(str(line), job.family, job.direction, job.dtype)
    return as_problem(fields, job.family) if fields else None


def db_dir(cfg: Any, job: Any) -> Path | str:
    """The tuning database of the job: tune.db (a folder or a database URL), else a folder database
    already under paths.tuning (as earlier versions made), else the job's campaign in db.url."""
    if cfg.tune.db:
        return folder_or_url(cfg.tune.db)
    from ckheur.data.database import check_url

    old = Path(cfg.paths.tuning) / job.slug
    return old if (old / "tuning_db.json").exists() else check_url(str(cfg.db.url), "db.url")


def default_campaign(job: Any) -> str:
    """The job's campaign in a database (``database.campaign_name``): its slug, with the CU count on
    another device of the arch than its own (``miopen_fwd_fp32_gfx906_64cu``: MI60)."""
    from ckheur.data.database import campaign_name

    return campaign_name({"family": job.family.name, "direction": job.direction, "dtype": job.dtype,
                          "arch": job.arch_name}, int(job.arch.get("num_cus") or 0))


def folder_or_url(value: Any) -> Path | str:
    """A database URL as it is (``ckheur.data.database``), anything else as a folder path."""
    from ckheur.data.database import is_url

    return str(value) if is_url(str(value)) else Path(value)


def tuning_db_from_cfg(cfg: Any, job: Any, given: str | None) -> tuple[Any, str]:
    """The tuning database a stage serves from, opened for the job's device (``TuningDB``, read once,
    for the selector), and a line saying which: ``given`` (a path or URL), none for ``given`` = none,
    else the op's default (``db_dir``, where stage=tune writes) when it holds the op and device."""
    if given is not None and str(given).strip().lower() == "none":
        return None, "tuning database: off (tuning_db=none)"
    if given:  # opened for the job's device: another device's database is refused (MI50's, for MI60)
        from ckheur.data.tuning_db import TuningDB

        return TuningDB.open(folder_or_url(given), job.op, job.arch), f"tuning database: {given}"
    default = db_dir(cfg, job)  # (stage=tune with backend=sim writes beside it: never served by default)
    db, missing = _open_default(default, job)
    if missing is None:
        return db, f"tuning database: {_shown(default)} (the op's default, stage=tune's; tuning_db=none turns it off)"
    return None, f"tuning database: none yet: {missing}"


def _shown(db: Path | str) -> str:
    """A database as printed: a URL masked (``ckheur.data.database.mask_url``)."""
    from ckheur.data.database import mask_url

    return str(db) if isinstance(db, Path) else mask_url(db)


def _open_default(db: Path | str, job: Any) -> tuple[Any, str | None]:
    """(the job's database to serve from, opened for the job's device, None), or (None, why there is
    none): a database URL on the job's campaign (a database may hold only other ops'), a folder
    recorded on the job's device."""
    if isinstance(db, Path) and not db.exists():
        return None, f"{db} does not exist (stage=tune creates it)"
    from ckheur.data.tuning_db import TuningDB, TuningDBError

    try:
        return TuningDB.open(db, job.op, job.arch), None
    except TuningDBError as e:
        return None, str(e)


def plan_from_cfg(cfg: Any) -> Any:
    """The sweep plan of a config: the job's pool on the problem set, into sweep.output or the
    problem set's dataset under paths.data."""
    from ckheur.data.dataset import dataset_dir
    from ckheur.job import Job
    from ckheur.problems import load_problem_set
    from ckheur.sweeping import plan_sweep

    job, st = Job.from_config(cfg), cfg.sweep
    note_available(job)
    problems = load_problem_set(plain(cfg.problems), job.family, job.direction, job.dtype)
    out = folder_or_url(st.output) if st.output else dataset_dir(cfg.paths.data, job.op, job.arch_name,
                                                                   cfg.problems.name)
    return plan_sweep(job, problems, out, backend=plain(cfg.backend), overwrite=bool(st.overwrite),
                      retry_failed=bool(st.retry_failed))
