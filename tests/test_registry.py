import pytest

from kernelgym_gap.errors import UnknownTaskError
from kernelgym_gap.task import CATEGORIES


def test_every_category_has_tasks(registry):
    cats = {t.category for t in registry}
    assert cats == set(CATEGORIES)
    assert len(registry) >= 8


def test_tasks_follow_the_contract(registry):
    for task in registry:
        assert task.validate() == [], task.id
        assert task.id == f"kernelgym_gap/{task.name}-v{task.version}"
        assert "triton" in task.dsls
        for backend in ("cpu", "cuda"):
            w = task.workload(backend)
            for s in w.all_shapes():
                for d in w.dtypes:
                    assert task.min_bytes(s, d) > 0


def test_unknown_task_suggests(registry):
    with pytest.raises(UnknownTaskError, match="Did you mean"):
        registry.get("LayerNrom")


def test_lookup_by_name_and_id(registry):
    assert registry.get("LayerNorm") is registry.get("kernelgym_gap/LayerNorm-v0")
