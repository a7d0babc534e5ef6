"""A run's figures (matplotlib, the `plots` extra; the Agg backend, no display): the fast_p curve (share of
samples correct with E >= p, p from 0 to 3; several runs overlaid for a comparison) and the E-vs-U scatter of
the correct samples (log-log, coloured by verdict, with the screening thresholds). Each figure is written as
the file name's format says (.svg or .png)."""
from __future__ import annotations

from pathlib import Path

from kernelgym_gap.bench import metrics

GRID = [i / 50 for i in range(0, 151)]          # p = 0 .. 3
COLOURS = {"efficient": "#2a9d8f", "repairable_defect": "#e76f51", "structural_residual": "#6c757d"}


def available() -> str | None:
    """None when matplotlib can be imported, else why not."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[plots]')"
    return None


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def fast_p_curve(reports: list[dict], path: str | Path) -> Path:
    """fast_p against p for each report (overall: the mean over tasks), the reported p marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in reports:
        ys = metrics.fast_p_curve(r["samples"], GRID)
        ax.plot(GRID, ys, label=f"{r['label']}", linewidth=1.8)
        ps = [float(p) for p in r["ps"]]
        ax.scatter(ps, metrics.fast_p_curve(r["samples"], ps), s=14, zorder=3)
    ax.axvline(1.0, color="#999", linewidth=0.8, linestyle=":")
    ax.set_xlabel("p (E = t_eager / t_kernel >= p)")
    ax.set_ylabel("fast_p (share of samples, mean over tasks)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(0, GRID[-1])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("fast_p" + (f": {reports[0]['label']}" if len(reports) == 1 else ""))
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def e_vs_u(report: dict, path: str | Path, thresholds: tuple[float, float] = (0.5, 0.3)) -> Path:
    """One point per correct sample with measured E and U, coloured by verdict."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    pts = [s for s in report["samples"] if s["correct"] and s["E"] and s["U"]]
    for verdict, colour in list(COLOURS.items()) + [(None, "#333")]:
        sel = [s for s in pts if s["verdict"] == verdict or (verdict is None and s["verdict"] not in COLOURS)]
        if sel:
            ax.scatter([s["U"] for s in sel], [s["E"] for s in sel], s=22, c=colour, alpha=0.8,
                       label=f"{verdict or 'no verdict'} ({len(sel)})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axhline(thresholds[0], color="#999", linewidth=0.8, linestyle="--")
    ax.axvline(thresholds[1], color="#999", linewidth=0.8, linestyle="--")
    ax.axhline(1.0, color="#bbb", linewidth=0.8, linestyle=":")
    ax.set_xlabel("U = t_floor / t_kernel (roofline utilization)")
    ax.set_ylabel("E = t_eager / t_kernel")
    ax.set_title(f"E vs U: {report['label']} ({len(pts)} correct samples)")
    ax.grid(alpha=0.3, which="both")
    if pts:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_run_plots(report: dict, out_dir: str | Path, fmt: str = "svg") -> dict:
    """Both figures of one run into out_dir; {"fast_p": path, "e_vs_u": path} or {"skipped": why}."""
    why = available()
    if why:
        return {"skipped": why}
    if not report["speed_measured"]:
        return {"skipped": f"the {report['backend']} backend measures no time: no E, no U, no fast_p curve"}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from kernelgym_gap.judge.diagnosis import DEFAULT
    return {"fast_p": str(fast_p_curve([report], out / f"fast_p.{fmt}")),
            "e_vs_u": str(e_vs_u(report, out / f"e_vs_u.{fmt}", (DEFAULT.e_threshold, DEFAULT.u_threshold)))}
