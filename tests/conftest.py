import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run scripts/gpu_check.py on the device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def registry():
    from kernelgym_gap.core.registry import default_registry
    return default_registry()


@pytest.fixture
def fixture_source():
    def read(*parts: str) -> str:
        return (FIXTURES.joinpath(*parts)).read_text()
    return read


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch's thread pool at one thread for a module's tests (`pytestmark = pytest.mark.usefixtures(...)`): on a
    loaded 2-core host its pool made the import and input audits 30x slower."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
