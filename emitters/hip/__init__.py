"""The HIP backend for AMD Instinct GPUs (issue 19), being built: so far the MFMA placement model
(``mfma.py``). It is not registered in emitters/registry.py until it can render, compile and verify."""
