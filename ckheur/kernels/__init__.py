"""Kernels: CK kernel instances, their names, the legal pool and filter expressions."""

from ckheur.families.grouped_conv.kernels import ConvKernel, KernelError, format_name, parse_name
from ckheur.kernels.filter import FilterError, compile_filter
from ckheur.kernels.pool import Pool, enumerate_pool

__all__ = ["ConvKernel", "KernelError", "format_name", "parse_name", "FilterError",
           "compile_filter", "Pool", "enumerate_pool"]
