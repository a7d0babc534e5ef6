"""The built-in tasks, one folder per task under its category (<category>/<name>/task.py). Not imported as a
package by the harness (core/registry.py loads each task.py by path); this file makes the folder the
package data `kernelgym_gap.builtin_tasks` that setup.py maps it to (core/builtin.py)."""
