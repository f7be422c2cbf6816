"""The grouped convolution family (CK): problems, kernels, features, C code."""
