# Sourced by the GPU session scripts: import `tracea` from this checkout with nothing installed, through a
# folder of links that mirrors pyproject's package-dir map (the device machine has no network).
shim=/tmp/tracea-shim/tracea
rm -rf /tmp/tracea-shim && mkdir -p $shim
for f in tracea_cli/*; do ln -s "$PWD/$f" $shim/; done
for d in doctor kernels emitters reports tuner; do [ -d $d ] && ln -s "$PWD/$d" $shim/$d; done
export PYTHONPATH=/tmp/tracea-shim${PYTHONPATH:+:$PYTHONPATH}
