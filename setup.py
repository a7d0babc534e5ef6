"""The package's layout for setuptools (the rest of the metadata is pyproject.toml's). The built-in tasks and
agents stay where they are written, the checkout's tasks/ and agents/, and are mapped into the package as
`kernelgym_gap.builtin_tasks` and `kernelgym_gap.builtin_agents`: a wheel carries them inside kernelgym_gap/,
and an editable install points those names at the two folders (kernelgym_gap/core/builtin.py reads them
through importlib.resources). pyproject.toml cannot add packages from other folders to a found list, hence
this file."""
from setuptools import find_packages, setup

BUILTIN = {"kernelgym_gap.builtin_tasks": "tasks", "kernelgym_gap.builtin_agents": "agents"}

setup(
    packages=find_packages(include=["kernelgym_gap", "kernelgym_gap.*"]) + list(BUILTIN),
    package_dir=BUILTIN,       # their files: pyproject.toml's package-data (which overrides any given here)
)
