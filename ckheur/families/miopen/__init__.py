"""MIOpen's convolution solvers: problems, the solver table, features, C code."""
