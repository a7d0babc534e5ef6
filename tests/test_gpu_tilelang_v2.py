"""The optimized TileLang solutions of issue 34's MoE, backward and paged-attention tasks on a real GPU
(skipped on a CPU machine). Seven of them lower to TileLang's C target and are verified on the cpu backend
(tests/test_solutions.py); LinearBackward's, AttentionBackward's and FusedMoe's are GPU-style and only
compiled there (cpu_status "unverified"), so this is where their correctness is first checked. The
efficiency per shape is printed (-s) for the gap study; no E threshold is asserted here."""
import pytest

pytestmark = pytest.mark.gpu

TASKS = ("MoeTopkRouting", "MoeTokenPermute", "MoeTokenUnpermute", "MoeAlignBlockSize", "FusedMoe",
         "RMSNormBackward", "CrossEntropyBackward", "LinearBackward", "AttentionBackward", "PagedDecodeAttention",
         # the quantization and indexing tasks (ScaledGemm's is GPU-style: its first correctness check is here)
         "Int8TokenQuant", "Fp8TokenQuant", "Fp8BlockQuant", "GroupDequant", "ScaledGemm", "EmbeddingGather",
         "IndexAdd", "TopK", "TopPSample")


@pytest.fixture(scope="module")
def cuda_config():
    from kernelgym_gap.core.config import EvalConfig
    return EvalConfig(trial_seed=7)


@pytest.fixture(scope="module")
def where(tmp_path_factory):
    """GPU 0, the device caches in temporary files (core/placement.Placement)."""
    from kernelgym_gap.core.placement import Placement
    d = tmp_path_factory.mktemp("cfg")
    return Placement(calibration_path=str(d / "calibration.json"), library_cache_path=str(d / "library_times.json"))


@pytest.mark.parametrize("name", TASKS)
def test_optimized_tilelang_solution_on_cuda(registry, cuda_config, where, name):
    from kernelgym_gap.engine.pipeline import evaluate
    task = registry.get(name)
    sol = next(s for s in task.solutions if s.dsl == "tilelang" and s.kind == "optimized")
    record = evaluate(task, task.solution_path(sol).read_text(), sol.dsl, "cuda", cuda_config, placement=where)
    assert record.status.value == "ok", record.message
    assert record.terms["per_shape"], record.terms
    for p in record.terms["per_shape"]:
        assert p["E"] is not None and p["kernel_ms"] > 0, p
        print(f"{name} {sol.file} {p['shape']} {p['dtype']}: {p['kernel_ms']:.4f} ms, library "
              f"{p['library_ms']:.4f} ms, E {p['E']:.2f} U {p['U']:.2f}")
