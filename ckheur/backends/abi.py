"""The C ABI of abi.h from Python: problem structs and the direction/dtype codes.

Shared by backend=hip (its worker calls kernel libraries) and the C export (its selectors
take the same structs)."""

from __future__ import annotations

import ctypes

from ckheur.families.grouped_conv.problems import CONV_FIELDS

DIRECTION_CODES = {"fwd": 0, "bwd_data": 1, "bwd_weight": 2}
DTYPE_CODES = {"fp16": 0, "bf16": 1, "fp8": 2, "fp32": 3}


class ConvProblemC(ctypes.Structure):
    """ckheur_conv_problem."""

    _fields_ = [(f, ctypes.c_int64) for f in CONV_FIELDS] + [("direction", ctypes.c_int32), ("dtype", ctypes.c_int32)]


class GemmProblemC(ctypes.Structure):
    """ckheur_gemm_problem."""

    _fields_ = [(f, ctypes.c_int64) for f in ("M", "N", "K", "split_k")] + [
        ("layout", ctypes.c_int32), ("dtype", ctypes.c_int32)]


class MIOpenProblemC(ctypes.Structure):
    """ckheur_miopen_problem."""

    _fields_ = [(f, ctypes.c_int64) for f in CONV_FIELDS] + [
        ("layout", ctypes.c_int32), ("bias", ctypes.c_int32), ("direction", ctypes.c_int32), ("dtype", ctypes.c_int32)]
