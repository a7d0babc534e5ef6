"""The E-vs-U screening chart, drawn server-side as inline SVG (no script, testable as text).

x: library-relative efficiency E = t_library / t_kernel; y: roofline utilization U = t_floor / t_kernel;
both on log scales, one grid line per decade. The screening thresholds are dashed lines, from
kernelgym_gap.core.config.DiagnosisConfig (the values the judge's diagnosis uses).
"""
from __future__ import annotations

import math
from html import escape

VERDICT_CLASSES = {"efficient": "v-efficient", "repairable": "v-repairable", "structural": "v-structural"}


def screening_thresholds() -> dict[str, float]:
    """E and U thresholds of the diagnosis (core.config.DiagnosisConfig's defaults: what the judge uses)."""
    from kernelgym_gap.core.config import DiagnosisConfig
    d = DiagnosisConfig()
    return {"E": d.e_threshold, "U": d.u_threshold}


def verdict_class(verdict: str | None) -> str:
    v = (verdict or "").lower()
    for word, cls in VERDICT_CLASSES.items():
        if word in v:
            return cls
    return "v-other"


def _decades(values: list[float], lo: float, hi: float) -> tuple[int, int]:
    vals = [v for v in values if v and v > 0] + [lo, hi]
    return math.floor(math.log10(min(vals)) + 1e-9), math.ceil(math.log10(max(vals)) - 1e-9)


def _tick(exp: int) -> str:
    return f"{10.0 ** exp:g}" if -4 <= exp <= 4 else f"1e{exp}"


def screening_svg(points: list[dict], thresholds: dict[str, float] | None = None, *, width: int = 720,
                  height: int = 440, label_limit: int = 16, title: str = "") -> str:
    """points: dicts with id, submitter, e, u, verdict (and optional reward). Returns an <svg> element."""
    th = thresholds or screening_thresholds()
    ml, mr, mt, mb = 64, 20, 22, 48
    pw, ph = width - ml - mr, height - mt - mb
    x0, x1 = _decades([p["e"] for p in points] + [th["E"]], 0.01, 2.0)
    y0, y1 = _decades([p["u"] for p in points] + [th["U"]], 0.01, 1.0)

    def sx(v: float) -> float:
        return ml + (math.log10(v) - x0) / (x1 - x0) * pw

    def sy(v: float) -> float:
        return mt + ph - (math.log10(v) - y0) / (y1 - y0) * ph

    out = [f'<svg class="screening" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" aria-label="{escape(title or "E versus U screening chart")}">',
           f'<rect class="plot-bg" x="{ml}" y="{mt}" width="{pw}" height="{ph}"/>']
    ex, uy = sx(th["E"]), sy(th["U"])
    out.append(f'<rect class="zone-efficient" x="{ex:.1f}" y="{mt}" width="{ml + pw - ex:.1f}" height="{uy - mt:.1f}"/>')
    for k in range(x0, x1 + 1):
        x = sx(10.0 ** k)
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}"/>')
        out.append(f'<text class="tick" x="{x:.1f}" y="{mt + ph + 16}" text-anchor="middle">{_tick(k)}</text>')
    for k in range(y0, y1 + 1):
        y = sy(10.0 ** k)
        out.append(f'<line class="grid" x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{ml - 6}" y="{y + 4:.1f}" text-anchor="end">{_tick(k)}</text>')
    out.append(f'<rect class="frame" x="{ml}" y="{mt}" width="{pw}" height="{ph}"/>')
    # the screening thresholds, dashed
    out.append(f'<line class="threshold threshold-e" x1="{ex:.1f}" y1="{mt}" x2="{ex:.1f}" y2="{mt + ph}" '
               f'stroke-dasharray="6 4" data-threshold="E" data-value="{th["E"]:g}"/>')
    out.append(f'<text class="threshold-label" x="{ex + 4:.1f}" y="{mt + ph - 6}">E = {th["E"]:g}</text>')
    out.append(f'<line class="threshold threshold-u" x1="{ml}" y1="{uy:.1f}" x2="{ml + pw}" y2="{uy:.1f}" '
               f'stroke-dasharray="6 4" data-threshold="U" data-value="{th["U"]:g}"/>')
    out.append(f'<text class="threshold-label" x="{ml + 6}" y="{uy - 5:.1f}">U = {th["U"]:g}</text>')
    out.append(f'<text class="zone-label" x="{ml + pw - 6}" y="{mt + 14}" text-anchor="end">efficient</text>')
    out.append(f'<text class="zone-label" x="{ml + 6}" y="{mt + 14}">below library, near roofline</text>')
    out.append(f'<text class="zone-label" x="{ml + pw - 6}" y="{mt + ph - 6}" text-anchor="end">'
               f'at library, far from roofline</text>')
    # the library itself sits at E = 1
    if x0 <= 0 <= x1:
        out.append(f'<line class="library" x1="{sx(1):.1f}" y1="{mt}" x2="{sx(1):.1f}" y2="{mt + ph}"/>')
        out.append(f'<text class="library-label" x="{sx(1) + 4:.1f}" y="{mt + 28}">library</text>')
    out.append(f'<text class="axis-label" x="{ml + pw / 2:.1f}" y="{height - 8}" text-anchor="middle">'
               f'E = t_library / t_kernel (log)</text>')
    out.append(f'<text class="axis-label" transform="translate(16 {mt + ph / 2:.1f}) rotate(-90)" '
               f'text-anchor="middle">U = t_floor / t_kernel (log)</text>')
    labelled = len(points) <= label_limit
    for p in sorted(points, key=lambda p: p.get("reward") or 0):
        x, y = sx(p["e"]), sy(p["u"])
        tip = (f'#{p["id"]} {p["submitter"]}: E={p["e"]:.3g}, U={p["u"]:.3g}'
               + (f', reward={p["reward"]:.3f}' if p.get("reward") is not None else "")
               + (f', {p["verdict"]}' if p.get("verdict") else ""))
        out.append(f'<a href="/submissions/{int(p["id"])}"><circle class="point {verdict_class(p.get("verdict"))}" '
                   f'cx="{x:.1f}" cy="{y:.1f}" r="5.5" data-submission="{int(p["id"])}">'
                   f'<title>{escape(tip)}</title></circle></a>')
        if labelled:
            anchor, dx = ("end", -8) if x > ml + pw * 0.8 else ("start", 8)
            out.append(f'<text class="point-label" x="{x + dx:.1f}" y="{y + 4:.1f}" text-anchor="{anchor}">'
                       f'{escape(str(p["submitter"]))[:28]}</text>')
    if not points:
        out.append(f'<text class="empty" x="{ml + pw / 2:.1f}" y="{mt + ph / 2:.1f}" text-anchor="middle">'
                   'No correct submission with measured E and U yet (measured on the cuda backend only)</text>')
    out.append("</svg>")
    return "\n".join(out)
