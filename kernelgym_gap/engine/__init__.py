"""One evaluation as a list of typed stages (stages.py), run by `evaluate` (pipeline.py)."""
from kernelgym_gap.engine.pipeline import evaluate, resolve_backend

__all__ = ["evaluate", "resolve_backend"]
