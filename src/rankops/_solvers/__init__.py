"""Solvers under the kernels: log-domain Sinkhorn and its implicit differentiation."""
