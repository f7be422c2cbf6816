"""The config schema of MIOpen solver ops (``conf/op/miopen/*.yaml``; their solver tables: ``solver_tables/``), registered by ``ckheur.families``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from ckheur.config import Applicability, DType, Direction


@dataclass
class SolverSchema:
    """One MIOpen solver of an op's table: MIOpen's name, a stable id, and its traits."""

    name: str = MISSING
    id: int = MISSING  # stable across arches: the model's categorical code for the solver
    algorithm: str = MISSING  # direct, implicit_gemm, winograd, gemm, fft
    implementation: str = MISSING  # asm, hip, ck, mlir, opencl, rocblas, naive, other
    workspace: bool = False  # asks MIOpen for a workspace
    miopen_id: int = 0  # MIOpen's own registry id (src/solver.cpp); 0: not recorded (MIOpen reserves 0)


@dataclass
class MIOpenOpSchema:
    """MIOpen convolution solvers of one direction and data type, per arch (from find-db files)."""

    family: str = "miopen"
    direction: Direction = MISSING
    dtype: DType = DType.fp16
    # arch name -> a solver table replacing the shipped one (ckheur/families/miopen/solver_tables/<direction>.yaml,
    # outside the composed config: it is large); empty: the shipped tables
    solvers: Dict[str, List[SolverSchema]] = field(default_factory=dict)
    # every solver MIOpen registers for the direction: in the shipped tables' file; here only in the
    # op_config of bundles written before the tables moved there (checked against this schema on load)
    registry: List[SolverSchema] = field(default_factory=list)
    # Which solvers are ranked per problem: none (all), rules (MIOpen's IsApplicable rules we carry),
    # listed (kinds of problem a find-db lists each solver for: listed below), both (ckheur.families.miopen.solvers);
    # null: a trained model's own (the shipped ones: both), rules when training
    applicability: Optional[Applicability] = None
    listed: Dict[str, List[str]] = field(default_factory=dict)  # solver -> kinds (ckheur.integrations.miopen.find_db.learn_listed)
    # A remembered answer (train.remember) stays first unless the model predicts its own pick faster
    # by more than this fraction; null: the bundle's, else the measured noise (ckheur.learn.bundle.REMEMBERED_NOISE);
    # 0: the model decides; inf: always the remembered answer
    remember_margin: Optional[float] = None
    # The solvers the user's MIOpen ships: a list of solver names, or a path to MIOpen's files that
    # name them (a find-db, a text or SQLite perf-db, or a folder of them such as /opt/rocm/share/miopen/db);
    # only the table's solvers among them are ranked, swept and exported. null: every solver of the table
    available: Any = None
    default_problems: str = MISSING
    model_name: str = MISSING
