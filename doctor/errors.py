"""One error hierarchy for every layer of Tracea.

Each error carries a one-line message and, where there is one, a hint with the exact fix. The CLI
prints ``error: <message>`` and ``hint: <hint>`` on stderr and exits with ``exit_code``; ``--debug``
shows the traceback instead. The doctor is the lowest layer (every other one reads it), so the
hierarchy lives here and is re-exported as ``tracea.TraceaError`` and friends.
"""

from __future__ import annotations

EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_UNSUPPORTED = 3


class TraceaError(Exception):
    """Root of every error Tracea raises on purpose."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class BadInputError(TraceaError):
    """The user gave something Tracea cannot accept: a malformed shape, file or option."""

    exit_code = EXIT_BAD_INPUT


class SnapshotError(BadInputError):
    """A doctor snapshot given with --input is missing, truncated or of another schema."""


class UnsupportedError(TraceaError):
    """The request is valid but this host cannot run it (no such GPU, ISA or precision)."""

    exit_code = EXIT_UNSUPPORTED


class ToolchainMissingError(UnsupportedError):
    """A compiler or library the request needs is not installed."""


class NoSpaceError(UnsupportedError):
    """The disk (or quota) under a file Tracea writes is full. What was being written is not kept half-way:
    a database transaction is rolled back, a file is written whole or not at all."""


class CompileError(TraceaError):
    """A kernel failed to compile; the message holds the first lines of the compiler log."""


class LaunchError(TraceaError):
    """A kernel failed to load or launch."""


class VerificationError(TraceaError):
    """A kernel's output did not match the reference."""
