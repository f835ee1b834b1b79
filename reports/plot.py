"""``tracea report --plot FILE.png``: TFLOP/s against shape (or trial, for one shape) beside the
baseline, and a roofline with the device's ceilings from the doctor.

matplotlib is an optional extra (``pip install 'tracea[plot]'``), imported only here, on use, with
the Agg backend (no display needed).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, ToolchainMissingError

from .summary import RooflineCeiling, shape_label

STATUS_COLOURS = {"compile_failed": "tab:purple", "runtime_failed": "tab:red", "wrong_result": "tab:orange",
                  "timeout": "tab:brown", "invalid": "tab:gray"}


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ToolchainMissingError("--plot needs matplotlib, which is not installed",
                                    "pip install 'tracea[plot]'  (or: pip install matplotlib)") from None
    return plt


def _marker(kind: str) -> str:
    """The roofline's marker for a row's op: the op's own (``Op.plot_marker``), "o" for one this Tracea lacks."""
    from tracea.kernels import OPS, Op

    return OPS.get(kind, Op).plot_marker


def _short(name: str | None) -> str:
    """A baseline's name without its parenthesised build details (they go in the table, not a legend)."""
    return (name or "baseline").split(" (")[0]


def _size(r: dict[str, Any]) -> float:
    """An order for shapes: FLOPs from the row when it has them, else the product of the shape's numbers."""
    if r["tflops"] and r["p50_ms"]:
        return r["tflops"] * r["p50_ms"]
    try:
        shape = json.loads(r["shape"])
        return float(math.prod(v for v in shape.values() if isinstance(v, int) and not isinstance(v, bool)))
    except (ValueError, TypeError, AttributeError):
        return 0.0


def _label(r: dict[str, Any], ops: int) -> str:
    return f"{r['op']} {shape_label(r)}" if ops > 1 else shape_label(r)


def _baseline_tflops(r: dict[str, Any]) -> float | None:
    if r["status"] != "ok" or not r["tflops"] or not r["baseline_p50_ms"] or not r["p50_ms"]:
        return None
    return r["tflops"] * r["p50_ms"] / r["baseline_p50_ms"]  # same FLOP count, the baseline's time


def _intensity(r: dict[str, Any]) -> float | None:
    if r["status"] != "ok" or not r["tflops"] or not r["gbps"]:
        return None
    return r["tflops"] * 1e12 / (r["gbps"] * 1e9)  # FLOP per byte (both from the same time)


def check_plot_path(out: str | Path) -> Path:
    """The plot file's extension picks its format; a wrong one is bad input whether or not matplotlib
    is installed (checked before matplotlib is)."""
    out = Path(out)
    if out.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise BadInputError(f"--plot {out}: the extension must be .png, .svg or .pdf")
    return out


def plot(rows: list[dict[str, Any]], out: str | Path, device: str, ceilings: list[RooflineCeiling],
         notes: list[str], title: str | None = None) -> Path:
    """Draw the two panels into ``out`` (PNG, SVG or PDF by extension); returns the path."""
    out = check_plot_path(out)
    if not rows:
        raise BadInputError("the metrics file has no rows to plot")
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.2), constrained_layout=True)
    _performance(ax1, rows)
    _roofline(ax2, rows, device, ceilings, notes)
    fig.suptitle(title or f"Tracea metrics: {len(rows)} rows", fontsize=12)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110, bbox_inches="tight")
    except OSError as exc:
        raise BadInputError(f"--plot {out}: cannot write ({exc.strerror})") from None
    finally:
        plt.close(fig)
    return out


def _performance(ax: Any, rows: list[dict[str, Any]]) -> None:
    ops = len({r["op"] for r in rows})
    sizes: dict[str, float] = {}
    for r in rows:
        sizes[_label(r, ops)] = max(sizes.get(_label(r, ops), 0.0), _size(r))
    labels = sorted(sizes, key=lambda lab: (lab.split()[0] if ops > 1 else "", sizes[lab]))
    by_shape = len(labels) > 1
    if by_shape:
        xs = [labels.index(_label(r, ops)) for r in rows]
        tilt = len(labels) > 3 or ops > 1
        ax.set_xticks(range(len(labels)), labels, rotation=30 if tilt else 0, ha="right" if tilt else "center")
        ax.set_xlabel("shape" if ops == 1 else "operation and shape")
    else:
        xs = list(range(1, len(rows) + 1))
        ax.set_xlabel(f"trial (shape {labels[0]})")
    ok = [(x, r) for x, r in zip(xs, rows, strict=True) if r["status"] == "ok" and r["tflops"] is not None]
    if ok:
        ax.plot([x for x, _ in ok], [r["tflops"] for _, r in ok], "o", color="tab:blue", label="Tracea", zorder=3)
        if not by_shape and len(ok) > 1:
            best = []
            for _, r in ok:
                best.append(max(r["tflops"], best[-1] if best else 0.0))
            ax.plot([x for x, _ in ok], best, "-", color="tab:blue", alpha=0.5, label="best so far")
    base = [(x, _baseline_tflops(r), r["baseline"]) for x, r in zip(xs, rows, strict=True)]
    base = [b for b in base if b[1] is not None]
    if base:
        names = ", ".join(dict.fromkeys(_short(b[2]) for b in base))
        if by_shape:
            ax.plot([b[0] for b in base], [b[1] for b in base], "s", mfc="none", color="tab:green",
                    label=f"baseline, same run ({names})", zorder=2)
        else:  # one shape: the baseline is one figure of the run (the median of what the rows recorded)
            level = sorted(b[1] for b in base)[len(base) // 2]
            ax.axhline(level, color="tab:green", ls="--", label=f"baseline, same run ({names}): {level:.3g}")
    failed = [(x, r["status"]) for x, r in zip(xs, rows, strict=True) if r["status"] != "ok"]
    for status in dict.fromkeys(s for _, s in failed):
        pts = [x for x, s in failed if s == status]
        ax.plot(pts, [0.0] * len(pts), "x", color=STATUS_COLOURS.get(status, "black"), markersize=9,
                label=f"{status} ({len(pts)})", clip_on=False, zorder=4)
    ax.set_ylabel("TFLOP/s (p50)")
    top = max([r["tflops"] for _, r in ok] + [b[1] for b in base] + [0.0])
    ax.set_ylim(bottom=0, top=top * 1.25 if top > 0 else 1.0)  # head room for the legend
    ax.grid(True, alpha=0.3)
    ax.set_title("throughput" + (" per shape" if by_shape else " per trial"))
    ax.legend(loc="upper right", fontsize=8)


def _roofline(ax: Any, rows: list[dict[str, Any]], device: str, ceilings: list[RooflineCeiling],
              notes: list[str]) -> None:
    pts = [(_intensity(r), r["tflops"], r["op"]) for r in rows]
    pts = [(i, f, op) for i, f, op in pts if i]
    if not pts and not ceilings:
        ax.text(0.5, 0.5, "no ok rows and no ceilings", ha="center", va="center", transform=ax.transAxes)
        return
    xs = [i for i, _, _ in pts] or [1.0]
    lo, hi = min(xs) / 8, max(xs) * 8
    for c in ceilings:
        if c.bandwidth and c.flops:
            ridge = c.flops / c.bandwidth
            lo, hi = min(lo, ridge / 8), max(hi, ridge * 8)
    grid = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    styles = {"spec": ("-", "tab:red"), "measured": ("--", "tab:purple")}
    for c in ceilings:
        ls, colour = styles.get(c.label, (":", "black"))
        ys = [min(c.flops / 1e12 if c.flops else math.inf, c.bandwidth * x / 1e12 if c.bandwidth else math.inf)
              for x in grid]
        if all(math.isinf(y) for y in ys):
            continue
        parts = []
        if c.flops:
            parts.append(f"{_num(c.flops / 1e12)} TFLOP/s")
        if c.bandwidth:
            parts.append(f"{_num(c.bandwidth / 1e9)} GB/s")
        ax.plot(grid, ys, ls, color=colour, label=f"{c.label}: {', '.join(parts)}"
                + ("" if c.bandwidth else " (memory roof unknown)"))
    for op in dict.fromkeys(op for _, _, op in pts):
        mine = [(i, f) for i, f, o in pts if o == op]
        ax.plot([i for i, _ in mine], [f for _, f in mine], _marker(op), color="tab:blue",
                label=f"Tracea {op} (ok rows)", zorder=3)
    bw = max((c.bandwidth for c in ceilings if c.bandwidth), default=None)
    if bw and any(f * 1e12 > bw * i * 1.05 for i, f, _ in pts):
        notes = [*notes, "points above the memory roof: their operands fit in cache, the roof is DRAM bandwidth"]
    values = [f for _, f, _ in pts] + [c.flops / 1e12 for c in ceilings if c.flops]
    if values:
        ax.set_ylim(min(values) / 4, max(values) * 3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter, LogLocator

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):  # 0.2, not 2x10^-1
        axis.set_major_formatter(plain)
        axis.set_minor_locator(LogLocator(subs=(2, 5)))
        axis.set_minor_formatter(plain)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of the op's minimum traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(True, which="both", alpha=0.25)
    ax.set_title(f"roofline: {device}")
    ax.legend(loc="lower right", fontsize=8)
    if notes:  # under the axes, where no point or line can hide them
        ax.text(0.0, -0.16, "\n".join(_wrap(n, 95) for n in notes), transform=ax.transAxes, fontsize=7, va="top",
                ha="left", color="dimgray")


def _num(x: float) -> str:
    """1070 rather than 1.07e+03; 0.333 stays 0.333."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _wrap(text: str, width: int = 70) -> str:
    words, lines, line = text.split(), [], ""
    for w in words:
        if len(line) + len(w) + 1 > width and line:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    lines.append(line)
    return "\n".join(lines)
