"""Method kernels: the cores each public operator runs (transport, permutation rows), with their options."""
