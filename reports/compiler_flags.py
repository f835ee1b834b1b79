"""Which of a bundle's C compiler flags ``--bundled-source`` may hand to gcc or clang: an allow-list written
as the compiler's own grammar, not as a list of bad prefixes.

A compiler flag can run a program (``-wrapper``, ``-B``, ``-specs``, ``-fuse-ld``, ``-fcompare-debug=-B.``,
``-Xclang -load``), load a plugin (``-fplugin=``, ``-fpass-plugin=``), read a file (``@file``, ``-include``,
``-I``, ``-fprofile-use=``) or write one anywhere (``-o``, ``-save-temps``, ``-MF``, ``-fdump-*``,
``-fprofile-generate``), and the driver accepts many spellings of each: joined (``-B.``), ``=``-separated,
as a separate next argument, through ``-Wl,``/``-Wa,``/``-Wp,`` and ``-Xlinker``, or from a response file.
A prefix list always misses one. So a flag passes only if it parses as one of the forms below, each of which
only changes the code generated for the bundle's own source:

* optimisation levels (``-O0`` ... ``-O3``, ``-Os``, ``-Oz``, ``-Og``, ``-Ofast``) and debug levels (``-g``,
  ``-g0`` ... ``-g3``, ``-ggdb``, ``-gdwarf-N``);
* ``-std=`` with a C or C++ standard's name;
* macros ``-DNAME``, ``-DNAME=VALUE`` (VALUE of letters, digits and ``_.+-``), ``-UNAME``;
* warnings ``-W[no-]NAME[=VALUE]``, except ``-Wl``, ``-Wa``, ``-Wp`` (which pass options to other programs);
* target options ``-m[no-]NAME`` and ``-mNAME=VALUE`` (ISA extensions, ``-march=``, ``-mtune=``; VALUE of
  letters, digits and ``_.,+-``), except ``-mllvm``;
* the code-generation options in ``F_BOOLEAN`` (with or without ``no-``) and the valued ones in ``F_VALUED``
  with their value's grammar;
* ``--param=NAME=INTEGER``; and ``-shared``, ``-pthread``, ``-pipe``, ``-w``, ``-pedantic[-errors]``, ``-lm``.

Nothing that takes its argument as the next word is allowed, so no allowed flag can swallow the word after
it; and a flag with a space, a slash, a quote or a non-ASCII character in it is refused whatever its form.
"""

from __future__ import annotations

import re
from typing import Any

from .bundle_check import _type_name  # a bundle's JSON value named as the manifest's messages name it

# boolean code-generation options: -fNAME and -fno-NAME
F_BOOLEAN = frozenset({
    "fast-math", "math-errno", "trapping-math", "finite-math-only", "signed-zeros", "associative-math",
    "reciprocal-math", "rounding-math", "unsafe-math-optimizations", "signaling-nans", "cx-limited-range",
    "omit-frame-pointer", "strict-aliasing", "strict-overflow", "wrapv", "trapv", "signed-char", "unsigned-char",
    "unroll-loops", "unroll-all-loops", "peel-loops", "split-loops", "unswitch-loops", "move-loop-invariants",
    "tree-vectorize", "tree-loop-vectorize", "tree-slp-vectorize", "tree-loop-distribution",
    "tree-loop-distribute-patterns", "tree-pre", "tree-vrp", "tree-dce", "tree-ccp", "tree-pta", "tree-sra",
    "loop-interchange", "loop-unroll-and-jam", "version-loops-for-strides", "variable-expansion-in-unroller",
    "prefetch-loop-arrays", "predictive-commoning", "modulo-sched", "gcse", "gcse-las", "gcse-sm",
    "schedule-insns", "schedule-insns2", "sched-pressure", "ipa-cp", "ipa-cp-clone", "ipa-pta", "ipa-sra",
    "inline", "inline-functions", "inline-small-functions", "inline-functions-called-once", "early-inlining",
    "optimize-sibling-calls", "reorder-blocks", "reorder-blocks-and-partition", "reorder-functions",
    "align-functions", "align-loops", "align-jumps", "align-labels", "delete-null-pointer-checks",
    "function-sections", "data-sections", "common", "builtin", "exceptions", "asynchronous-unwind-tables",
    "unwind-tables", "PIC", "pic", "PIE", "pie", "plt", "semantic-interposition", "stack-protector",
    "stack-protector-strong", "stack-protector-all", "stack-clash-protection", "openmp", "openmp-simd",
    "ident", "verbose-asm", "vect-cost-model", "expensive-optimizations", "rename-registers", "web",
    "if-conversion", "if-conversion2", "ivopts", "tree-ch", "hoist-adjacent-loads", "split-paths",
})

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_INT = r"[0-9]{1,9}"
# valued code-generation options: -fNAME=VALUE, VALUE by its own grammar
F_VALUED = {
    "fp-contract": r"fast|on|off",
    "excess-precision": r"fast|standard|16",
    "vect-cost-model": r"unlimited|dynamic|cheap|very-cheap",
    "simd-cost-model": r"unlimited|dynamic|cheap|very-cheap",
    "visibility": r"default|hidden|internal|protected",
    "tls-model": r"global-dynamic|local-dynamic|initial-exec|local-exec",
    "cf-protection": r"full|branch|return|none|check",
    "inline-limit": _INT,
    "max-errors": _INT,
    "align-functions": r"[0-9]{1,6}(:[0-9]{1,6}){0,3}",
    "align-loops": r"[0-9]{1,6}(:[0-9]{1,6}){0,3}",
    "align-jumps": r"[0-9]{1,6}(:[0-9]{1,6}){0,3}",
    "align-labels": r"[0-9]{1,6}(:[0-9]{1,6}){0,3}",
    "tree-parallelize-loops": _INT,
    "sched-stalled-insns": _INT,
}

STANDARDS = r"(c|gnu)(89|90|99|9x|11|1x|17|18|2x|23)|(c|gnu)\+\+(98|03|0x|11|1y|14|1z|17|2a|20|2b|23|2c|26)|iso9899:(1990|199409|1999|2011|2017|2018)"
EXACT = frozenset({"-shared", "-pthread", "-pipe", "-w", "-pedantic", "-pedantic-errors", "-lm", "-O", "-Ofast",
                   "-g", "-ggdb"})

_FORMS = [re.compile(p) for p in (
    r"-O[0-3sgz]",
    r"-g[0-3]|-ggdb[0-3]|-gdwarf(-[2-5])?",
    rf"-std=({STANDARDS})",
    rf"-D{_NAME}(=[A-Za-z0-9_.+-]*)?",
    rf"-U{_NAME}",
    r"-W(no-)?(?!(l|a|p)$)[a-z][a-z0-9-]*(=[a-z0-9-]{1,32})?",
    r"-m(no-)?(?!llvm$)[a-z0-9][a-z0-9.+_-]*",
    r"-m(?!llvm=)[a-z0-9][a-z0-9.+_-]*=[A-Za-z0-9_.,+-]{1,64}",
    r"--param=[a-z][a-z0-9-]*=[0-9]{1,9}",
)]

# named in the refusal, so that a reader sees why the flag is dangerous and not just unknown
_DANGEROUS = re.compile(
    r"-wrapper|-B.*|--?specs.*|-f(no-)?plugin.*|-fpass-plugin.*|-fuse-ld.*|-fcompare-debug.*|-Xclang|-mllvm.*|"
    r"-X(linker|assembler|preprocessor)|-W[lap],.*|@.*|-o.*|--output.*|-save-temps.*|-include.*|-imacros.*|"
    r"-i(system|quote|dirafter|prefix|withprefix|withprefixbefore|sysroot).*|-I.*|-L.*|--?sysroot.*|"
    r"-M[DFTQ]?.*|-fprofile.*|-fauto-profile.*|-fdump.*|-fsave-optimization-record.*|-fstack-usage|"
    r"-fcallgraph-info.*|-ftest-coverage|--coverage|-fdiagnostics.*|-fcrash-diagnostics.*|-fmodule.*|-load|"
    r"-T.*|-l.*|-x.*|-e.*|-z.*|-fdebug-prefix-map.*|-ffile-prefix-map.*|-fmacro-prefix-map.*|-flto.*")


def refused_flag(flag: Any) -> str | None:
    """Why ``flag`` may not reach the compiler (None: allowed). See the module docstring for the grammar."""
    if not isinstance(flag, str):
        return f"{_type_name(flag)} is not a flag"
    if not flag.isascii() or not flag.isprintable() or any(c in flag for c in " \t/\\'\"`$;|&<>(){}*?!~#"):
        return "it holds a space, a path, a quote or a shell character"
    if flag in EXACT or any(p.fullmatch(flag) for p in _FORMS) or _code_generation(flag):
        return None
    if _DANGEROUS.fullmatch(flag):
        return "it runs a program, loads a plugin, or reads or writes files of its own"
    return ("it is not on the allow-list (-O*, -g*, -std=, -D/-U, -W<warning>, -m<target>, the code-generation "
            "-f options, --param, -shared, -pthread)")


def _code_generation(flag: str) -> bool:
    m = re.fullmatch(r"-f(no-)?([A-Za-z0-9-]+)(=(.*))?", flag)
    if m is None:
        return False
    negated, name, value = m.group(1), m.group(2), m.group(4)
    if value is None:
        return name in F_BOOLEAN
    grammar = F_VALUED.get(name)
    return negated is None and grammar is not None and re.fullmatch(grammar, value) is not None
