"""The Metal backend for Apple-silicon GPUs (issue 36): Metal Shading Language kernels rendered from Tracea's
schedules, checked without a Mac by compiling the rendered MSL as C++ against a model of Metal's execution
(``compat.py``, ``simulate.py``), run on a Mac through Metal itself. docs/metal.md says what is proved."""
