"""Where the built-in tasks and agents are: package data of the installed package.

The checkout's tasks/ and agents/ folders stay the source of truth (other folders of the project add to
them; nothing is copied by hand). setup.py maps them into the package as `kernelgym_gap.builtin_tasks` and
`kernelgym_gap.builtin_agents`: a wheel carries them inside kernelgym_gap/, and an editable install's
finder points those two names at the checkout's folders. Either way `importlib.resources` finds them, so
nothing here reads the checkout's layout.

One fallback: an editable install made before that mapping existed (its finder knows no
`kernelgym_gap.builtin_tasks`) still finds the folders beside the package, where a checkout has them; `pip
install -e .` again removes the need for it. A non-editable install without the package data (a wheel built
some other way) finds neither, and the registry says so (core/registry.py)."""
from __future__ import annotations

import importlib.resources
from pathlib import Path

TASKS_PACKAGE = "kernelgym_gap.builtin_tasks"
AGENTS_PACKAGE = "kernelgym_gap.builtin_agents"
# the folder that holds the package: site-packages when installed, the checkout's root when editable
PACKAGE_PARENT = Path(__file__).resolve().parents[2]


def resource_dir(package: str, beside_the_package: str) -> Path:
    """The folder of `package`'s data (a real directory: pip installs wheels unpacked), else the folder
    `beside_the_package` next to kernelgym_gap/ (the fallback above), which may not exist."""
    try:
        root = importlib.resources.files(package)
    except ModuleNotFoundError:
        root = None
    if root is not None:
        path = Path(str(root))
        if path.is_dir():
            return path
    return PACKAGE_PARENT / beside_the_package


def tasks_dir() -> Path:
    return resource_dir(TASKS_PACKAGE, "tasks")


def agents_dir() -> Path:
    return resource_dir(AGENTS_PACKAGE, "agents")
