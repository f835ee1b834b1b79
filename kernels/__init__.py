"""Tracea's L2 core IR: operations as frozen values (Gemm, Conv2d, Softmax, ...) with validation,
FLOP and byte counts and NumPy references."""
