"""The Python API: ``tracea.Context`` probes the machine once and answers what the CLI answers.

    ctx = tracea.Context()
    decision = ctx.plan_kernel("gemm", precision="BF16")          # same Decision as `tracea plan gemm --m 4096 --dtype bf16`
    decision = ctx.plan_kernel("flash_attention_2", precision="BF16")  # the design documents' example: attention
    result = ctx.bench(tracea.kernels.Gemm(2048, 2048, 2048))    # same as `tracea bench gemm --m 2048`
                                                                  # (the planner's backend: a GPU when one fits)
"""

from __future__ import annotations

from typing import Any

from .render_kernels import bench_table, plan_table


class Context:
    def __init__(self, host: Any = None) -> None:
        if host is None:
            from tracea.doctor import probe

            host = probe()
        self.host = host

    def op(self, kind: str, precision: str | None = None, **shape: Any) -> Any:
        from tracea.doctor.errors import BadInputError
        from tracea.kernels import OPS, canonical_op_name

        name = canonical_op_name(kind)  # the design documents' spellings too: "flash_attention_2" is attention
        cls = OPS.get(name)
        if cls is None:
            raise BadInputError(f"unknown operation {kind!r}; known: {', '.join(OPS)}")
        args = {**cls.default_shape, **shape}  # the shape `plan_kernel` assumes when none is given (the op's)
        if precision is not None:
            args["dtype"] = precision.lower()
        return cls(**args)

    def plan_kernel(self, op: Any, precision: str | None = None, backend: str | None = None, **shape: Any) -> Any:
        """The Decision for ``op`` (an IR value, or a name plus shape keywords) on this machine."""
        from tracea.doctor.plan import plan
        from tracea.emitters.registry import all_variants

        if isinstance(op, str):
            op = self.op(op, precision, **shape)
        return plan(op, self.host, all_variants(backend) if backend else all_variants(),
                    precision=precision.lower() if precision else None, backend=backend)

    def bench(self, op: Any, backend: str | None = None, **kwargs: Any) -> Any:
        """`tracea bench` for ``op``: on ``backend``, else on the backend the planner ranks first here."""
        from tracea.emitters.bench import bench

        if backend is None:
            from tracea.emitters.registry import default_backend

            backend = default_backend(op, self.host, kwargs.get("precision"))[0]
        if "tuned" not in kwargs:  # the best stored schedule (`tracea tune`), else the hero schedule
            from tracea.tuner.lookup import tuned_lookup

            kwargs["tuned"] = tuned_lookup(self.host, backend)
        return bench(op, self.host, backend=backend, **kwargs)


__all__ = ["Context", "plan_table", "bench_table"]
