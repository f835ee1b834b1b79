"""The operation flags, written once and shared by every verb that names an op (plan, emit, bench,
tune): ``tracea VERB gemm --m M [--n N --k K]``, ``tracea VERB conv2d --n 1 --c 64 ...``,
``tracea VERB softmax --rows R --cols C``, ``tracea VERB attention --batch B --heads H --seq S --head-dim D ...``,
each with ``--dtype``. The design documents' names (``flash_attention_2``) are hidden aliases of their op.
Each op's flags, help line and IR value are its own module's, ``<op>_options.py`` (``op_flags`` finds them by
name); the flags every op shares (``DTYPE``) and the verbs' commands are here.

Typer reads a command's parameters from its signature, so each verb's command is made by joining the
op's parameters with the verb's own into one ``inspect.Signature``. Only Typer is imported here.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import typer

from .validate import Domain

P = inspect.Parameter


def _opt(name: str, annotation: Any, default: Any, *flags: str, help: str,
         domain: Domain | None = None) -> inspect.Parameter:
    """One keyword parameter for Typer; with a ``domain`` (validate.py) the help says it and parsing checks it."""
    info = (typer.Option(*flags, help=domain.help(help), callback=domain.callback) if domain is not None
            else typer.Option(*flags, help=help))
    return P(name, P.KEYWORD_ONLY, default=default, annotation=Annotated[annotation, info])


DTYPE = _opt("dtype", str, "fp32", "--dtype", help="Element type: fp32, fp16 or bf16 (16-bit inputs accumulate in fp32).")

SUFFIX = "_options"  # tracea_cli/<op>_options.py: an op's flags (PARAMS), help line (HELP), place (ORDER),
# hidden spellings (ALIASES, where it has them) and make_op(values) -> its IR value


@functools.cache
def op_flags() -> dict[str, ModuleType]:
    """Each op's flags module by op kind, found by its file's name (``<op>_options.py`` beside this one), in
    their ``ORDER``: the ops the CLI offers, with no NumPy or kernels/ imported."""
    found = [p.stem for p in sorted(Path(__file__).parent.glob(f"*{SUFFIX}.py")) if p.stem != Path(__file__).stem]
    modules = {n.removesuffix(SUFFIX): importlib.import_module(f"{__package__}.{n}") for n in found}
    return dict(sorted(modules.items(), key=lambda kv: kv[1].ORDER))


def make_op(kind: str, values: dict[str, Any]) -> Any:
    """The IR value for ``kind`` from parsed flags (validation errors name the field)."""
    return op_flags()[kind].make_op(values)


def add_op_commands(group: typer.Typer, verb_params: list[inspect.Parameter],
                    handler: Callable[..., None], verb_help: str) -> None:
    """Add ``gemm``, ``conv2d``, ``softmax`` and ``attention`` commands to ``group`` (and each op's aliases,
    hidden); each calls ``handler(op=<IR value>, **verb_values)``."""
    for kind, flags in op_flags().items():
        params = flags.PARAMS
        names = {p.name for p in params}

        def command(__kind: str = kind, __names: set[str] = names, **kwargs: Any) -> None:
            op = make_op(__kind, {k: v for k, v in kwargs.items() if k in __names})
            handler(op=op, **{k: v for k, v in kwargs.items() if k not in __names})

        command.__signature__ = inspect.Signature([*params, *verb_params])  # type: ignore[attr-defined]
        command.__name__ = kind
        command.__doc__ = f"{verb_help} {flags.HELP}"
        group.command(name=kind)(command)
        for alias in getattr(flags, "ALIASES", ()):
            group.command(name=alias, hidden=True)(command)


def option(name: str, annotation: Any, default: Any, *flags: str, help: str,
           domain: Domain | None = None) -> inspect.Parameter:
    return _opt(name, annotation, default, *flags, help=help, domain=domain)
