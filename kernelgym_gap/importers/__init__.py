"""Importers: problem sets in other formats made into task folders the registry loads (`--tasks-dir`).
kernelbench.py: KernelBench-style problem files (docs/importing.md)."""
