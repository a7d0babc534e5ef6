"""The warm checker's read arena (Placement.read_arena_bytes; judge/read_arena.py): host memory kept from one
evaluation to the next that the check's prefetch reads output files into. Slices are aligned, disjoint until a
reset and exactly the size asked; a request the block cannot hold gets fresh memory, and the next reset grows the
block to what the evaluation wanted, up to its bound, never shrinking; a file read into it is the file read
fresh, in every dtype; and a warm checker with an arena gives, evaluation after evaluation (honest, wrong,
truncated, forged and oversized in turn, with the files deleted as the lane is entered, so that only what was read counts), the
verdicts and messages of the check without it, its reply saying how the arena was used."""
import sys
from pathlib import Path

import pytest
import torch

from kernelgym_gap.api.warm import WarmChecker, WarmPool
from kernelgym_gap.core import tensor_file
from kernelgym_gap.core.lane import held
from kernelgym_gap.core.placement import MAX_READ_ARENA_BYTES, Placement
from kernelgym_gap.judge import trusted
from kernelgym_gap.judge.read_arena import ALIGN, ReadArena

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_check_prefetch import CONFIG, _case  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def task(registry):
    return registry.get("AddReLU")


def test_slices_are_aligned_disjoint_and_exact_until_a_reset():
    arena = ReadArena(1 << 20)
    first = (arena.take(100), arena.take(1))      # no block yet: fresh memory, the sizes remembered
    assert [t.numel() for t in first] == [100, 1] and arena.size == 0 and arena.fresh == 2
    arena.reset()
    assert arena.size == 2 * ALIGN + ALIGN         # what the evaluation wanted, each request aligned
    a, b = arena.take(100), arena.take(1)
    assert a.numel() == 100 and b.numel() == 1 and arena.fresh == 0
    base = arena._block.data_ptr()
    assert (a.data_ptr() - base) % ALIGN == 0 and (b.data_ptr() - base) % ALIGN == 0
    assert b.data_ptr() >= a.data_ptr() + 100                     # disjoint
    a.fill_(7)
    b.fill_(9)
    assert int(a.sum()) == 700 and int(b.sum()) == 9
    c = arena.take(64)                            # past the block: fresh, and the block grows at the reset
    assert arena.fresh == 1 and not base <= c.data_ptr() < base + arena.size
    arena.reset()
    assert arena.size == 4 * ALIGN and arena.fresh == 0 and arena.fresh_total == 3
    arena.reset()                                 # nothing wanted: the block stays (never shrinks)
    assert arena.size == 4 * ALIGN and arena.resets == 3
    assert arena.take(0).numel() == 0


def test_the_block_grows_only_to_its_bound():
    arena = ReadArena(1000)
    arena.take(5000)
    arena.reset()
    assert arena.size == 1000
    assert arena.take(990).numel() == 990 and arena.fresh == 0
    assert arena.take(20).numel() == 20 and arena.fresh == 1     # beyond the bound: fresh memory, as without


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, MAX_READ_ARENA_BYTES + 1, "1G"])
def test_the_bounds_are_checked(bad):
    with pytest.raises(ValueError):
        ReadArena(bad)
    if bad != 0:
        with pytest.raises(ValueError, match="read_arena_bytes"):
            Placement(read_arena_bytes=bad)
    with pytest.raises(ValueError):
        ReadArena(64).take(-1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64,
                                   torch.uint8])
def test_a_file_read_into_the_arena_is_the_file_read_fresh(tmp_path, dtype):
    arena = ReadArena(1 << 20)
    arena.reset()
    arena.take(3)                                  # an odd offset before: the next slice is still aligned
    arena.reset()
    g = torch.Generator().manual_seed(0)
    for i, shape in enumerate([(7,), (3, 5), (0, 4), (2, 3, 11)]):
        t = (torch.randn(shape, generator=g) * 100).to(dtype)
        path = tmp_path / f"{i}.tensor"
        tensor_file.write_tensor(path, t)
        fresh = tensor_file.read_tensor(path, 1 << 20)
        kept = tensor_file.read_tensor(path, 1 << 20, into=arena.take)
        assert kept.dtype == dtype and kept.shape == t.shape and torch.equal(kept, fresh) and torch.equal(kept, t)


def _deleting(lane_dir, outputs: Path):
    """The shared lane, whose entry deletes the output files: a check that reads them under it fails."""
    def lane():
        for f in outputs.iterdir():
            f.unlink()
        return held(str(lane_dir), 0, "shared")
    return lane


def test_a_warm_checker_with_an_arena_gives_the_verdicts_without_it(task, tmp_path):
    # a hostile child's files among them: cut short, forged far past the expected size, one element over the bound
    sequence = [("ok", "ok", "ok"), ("ok", "wrong", "ok"), ("ok", "ok", "ok"), ("wrong", "truncated", "ok"),
                ("ok", "ok", "ok"), ("ok", "truncated", "ok"), ("forged", "ok", "ok"), ("ok", "just_over", "ok"),
                ("ok", "ok", "ok")]
    states, verdicts = [], []
    with WarmChecker(device="cpu", read_arena_bytes=8 << 20) as w:
        assert w._state["proc"].args[-2:] == ["--read-arena", str(8 << 20)]
        for i, kinds in enumerate(sequence):
            # the same case twice: checked without the arena (in this process, its files read before the lane
            # as the server does; a file the prefetch left is deleted by the lane, as here) and with it
            alone = tmp_path / f"{i}-alone"
            alone.mkdir()
            job, report = _case(task, alone, kinds)
            (alone / "private").mkdir()
            expected = trusted.check_in_process(task, job, report, "cpu", alone / "private", CONFIG,
                                                lane=_deleting(tmp_path / "lanes", Path(job.outputs_dir)))
            where = tmp_path / str(i)
            where.mkdir()
            job, report = _case(task, where, kinds)
            private = where / "private"
            private.mkdir()
            got = trusted.check_in_process(task, job, report, "cpu", private, CONFIG, checker=w,
                                           lane=_deleting(tmp_path / "lanes", Path(job.outputs_dir)))
            assert got == expected and got.message == expected.message, (i, kinds)
            assert "prefetch" in got.seconds
            states.append(w.last_arena)
            verdicts.append(got.status.value)
        assert w.starts == 1
    assert [s["resets"] for s in states] == list(range(1, len(sequence) + 1))
    assert states[0]["size"] == 0 and states[0]["fresh"] > 0          # the first evaluation read fresh
    assert all(s["size"] > 0 and s["fresh"] == 0 for s in states[1:6])  # the same sizes: into the kept block
    # the forged file, far larger, took fresh memory; the block grew to it (within its bound) and held the rest
    assert states[6]["fresh"] > 0 and states[7]["size"] > states[6]["size"]
    assert all(s["fresh"] == 0 and s["size"] == states[7]["size"] for s in states[7:])
    assert states[-1]["fresh_total"] == states[0]["fresh"] + states[6]["fresh"]
    assert verdicts[:3] == ["ok", "mismatch", "ok"] and verdicts[4] == verdicts[8] == "ok"   # none carried over
    assert verdicts[6] != "ok" and verdicts[7] != "ok"


def test_without_an_arena_the_server_is_started_as_before(tmp_path):
    with WarmChecker(device="cpu") as w:
        assert "--read-arena" not in w._state["proc"].args and w.read_arena_bytes == 0
    with pytest.raises(ValueError, match="read_arena_bytes"):
        WarmChecker(device="cpu", read_arena_bytes=-5)


def test_the_server_refuses_a_bad_arena_before_it_answers_ready():
    import subprocess
    done = subprocess.run([sys.executable, "-m", "kernelgym_gap.judge.checker", "--serve", "--device", "cpu",
                           "--read-arena", "lots"], capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and b"--read-arena" in done.stderr and b"ready" not in done.stdout


def test_the_warm_pool_hands_its_checker_the_arena():
    with WarmPool(device="cpu", read_arena_bytes=1 << 20) as pool:
        assert pool.checker.read_arena_bytes == 1 << 20


def test_the_bench_prints_both_paths_side_by_side(tmp_path):
    import subprocess
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(root / "scripts" / "read_arena_bench.py"), "--files", "3", "--mib",
                           "1", "--reps", "2", "--dir", str(tmp_path), "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    import json
    row = json.loads(out.read_text())
    assert row["files"] == 3 and row["total_mib"] == 3 and row["fresh_p50_s"] > 0 and row["arena_p50_s"] > 0
    assert row["speedup"] > 0 and row["reps"] == 2           # (medians of milliseconds here: no ratio asserted)
    assert done.stdout.strip().splitlines()[-2].startswith("host_cpus")        # the table last
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("kgg-arena-bench-")]
