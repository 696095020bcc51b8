"""Kernel families, one module each; `registry.load_all_kernels` imports them all."""
