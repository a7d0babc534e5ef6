"""scripts/probes/handover_diag.py's comparisons on cpu (the script itself needs CUDA IPC: owed on the GPU,
docs/measurement.md). Each function decides one column of the diagnosis table, so each is held here to what it
must say about a view that is right, zeros, another output's bytes, or partly wrong."""
import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _mod():
    spec = importlib.util.spec_from_file_location("handover_diag", ROOT / "scripts" / "probes" / "handover_diag.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


diag = _mod()


def test_segment_offset_finds_the_segment_holding_a_pointer():
    snap = [{"address": 1000, "total_size": 500}, {"address": 4096, "total_size": 2 << 20}]
    assert diag.segment_offset(snap, 1000) == (0, 500)
    assert diag.segment_offset(snap, 1499) == (499, 500)
    assert diag.segment_offset(snap, 4096 + 40448) == (40448, 2 << 20)
    assert diag.segment_offset(snap, 1500) is None and diag.segment_offset(snap, 999) is None


def test_compare_bytes_says_equal_zeros_partial_and_whose_bytes_the_view_holds():
    truth = bytes(range(256)) * 4
    assert diag.compare_bytes(truth, truth, {}) == {"equal": True}
    zeros = diag.compare_bytes(bytes(len(truth)), truth, {})
    assert zeros["view_all_zero"] and not zeros["equal"] and zeros["first_differing_byte"] == 1
    other = bytes(reversed(truth)) + b"tail"
    moved = diag.compare_bytes(other[:len(truth)], truth, {"trial_7.tensor": other, "trial_9.tensor": b"x"})
    assert moved["view_is_the_start_of"] == ["trial_7.tensor"] and not moved["view_all_zero"]
    half = truth[:512] + bytes(512)
    part = diag.compare_bytes(half, truth, {})
    # bytes 512.. differ except where the truth itself is 0 (byte 768: range(256)'s first value)
    assert part["first_differing_byte"] == 513 and part["last_differing_byte"] == 1023
    assert part["bytes_differing"] == 510 and part["fraction_differing"] == round(510 / 1024, 6)
    assert diag.compare_bytes(truth[:10], truth, {}) == {"equal": False, "sizes": [10, 1024]}


def test_non_finite_share_counts_inf_and_nan_of_float_views_only():
    t = torch.tensor([1.0, float("nan"), float("inf"), 2.0], dtype=torch.float16)
    assert diag.non_finite_share(t) == 0.5
    assert diag.non_finite_share(torch.arange(4)) == 0.0 and diag.non_finite_share(torch.empty(0)) == 0.0
    # random bits read as float16: about 1/32 of them are inf or nan (the share the false verdicts showed)
    bits = torch.randint(0, 1 << 16, (1 << 16,), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    share = diag.non_finite_share(bits.to(torch.int16).view(torch.float16))
    assert 0.025 < share < 0.037, share


def test_without_cuda_the_script_says_so_and_exits_2(capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine runs the diagnosis itself (scripts/device_session.sh handover-diag)")
    assert diag.main(["--task", "RowSum"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_sentinel_share_is_the_share_of_bytes_no_copy_reached():
    assert diag.sentinel_share(bytes([diag.SENTINEL]) * 8) == 1.0
    assert diag.sentinel_share(bytes([diag.SENTINEL]) * 2 + bytes(6)) == 0.25 and diag.sentinel_share(b"") == 0.0
