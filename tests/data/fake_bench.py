"""A stand-in benchmark binary for backend=command tests: sleeps, then prints a time.

The tests run it as ``python -S``: it needs only the standard library, and skipping site (the
environment's .pth files) makes each run about 10 ms instead of 60."""
import sys
import time

kernel, n = sys.argv[1], int(sys.argv[2])
time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
if "compv4" in kernel:
    sys.exit("compv4: launch failed")
# About a second: slow enough for any problem (a faster time than the GPU's peak allows is refused).
print(f"Elapsed: {1e6 + 0.001 * n + 0.01 * len(kernel) % 7:.4f} us")
