"""``tracea report --plot FILE.png``: TFLOP/s against shape (or trial, for one shape) beside the
baseline, and a roofline with the device's ceilings from the doctor.

matplotlib is an optional extra (``pip install 'tracea[plot]'``), imported only here, on use, with
the Agg backend (no display needed).
"""

from __future__ import annotations

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


def _baseline_tflops(r: dict[str, Any]) -> float | None:
    if r["status"] != "ok" or not r["tflops"] or not r["baseline_p50_ms"] or not r["p50_ms"]:
        return None
    return r["tflops"] * r["p50_ms"] / r["baseline_p50_ms"]  # same FLOP count, the baseline's time


def _intensity(r: dict[str, Any]) -> float | None:
    if r["status"] != "ok" or not r["tflops"] or not r["gbps"]:
        return None
    return r["tflops"] * 1e12 / (r["gbps"] * 1e9)  # FLOP per byte (both from the same time)


def plot(rows: list[dict[str, Any]], out: str | Path, device: str, ceilings: list[RooflineCeiling],
         notes: list[str], title: str | None = None) -> Path:
    """Draw the two panels into ``out`` (PNG, SVG or PDF by extension); returns the path."""
    out = Path(out)
    if out.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise BadInputError(f"--plot {out}: the extension must be .png, .svg or .pdf")
    if not rows:
        raise BadInputError("the metrics file has no rows to plot")
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.2), constrained_layout=True)
    _performance(ax1, rows)
    _roofline(ax2, rows, device, ceilings, notes)
    fig.suptitle(title or f"Tracea metrics: {len(rows)} rows", fontsize=12)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110)
    except OSError as exc:
        raise BadInputError(f"--plot {out}: cannot write ({exc.strerror})") from None
    finally:
        plt.close(fig)
    return out


def _performance(ax: Any, rows: list[dict[str, Any]]) -> None:
    labels = list(dict.fromkeys(shape_label(r) for r in rows))
    by_shape = len(labels) > 1
    if by_shape:
        xs = [labels.index(shape_label(r)) for r in rows]
        ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 4 else 0, ha="right" if len(labels) > 4 else "center")
        ax.set_xlabel("shape")
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
        name = base[0][2] or "baseline"
        ax.plot([b[0] for b in base], [b[1] for b in base], "s", mfc="none", color="tab:green",
                label=f"baseline ({name}, same run)", zorder=2)
    failed = [(x, r["status"]) for x, r in zip(xs, rows, strict=True) if r["status"] != "ok"]
    for status in dict.fromkeys(s for _, s in failed):
        pts = [x for x, s in failed if s == status]
        ax.plot(pts, [0.0] * len(pts), "x", color=STATUS_COLOURS.get(status, "black"), markersize=9,
                label=f"{status} ({len(pts)})", clip_on=False, zorder=4)
    ax.set_ylabel("TFLOP/s (p50)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title("throughput" + (" per shape" if by_shape else " per trial"))
    ax.legend(loc="best", fontsize=8)


def _roofline(ax: Any, rows: list[dict[str, Any]], device: str, ceilings: list[RooflineCeiling],
              notes: list[str]) -> None:
    pts = [(_intensity(r), r["tflops"] * 1e12) for r in rows]
    pts = [(i, f) for i, f in pts if i]
    if not pts and not ceilings:
        ax.text(0.5, 0.5, "no ok rows and no ceilings", ha="center", va="center", transform=ax.transAxes)
        return
    xs = [i for i, _ in pts] or [1.0]
    lo, hi = min(xs) / 8, max(xs) * 8
    for c in ceilings:
        if c.bandwidth and c.flops:
            ridge = c.flops / c.bandwidth
            lo, hi = min(lo, ridge / 8), max(hi, ridge * 8)
    grid = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    styles = {"spec": ("-", "tab:red"), "measured": ("--", "tab:purple")}
    for c in ceilings:
        ls, colour = styles.get(c.label, (":", "black"))
        ys = [min(c.flops if c.flops else math.inf, c.bandwidth * x if c.bandwidth else math.inf) for x in grid]
        if all(math.isinf(y) for y in ys):
            continue
        parts = []
        if c.flops:
            parts.append(f"{c.flops / 1e12:.3g} TFLOP/s")
        if c.bandwidth:
            parts.append(f"{c.bandwidth / 1e9:.3g} GB/s")
        ax.plot(grid, ys, ls, color=colour, label=f"{c.label}: {', '.join(parts)}")
        if c.flops and not c.bandwidth:  # a compute roof with no known memory slope: say so on the line
            ax.annotate("memory roof unknown", (grid[0], c.flops), textcoords="offset points", xytext=(4, -12),
                        fontsize=7, color=colour)
    if pts:
        ax.plot([i for i, _ in pts], [f for _, f in pts], "o", color="tab:blue", label="Tracea (ok rows)", zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of the op's minimum traffic)")
    ax.set_ylabel("FLOP/s")
    ax.grid(True, which="both", alpha=0.25)
    ax.set_title(f"roofline: {device}")
    ax.legend(loc="lower right", fontsize=8)
    if notes:
        ax.text(0.01, 0.99, "\n".join(_wrap(n) for n in notes), transform=ax.transAxes, fontsize=7, va="top",
                ha="left", color="dimgray")


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
