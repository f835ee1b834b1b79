"""The ``tracea`` console script: runs the Typer app under Tracea's error and exit-code policy.

Exit codes: 0 ok, 1 internal error, 2 bad input (unknown flag, bad file), 3 unsupported on this host,
130 interrupted (Ctrl-C), 128 + the signal's number for SIGTERM (143) and SIGHUP (129).
Errors are one line on stderr (plus a hint line); ``--debug`` shows the traceback.

SIGTERM and SIGHUP are handled as Ctrl-C is: the tuner's worker processes are killed at once, and the
signal becomes a ``Terminated`` (a KeyboardInterrupt), so every layer that closes a run on Ctrl-C (the
tuning database's run, the run folder) marks it "interrupted" on its way out. A repeat of the signal
during that cleanup is ignored (SIGKILL still stops the process at once).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread like Ctrl-C's KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _kill_workers() -> None:
    """The tuner's worker processes die now, not after the candidate they are timing (loaded lazily:
    only a process that started workers has the module)."""
    worker = sys.modules.get("tracea.tuner.worker")
    if worker is not None:
        worker.kill_all()


_received: list[int] = []  # the SIGTERM/SIGHUP this process got (Typer turns the exception into exit 130)


def _on_signal(signum: int, frame: Any) -> None:
    _received.append(signum)
    for sig in (signal.SIGTERM, signal.SIGHUP):  # the cleanup that follows is not cut short by a repeat
        signal.signal(sig, signal.SIG_IGN)
    _kill_workers()
    raise Terminated(signum)


def _on_sigint(signum: int, frame: Any) -> None:
    _kill_workers()
    raise KeyboardInterrupt


def _install_signal_handlers() -> dict[int, Any]:
    """Install the handlers; the previous ones, to put back when ``main`` returns (it may be called
    in-process, by a test)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}  # main() called from a thread (a test harness): signals stay as they are
    _received.clear()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # `nohup tracea ...` keeps ignoring SIGHUP
            signal.signal(sig, _on_signal)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
    return previous


def _home_for_message() -> str:
    """Where Tracea writes (TRACEA_HOME or the user's data folder), for a message that has no file name."""
    try:
        from tracea.doctor.home import tracea_dir

        return str(tracea_dir("data", create=False))
    except Exception:  # noqa: BLE001 - only for a message
        return os.environ.get("TRACEA_HOME") or "Tracea's folder"


def _err(message: str, hint: str | None = None) -> None:
    sys.stderr.write(f"error: {message}\n")
    if hint:
        sys.stderr.write(f"hint: {hint}\n")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    # --debug is honoured wherever it is typed (`tracea doctor --debug` as well as `tracea --debug doctor`)
    debug = "--debug" in args or os.environ.get("TRACEA_DEBUG") == "1"
    args = [a for a in args if a != "--debug"]
    if args[:2] == ["tune", "--suite"]:  # the spelling of `tracea tune suite NAME|FILE`
        args = ["tune", "suite", *args[2:]]
    from tracea.emitters.blas_env import quiet_openblas

    quiet_openblas()  # before anything loads NumPy: OpenBLAS reads it once (emitters/blas_env.py)
    from .app import build_command

    command = build_command()
    previous = _install_signal_handlers()
    try:
        return _run(command, args, debug)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        worker = sys.modules.get("tracea.tuner.worker")
        if worker is not None:
            worker.kill_all_done()  # main() may be called again in this process (tests): workers may start


def _run(command: Any, args: list[str], debug: bool) -> int:
    from tracea.doctor.errors import TraceaError

    try:
        result = command.main(args=args, prog_name="tracea", standalone_mode=False)
        if _received:
            raise Terminated(_received[0])
        return result if isinstance(result, int) else 0
    except TraceaError as exc:
        if debug:
            raise
        _err(exc.message, exc.hint)
        return exc.exit_code
    except Terminated as exc:
        _err(f"interrupted ({signal.Signals(exc.signum).name})")
        return 128 + exc.signum
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
        code = _click_ending(exc, kinds)
        if code is not None:
            return code
        if debug:
            raise
        return _one_line_error(exc, kinds)


def _click_ending(exc: Exception, kinds: set[str]) -> int | None:
    """The exit status of a Click exit, abort or bare-command help (not errors, even under --debug);
    None for any other exception."""
    if "Exit" in kinds:
        return int(getattr(exc, "exit_code", 0))
    if "Abort" in kinds:
        _err("aborted")
        return 130
    if "NoArgsIsHelpError" in kinds:  # `tracea` or `tracea plan` alone: the help, as asked
        ctx = getattr(exc, "ctx", None)
        sys.stdout.write((ctx.get_help() if ctx is not None else str(exc)) + "\n")
        return 0
    return None


def _one_line_error(exc: Exception, kinds: set[str]) -> int:
    """An unexpected exception said in one line (with a hint where there is one); its exit status."""
    from tracea.doctor.errors import EXIT_BAD_INPUT, EXIT_INTERNAL

    if "UsageError" in kinds:
        ctx = getattr(exc, "ctx", None)
        where = f"{ctx.command_path} --help" if ctx is not None else "tracea --help"
        _err(f"{exc.format_message()} (see `{where}`)")  # type: ignore[attr-defined]
        return EXIT_BAD_INPUT
    if "ClickException" in kinds:
        _err(exc.format_message())  # type: ignore[attr-defined]
        return int(getattr(exc, "exit_code", EXIT_INTERNAL))
    from tracea.doctor.files import is_no_space

    if is_no_space(exc):  # a full disk is not a bug, and not a broken file
        from tracea.doctor.errors import EXIT_UNSUPPORTED
        from tracea.doctor.files import no_space

        err = no_space(exc.filename or _home_for_message(), "what was being written there was not kept")
        _err(err.message, err.hint)
        return EXIT_UNSUPPORTED
    # The last line of defence: one line, not a traceback.
    _err(f"internal error: {type(exc).__name__}: {exc}", "rerun with --debug for the traceback, and report it")
    return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
