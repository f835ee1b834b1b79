"""``example.c`` of an exported package: random inputs, one call of the launcher, the op's reference in
plain C (naive loops, double accumulation) and a relative-error check; nonzero exit on a mismatch.

``--perturb`` moves one output element far off after the launch, so a test can show that the check
fails on a wrong result (``--perturb-amax``: an FP8 C's amax). The outputs are poisoned (every bit set) before the
call, so an element the kernel leaves unwritten is a NaN the check refuses. The example also calls the launcher with a wrong shape and expects a status
and a message, not a crash. The backend supplies the memory functions (host or device).
"""

from __future__ import annotations

from .cstyle import C_REFERENCE
from .export_abi import Launcher

BITS = """static inline uint32_t ex_f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float ex_u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
"""
BF16 = """static inline float ex_bf2f(uint16_t h) { return ex_u2f((uint32_t)h << 16); }
static inline uint16_t ex_f2bf(float f) {  /* round to nearest even */
    uint32_t u = ex_f2u(f);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
"""
FP16 = """static inline float ex_h2f(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return ex_u2f(s | 0x7f800000u | (m << 13));
    if (e == 0) return (s ? -1.0f : 1.0f) * ldexpf((float)m, -24);
    return ex_u2f(s | ((e + 112) << 23) | (m << 13));
}
static inline uint16_t ex_f2h(float f) {  /* round to nearest even; inputs here are small and finite */
    uint32_t u = ex_f2u(f), s = (u >> 16) & 0x8000u;
    float a = fabsf(f);
    if (a < 6.103515625e-05f) return (uint16_t)(s | (uint32_t)lrintf(a * 16777216.0f));
    uint32_t v = ex_f2u(a), r = v + 0xfffu + ((v >> 13) & 1u);
    return (uint16_t)(s | (((r >> 13) - (112u << 10)) & 0x7fffu));
}
"""

FP8 = """static inline double ex_f8(uint8_t b, int mant, int bias) {  /* an FP8 code: e4m3 (3, 7), e5m2 (2, 15) */
    int e = (b & 0x7f) >> mant, m = b & ((1 << mant) - 1), top = 0x7f >> mant;
    if (e == top && (mant == 2 || m == (1 << mant) - 1))  /* e5m2's infinities and NaNs, e4m3's NaN (no infinity) */
        return mant == 2 && m == 0 ? (b & 0x80 ? -INFINITY : INFINITY) : NAN;
    double v = e ? ldexp(1.0 + m / (double)(1 << mant), e - bias) : ldexp(m / (double)(1 << mant), 1 - bias);
    return b & 0x80 ? -v : v;
}
"""

# An FP8 C as the kernel stores it: rounded to nearest even (the mantissa's quantum from the leading bit's exponent,
# never below the subnormals' one), saturated to the largest finite value.
FP8_ROUND = """static double ex_q8(double x, int mant, int bias, double maxv) {
    double a = fabs(x);
    if (a != a) return x;
    int e = 0;
    (void)frexp(a, &e);  /* a = f 2^e, f in [0.5, 1): the leading bit's exponent is e - 1 */
    int lead = a > 0 && e - 1 > 1 - bias ? e - 1 : 1 - bias;
    double q = ldexp(1.0, lead - mant), r = nearbyint(a / q) * q;  /* the default rounding: to nearest even */
    r = r > maxv ? maxv : r;
    return x < 0 ? -r : r;
}
"""
FP8_FORMAT = {"fp8e4m3": (3, 7), "fp8e5m2": (2, 15)}  # mantissa bits, exponent bias (as ex_f8 takes them)

STORAGE = {"fp32": "", "bf16": BITS + BF16, "fp16": BITS + FP16, "int8": "", "int32": "", "fp8e4m3": FP8,
           "fp8e5m2": FP8}
# dtype -> (the element at p[i] as a double, a random element written at p[i]): floats uniform in [-1, 1) rounded to
# the type; int8 in [-15, 15] and never 0, FP8 of magnitude 1/8 to 15 (exponents -3..3), so that sums over any K stay
# inside a 16-bit output; int32 in [-100, 100]
ELEMENTS = {
    "fp32": ("((const float*)p)[i]", "((float*)p)[i] = ex_rand();"),
    "bf16": ("ex_bf2f(((const uint16_t*)p)[i])", "((uint16_t*)p)[i] = ex_f2bf(ex_rand());"),
    "fp16": ("ex_h2f(((const uint16_t*)p)[i])", "((uint16_t*)p)[i] = ex_f2h(ex_rand());"),
    "int8": ("((const int8_t*)p)[i]", "int v = (int)(ex_next() % 31) - 15; ((int8_t*)p)[i] = (int8_t)(v ? v : 1);"),
    "int32": ("((const int32_t*)p)[i]", "((int32_t*)p)[i] = (int32_t)(ex_next() % 201) - 100;"),
    "fp8e4m3": ("ex_f8(((const uint8_t*)p)[i], 3, 7)",
                "((uint8_t*)p)[i] = (uint8_t)((ex_next() & 0x80) | ((4 + ex_next() % 7) << 3) | (ex_next() & 7));"),
    "fp8e5m2": ("ex_f8(((const uint8_t*)p)[i], 2, 15)",
                "((uint8_t*)p)[i] = (uint8_t)((ex_next() & 0x80) | ((12 + ex_next() % 7) << 2) | (ex_next() & 3));"),
}


def _elements(launcher: Launcher) -> str:
    """The conversions the tensors' types need, then ``ex_load_<type>`` for each and ``ex_fill_<type>`` for the
    inputs'."""
    types = list(dict.fromkeys(t.dtype for t in launcher.tensors))
    helpers = list(dict.fromkeys(STORAGE[d] for d in types if STORAGE[d])) + ([FP8_ROUND] if fp8_c(launcher) else [])
    if "bf16" in types and "fp16" in types:  # one copy of the bit casts they share
        helpers = [BITS + BF16, FP16] + [h for h in helpers if h not in (BITS + BF16, BITS + FP16)]
    filled = {t.dtype for t in launcher.inputs}  # (an output's type is read back, never filled)
    funcs = "".join(f"static double ex_load_{d}(const void* p, long i) {{ return {ELEMENTS[d][0]}; }}\n"
                    + (f"static void ex_fill_{d}(void* p, long i) {{ {ELEMENTS[d][1]} }}\n" if d in filled else "")
                    for d in types)
    return "".join(helpers) + funcs


def _main(launcher: Launcher, tolerance: float) -> str:
    return _setup(launcher) + _run_and_compare(launcher, tolerance) + _refusal_and_teardown(launcher)


def _setup(launcher: Launcher) -> str:
    """``main``'s opening: the arguments, the ABI check, host and device buffers, random inputs (rounded to
    the storage type; the reference reads the stored values), the tensor views."""
    ts = launcher.tensors
    api = launcher.api
    decl = "\n".join(f"    static const int64_t shape_{t.name}[] = {launcher.shape_macro(t)}_SHAPE;" for t in ts)
    alloc = "\n".join(
        f"    void* h_{t.name} = malloc({t.nbytes}); double* {t.name} = malloc({t.numel} * sizeof(double));\n"
        f"    void* d_{t.name} = ex_alloc({t.nbytes});\n"
        f"    if (!h_{t.name} || !{t.name} || !d_{t.name}) {{ fprintf(stderr, \"example: out of memory\\n\"); return 1; }}"
        for t in ts)
    fill = "\n".join(f"    for (long i = 0; i < {t.numel}; ++i) {{ ex_fill_{t.dtype}(h_{t.name}, i); "
                     f"{t.name}[i] = ex_load_{t.dtype}(h_{t.name}, i); }}" for t in launcher.inputs)
    upload = "\n".join(f"    if (ex_upload(d_{t.name}, h_{t.name}, {t.nbytes})) return 1;" for t in launcher.inputs)
    # the outputs poisoned (all bits set: a NaN in every float type) so that an element the call leaves unwritten shows
    poison = "\n".join(f"    memset(h_{t.name}, 0xff, {t.nbytes});\n"
                       f"    if (ex_upload(d_{t.name}, h_{t.name}, {t.nbytes})) return 1;" for t in launcher.outputs)
    views = "\n".join(f"    {t.view_type} v_{t.name} = {t.view_maker}(d_{t.name}, {t.code}, {len(t.shape)}, "
                      f"shape_{t.name});" for t in ts)
    n_out = launcher.out.numel
    amax_flag = '\n        else if (strcmp(argv[i], "--perturb-amax") == 0) perturb = 2;' if fp8_c(launcher) else ""
    return f"""int main(int argc, char** argv) {{
    int perturb = 0;
    for (int i = 1; i < argc; ++i) {{
        if (strcmp(argv[i], "--perturb") == 0) perturb = 1;{amax_flag}
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) ex_state = strtoull(argv[++i], NULL, 10) * 2654435761ull + 1;
        else {{ fprintf(stderr, "usage: %s [--seed N] [--perturb]{' [--perturb-amax]' if fp8_c(launcher) else ''}\\n", argv[0]); return 2; }}
    }}
    if ({api("abi_version")}() != {launcher.macro}_ABI_VERSION) {{
        fprintf(stderr, "example: library ABI %d, header ABI %d\\n", {api("abi_version")}(), {launcher.macro}_ABI_VERSION);
        return 1;
    }}
    if (ex_setup()) return 1;
{decl}
{alloc}
    double* ref = malloc({n_out} * sizeof(double));
    if (!ref) return 1;
{fill}
    reference({", ".join(t.name for t in launcher.inputs)}, ref);
{_fp8_scale(launcher)}{upload}
{poison}
{views}
"""


def _run_and_compare(launcher: Launcher, tolerance: float) -> str:
    """The call, the result downloaded, the C reference and the relative error against ``tolerance``
    (``--perturb`` makes the result wrong on purpose)."""
    api = launcher.api
    args = ", ".join(f"&v_{t.name}" for t in launcher.tensors)
    n_out = launcher.out.numel
    downloads = "\n".join(f"    if (ex_download(h_{t.name}, d_{t.name}, {t.nbytes})) return 1;\n"
                          f"    for (long i = 0; i < {t.numel}; ++i) {t.name}[i] = ex_load_{t.dtype}(h_{t.name}, i);"
                          for t in launcher.outputs)
    return f"""    if ({launcher.name}({args}, NULL) != TRACEA_SUCCESS) {{
        fprintf(stderr, "example: {launcher.name} failed: %s\\n", {api("get_last_error")}());
        return 1;
    }}
    if (ex_sync()) return 1;
{downloads}
{_fp8_round(launcher)}    if (perturb == 1) out[{n_out // 2}] = ref[{n_out // 2}] + 1.0 + ex_norm(ref, {n_out});  /* a wrong result */
    double err = 0, norm = ex_norm(ref, {n_out}), worst = 0;
    int finite = 1;
    for (long i = 0; i < {n_out}; ++i) {{
        double d = out[i] - ref[i];
        if (!isfinite(out[i])) finite = 0;
        err += d * d;
        worst = fabs(d) > worst ? fabs(d) : worst;
    }}
    double rel = sqrt(err) / (norm > 0 ? norm : 1.0);
    int ok = finite && rel <= {tolerance!r};
    printf("{launcher.name}: relative error %.3g (tolerance %.3g), max abs error %.3g: %s\\n", rel, {tolerance!r},
           worst, ok ? "ok" : "MISMATCH");
{_fp8_amax_check(launcher)}"""


def fp8_c(launcher: Launcher) -> tuple[int, int, float] | None:
    """An FP8 C with its amax beside it (a scaled GEMM's ``--out-dtype fp8e4m3|fp8e5m2``): its mantissa bits,
    exponent bias and largest finite value; None for any other output."""
    from tracea.kernels import DType

    if launcher.out.dtype not in FP8_FORMAT or not any(t.name == "amax" for t in launcher.side_outputs):
        return None
    return (*FP8_FORMAT[launcher.out.dtype], DType(launcher.out.dtype).max_finite)


def _fp8_scale(launcher: Launcher) -> str:
    """An FP8 C's ``scale_out``, chosen from the reference's amax as a delayed-scaling recipe would: the largest
    |v| lands at half the type's largest finite value, so the codes span the type's exponents and none
    saturates. ``ref`` holds the values before C's scale, ``amax_ref`` their largest magnitude."""
    fmt = fp8_c(launcher)
    if fmt is None:
        return ""
    top = fmt[2]
    return f"""    double amax_ref = 0;
    for (long i = 0; i < {launcher.out.numel}; ++i) amax_ref = fabs(ref[i]) > amax_ref ? fabs(ref[i]) : amax_ref;
    ((float*)h_scale_out)[0] = (float)(amax_ref > 0 ? {top / 2!r} / amax_ref : 1.0);
    scale_out[0] = ((const float*)h_scale_out)[0];
"""


def _fp8_round(launcher: Launcher) -> str:
    """The reference times ``scale_out``, rounded and saturated as the kernel stores C."""
    fmt = fp8_c(launcher)
    if fmt is None:
        return ""
    mant, bias, top = fmt
    return (f"    for (long i = 0; i < {launcher.out.numel}; ++i) ref[i] = ex_q8(ref[i] * scale_out[0], {mant}, {bias}, "
            f"{top!r});\n")


def _fp8_amax_check(launcher: Launcher) -> str:
    """The amax the kernel wrote against the reference's, to the op's bound (``side_tolerance``)."""
    if fp8_c(launcher) is None:
        return ""
    bound = launcher.op.side_tolerance()
    return f"""    if (perturb == 2) amax[0] = 1.01 * amax_ref + 1.0;  /* a wrong amax */
    double amax_err = fabs(amax[0] - amax_ref) / (amax_ref > 0 ? amax_ref : 1.0);
    int amax_ok = amax_err <= {bound!r};
    printf("amax %.9g, reference %.9g: relative error %.3g (tolerance %.3g): %s\\n", amax[0], amax_ref, amax_err,
           {bound!r}, amax_ok ? "ok" : "MISMATCH");
    ok = ok && amax_ok;
"""


def _refusal_and_teardown(launcher: Launcher) -> str:
    """A view of the wrong shape refused with a status and a message; everything freed."""
    ts = launcher.tensors
    api = launcher.api
    bad_args = ", ".join(["&bad", *(f"&v_{t.name}" for t in ts[1:])])
    first = ts[0]
    frees = " ".join(f"free(h_{t.name}); free({t.name}); ex_free(d_{t.name});" for t in ts)
    return f"""    /* a view of the wrong shape is a status and a message, never undefined behaviour */
    {first.view_type} bad = v_{first.name};
    bad.shape[0] += 1;
    TraceaStatus st = {launcher.name}({bad_args}, NULL);
    if (st != TRACEA_ERROR_INVALID_ARGUMENT || {api("get_last_error")}()[0] == 0) {{
        fprintf(stderr, "example: a wrong shape was not refused (status %d)\\n", (int)st);
        ok = 0;
    }} else {{
        printf("wrong shape refused: %s\\n", {api("get_last_error")}());
    }}
    {frees} free(ref);
    {api("shutdown")}();
    ex_teardown();
    return ok ? 0 : 1;
}}
"""


def example_c(launcher: Launcher, tolerance: float, device_c: str) -> str:
    """The example program; ``device_c`` defines ex_setup/alloc/upload/download/sync/free/teardown."""
    op = launcher.op
    params = ", ".join(f"const double* {t.name}" for t in launcher.inputs)
    return f"""/* example.c: calls {launcher.name} on random inputs and checks it against a plain C reference
 * (double accumulation). Exit status 0: verified. `--seed N`: other random inputs. `--perturb` corrupts one
 * output element and must fail (proof that the check can fail). Generated by `tracea export`. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "{launcher.prefix}/tracea.h"

{device_c}
static uint64_t ex_state = 0x9e3779b97f4a7c15ull;
static uint64_t ex_next(void) {{  /* xorshift64 */
    ex_state ^= ex_state << 13; ex_state ^= ex_state >> 7; ex_state ^= ex_state << 17;
    return ex_state;
}}
static inline float ex_rand(void) {{ return (float)((ex_next() >> 40) * (1.0 / 8388608.0)) - 1.0f; }}  /* in [-1, 1) */

{_elements(launcher)}
static double ex_norm(const double* v, long n) {{
    double s = 0;
    for (long i = 0; i < n; ++i) s += v[i] * v[i];
    return sqrt(s);
}}

static void reference({params}, double* ref) {{
    {" ".join(f"(void){t.name};" for t in launcher.inputs)}
    {op.c_reference(C_REFERENCE)}
}}

{_main(launcher, tolerance)}"""
