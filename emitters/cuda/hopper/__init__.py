"""The Hopper (sm_90a) kernels, as CUTLASS 3 composes one."""
