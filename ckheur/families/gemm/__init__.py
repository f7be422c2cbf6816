"""The GEMM family (CK): problems, kernels, features, C code."""
