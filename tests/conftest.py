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
def warm_cuda():
    """A warm pool on GPU 0 (its checker and its pre-started children), one per test module: the gpu tests that
    evaluate through the warm path (test_engine_handover, test_handover_hostile, test_library_warm)."""
    from kernelgym_gap.api.warm import WarmPool
    with WarmPool("cuda", gpu_index=0) as pool:
        yield pool


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch's thread pool at one thread for a module's tests (`pytestmark = pytest.mark.usefixtures(...)`): on a
    loaded 2-core host its pool made the import and input audits 30x slower."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# The owed-tests device step runs one pytest process per test (scripts/device_session.sh owed-tests): each made its
# own calibration and measured every library time in full, and MoeTokenPermute's test ran past its 150 s there
# (2026-12-06 evening). With KGG_GPU_TEST_CACHE_DIR set, the GPU tests that take `device_cache_dir` share one
# calibration and library cache across those processes, as a service shares them; unset, each module has its own.
GPU_TEST_CACHE_ENV = "KGG_GPU_TEST_CACHE_DIR"


def shared_or_own_cache_dir(environ, make_own) -> Path:
    """The directory named by KGG_GPU_TEST_CACHE_DIR (made if missing), else `make_own()`."""
    shared = environ.get(GPU_TEST_CACHE_ENV)
    if shared:
        path = Path(shared)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return make_own()


@pytest.fixture(scope="module")
def device_cache_dir(tmp_path_factory) -> Path:
    return shared_or_own_cache_dir(os.environ, lambda: tmp_path_factory.mktemp("cfg"))
