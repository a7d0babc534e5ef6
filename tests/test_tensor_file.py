"""The output hand-off file (core/tensor_file.py): what the child writes comes back bit for bit, and a file
forged in the child's scratch is rejected by its header and size before any data is read."""
import json
import os
import struct

import pytest
import torch

from kernelgym_gap.core import tensor_file as tf


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int64", "bool", "uint8"])
def test_a_tensor_comes_back_bit_for_bit(tmp_path, dtype):
    t = (torch.randn(3, 5, 7) * 100).to(getattr(torch, dtype))
    n = tf.write_tensor(tmp_path / "a.tensor", t)
    back = tf.read_tensor(tmp_path / "a.tensor", max_bytes=n)
    assert back.dtype == t.dtype and back.shape == t.shape
    assert torch.equal(back.view(torch.uint8), t.view(torch.uint8))       # bit for bit, nan payloads included


def test_non_finite_values_scalars_empty_and_strided_tensors(tmp_path):
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0], dtype=torch.bfloat16)
    cases = {"special": special, "scalar": torch.tensor(2.5), "empty": torch.empty(0, 4),
             "strided": torch.arange(24.0).reshape(4, 6).t()[1:, ::2]}
    for name, t in cases.items():
        tf.write_tensor(tmp_path / name, t)
        back = tf.read_tensor(tmp_path / name, max_bytes=1 << 20)
        assert back.shape == t.shape and back.dtype == t.dtype
        assert torch.equal(back.view(torch.int16) if name == "special" else back,
                           t.view(torch.int16) if name == "special" else t)


def test_the_host_copy_is_private():
    """Held outputs must keep what the call returned even if the submission overwrites its tensor later."""
    t = torch.ones(4)
    copy = tf.host_copy(t)
    t.fill_(7)
    assert torch.equal(copy, torch.ones(4))


def _forge(path, header, data=b"", magic=tf.MAGIC, header_len=None):
    raw = json.dumps(header).encode() if isinstance(header, dict) else header
    with open(path, "wb") as f:
        f.write(magic + struct.pack("<I", len(raw) if header_len is None else header_len) + raw + data)


@pytest.mark.parametrize("forged, words", [
    (dict(header={"dtype": "float32", "shape": [4]}, magic=b"PK\x03\x04\x00"), "bad magic"),
    (dict(header=b"{not json"), "not JSON"),
    (dict(header={"dtype": "object", "shape": [1]}), "not one of"),
    (dict(header={"dtype": "float32", "shape": [-1]}), "non-negative"),
    (dict(header={"dtype": "float32", "shape": [1.5]}), "non-negative"),
    (dict(header={"dtype": "float32", "shape": [1], "pickle": "x"}), "exactly"),
    (dict(header={"dtype": "float32", "shape": [1 << 40]}), "over the"),
    (dict(header={"dtype": "float32", "shape": [4]}, data=b"\0" * 12), "holds 12 bytes"),
    (dict(header={"dtype": "float32", "shape": [4]}, data=b"\0" * 20), "holds 20 bytes"),
    (dict(header={"dtype": "float32", "shape": [1]}, header_len=1 << 30), "at most"),
    (dict(header={"dtype": "float32", "shape": [1]}, header_len=200), "ends"),
])
def test_a_forged_file_is_rejected_with_the_reason(tmp_path, forged, words):
    _forge(tmp_path / "f", **forged)
    with pytest.raises(tf.TensorFileError, match=words):
        tf.read_tensor(tmp_path / "f", max_bytes=1 << 20)


def test_a_pickle_written_by_torch_save_is_not_read(tmp_path):
    torch.save(torch.ones(3), tmp_path / "old.pt")
    with pytest.raises(tf.TensorFileError, match="bad magic"):
        tf.read_tensor(tmp_path / "old.pt", max_bytes=1 << 20)


def test_links_and_fifos_are_not_followed_or_waited_on(tmp_path):
    tf.write_tensor(tmp_path / "real", torch.ones(2))
    os.symlink(tmp_path / "real", tmp_path / "link")
    with pytest.raises(OSError):
        tf.read_tensor(tmp_path / "link", max_bytes=1 << 20)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(tf.TensorFileError, match="regular"):
        tf.read_tensor(tmp_path / "fifo", max_bytes=1 << 20)


def test_an_existing_file_is_not_overwritten(tmp_path):
    (tmp_path / "a").write_text("there")
    with pytest.raises(FileExistsError):
        tf.write_tensor(tmp_path / "a", torch.ones(1))


def test_a_float8_output_reaches_the_checker_and_is_named_a_wrong_dtype(tmp_path):
    """A kernel returning float8 instead of float16: the file carries it, the checker says wrong_dtype."""
    import random

    from kernelgym_gap.core import inputs as inputs_mod
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.core.status import Status
    from kernelgym_gap.engine.trials import make_trials
    from kernelgym_gap.judge import checker
    from kernelgym_gap.judge.output_source import CheckFailure
    task = default_registry().get("GELU")
    trial = next(t for t in make_trials(task, "cpu", EvalConfig(seeds_per_shape=1), random.Random(0))
                 if t.dtype == "float16")
    ins = inputs_mod.make_trial_inputs(task, trial, "cpu")
    tf.write_tensor(tmp_path / "o", task.reference(*ins).to(torch.float8_e4m3fn))
    with pytest.raises(CheckFailure) as e:
        checker._judge(task, trial, tmp_path / "o", ins, "trial 0", "cpu")
    assert e.value.status is Status.WRONG_DTYPE and "float8_e4m3fn" in e.value.message


@pytest.mark.parametrize("size,chunk", [(1, 1), (1000, 64), (1024, 64), (1000, 4096), (7, 3)])
def test_a_write_through_a_staging_buffer_writes_the_same_bytes(tmp_path, size, chunk):
    """Placement.output_staging_bytes: a device tensor goes to its file a staging-buffer chunk at a time
    (tensor_file._write_staged). Here the source is a host tensor, so that every chunk boundary (a last partial
    chunk, a buffer larger than the data) is checked on the cpu; tests/test_tensor_file's gpu test runs the
    same with a cuda tensor and a pinned buffer."""
    data = torch.randint(0, 256, (size,), dtype=torch.uint8)
    staging = torch.full((chunk,), 0xAB, dtype=torch.uint8)
    fd = os.open(tmp_path / "staged", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        assert tf._write_staged(fd, data, staging) == size
    finally:
        os.close(fd)
    assert (tmp_path / "staged").read_bytes() == bytes(data.tolist())


def test_a_staging_buffer_that_is_not_a_flat_host_byte_buffer_is_refused(tmp_path):
    data = torch.zeros(8, dtype=torch.uint8)
    fd = os.open(tmp_path / "x", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        for bad in (torch.zeros(8), torch.zeros(0, dtype=torch.uint8), torch.zeros(2, 4, dtype=torch.uint8),
                    torch.zeros(16, dtype=torch.uint8)[::2]):
            with pytest.raises(ValueError, match="staging buffer"):
                tf._write_staged(fd, data, bad)
    finally:
        os.close(fd)


def test_a_host_tensor_is_written_directly_whatever_the_staging_buffer(tmp_path):
    """The buffer is for device tensors only: a cpu tensor's file is the plain one, and the buffer is untouched."""
    t = torch.randn(5, 7)
    staging = torch.zeros(16, dtype=torch.uint8)
    tf.write_tensor(tmp_path / "plain.tensor", t)
    tf.write_tensor(tmp_path / "staged.tensor", t, staging=staging)
    assert (tmp_path / "plain.tensor").read_bytes() == (tmp_path / "staged.tensor").read_bytes()
    assert int(staging.sum()) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "float32", "bfloat16"])
def test_gpu_a_device_tensor_written_through_a_pinned_buffer_is_the_same_file(tmp_path, dtype):
    """On cuda: a device tensor (strided, and larger than the pinned buffer: several chunks and a partial last
    one) written through a pinned staging buffer gives the file that the pageable path gives, byte for byte."""
    t = (torch.randn(1000, 1537, device="cuda") * 100).to(getattr(torch, dtype)).t()
    staging = torch.empty(1 << 20, dtype=torch.uint8, pin_memory=True)
    n = tf.write_tensor(tmp_path / "staged.tensor", t, staging=staging)
    tf.write_tensor(tmp_path / "plain.tensor", t)
    assert n == t.numel() * t.element_size() > staging.numel()
    assert (tmp_path / "plain.tensor").read_bytes() == (tmp_path / "staged.tensor").read_bytes()
    back = tf.read_tensor(tmp_path / "staged.tensor", max_bytes=n)
    assert torch.equal(back.view(torch.uint8), t.cpu().contiguous().view(torch.uint8))     # bit for bit


def test_a_read_into_a_given_buffer_gives_the_same_tensor_and_checks_the_buffer(tmp_path):
    """read_tensor(into=): the data read into a buffer the caller gives (pinned memory in a benchmark or a
    checker: resident pages, not zeroed first); a buffer of the wrong size, type or place is refused."""
    t = torch.randn(33, 17)
    n = tf.write_tensor(tmp_path / "a.tensor", t)
    given = []

    def into(nbytes):
        given.append(nbytes)
        return torch.full((nbytes,), 0x5A, dtype=torch.uint8)

    back = tf.read_tensor(tmp_path / "a.tensor", max_bytes=n, into=into)
    assert given == [n] and torch.equal(back, t)
    for bad in (lambda k: torch.zeros(k + 1, dtype=torch.uint8), lambda k: torch.zeros(k), lambda k: b"x" * k,
                lambda k: torch.zeros(2 * k, dtype=torch.uint8)[::2]):
        with pytest.raises(ValueError, match="`into`"):
            tf.read_tensor(tmp_path / "a.tensor", max_bytes=n, into=bad)
