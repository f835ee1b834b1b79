"""The ``tracea`` console script: runs the Typer app under Tracea's error and exit-code policy.

Exit codes: 0 ok, 1 internal error, 2 bad input (unknown flag, bad file), 3 unsupported on this host.
Errors are one line on stderr (plus a hint line); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import os
import sys


def _err(message: str, hint: str | None = None) -> None:
    sys.stderr.write(f"error: {message}\n")
    if hint:
        sys.stderr.write(f"hint: {hint}\n")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    # --debug is honoured wherever it is typed (`tracea doctor --debug` as well as `tracea --debug doctor`)
    debug = "--debug" in args or os.environ.get("TRACEA_DEBUG") == "1"
    args = [a for a in args if a != "--debug"]
    from tracea.emitters.blas_env import quiet_openblas

    quiet_openblas()  # before anything loads NumPy: OpenBLAS reads it once (emitters/blas_env.py)
    from tracea.app import build_command
    from tracea.doctor.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, TraceaError

    command = build_command()
    try:
        result = command.main(args=args, prog_name="tracea", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except TraceaError as exc:
        if debug:
            raise
        _err(exc.message, exc.hint)
        return exc.exit_code
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except MemoryError:  # the footprint check (kernels/footprint.py) is an estimate; say it plainly anyway
        if debug:
            raise
        from tracea.doctor.errors import EXIT_UNSUPPORTED
        from tracea.kernels.footprint import out_of_memory_message

        _err(out_of_memory_message(), "use smaller sizes, or free memory and try again")
        return EXIT_UNSUPPORTED
    except BrokenPipeError:
        # the reader went away (`tracea doctor | head`): not an error; keep the exit-time flush quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:
        # Click's own exceptions, matched by name: Typer >= 0.29 vendors Click, older Typer uses it.
        kinds = {k.__name__ for k in type(exc).__mro__}
        if "Exit" in kinds:
            return int(getattr(exc, "exit_code", 0))
        if "Abort" in kinds:
            _err("aborted")
            return 130
        if "NoArgsIsHelpError" in kinds:  # `tracea` or `tracea plan` alone: the help, as asked
            ctx = getattr(exc, "ctx", None)
            sys.stdout.write((ctx.get_help() if ctx is not None else str(exc)) + "\n")
            return 0
        if debug:
            raise
        if "UsageError" in kinds:
            ctx = getattr(exc, "ctx", None)
            where = f"{ctx.command_path} --help" if ctx is not None else "tracea --help"
            _err(f"{exc.format_message()} (see `{where}`)")  # type: ignore[attr-defined]
            return EXIT_BAD_INPUT
        if "ClickException" in kinds:
            _err(exc.format_message())  # type: ignore[attr-defined]
            return int(getattr(exc, "exit_code", EXIT_INTERNAL))
        # The last line of defence: one line, not a traceback.
        _err(f"internal error: {type(exc).__name__}: {exc}", "rerun with --debug for the traceback, and report it")
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
