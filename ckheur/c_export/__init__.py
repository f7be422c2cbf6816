"""The C export: the generator, the package, the compiled path and the C runtime."""
