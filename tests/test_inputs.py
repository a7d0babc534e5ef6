"""core/inputs.py: the digest's device sums, computed in bounded stretches (their values must not move: the
child's and the checker's digests are compared, and records of earlier versions carry them)."""
import pytest
import torch

from kernelgym_gap.core.inputs import word_sums


def _whole(words32: torch.Tensor) -> torch.Tensor:
    """The sums as digest computed them before the stretches, in one pass."""
    words = words32.to(torch.int64)
    idx = torch.arange(words.numel(), dtype=torch.int64)
    return torch.stack([words.sum(), (words * (idx * 2654435761 % 2147483647 + 1)).sum(),
                        (words * words).sum(), (words * (idx % 65521 + 7)).sum()])


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000, 1 << 24])
def test_the_sums_in_stretches_equal_the_sums_in_one_pass(chunk):
    g = torch.Generator().manual_seed(3)
    words = torch.randint(-2**31, 2**31 - 1, (1000,), generator=g, dtype=torch.int64).to(torch.int32)
    assert torch.equal(word_sums(words, chunk), _whole(words))


def test_the_sums_wrap_alike_in_any_order():
    # words * words summed over enough extreme words passes 2**63: both wrap, to the same value
    words = torch.full((5000,), -2**31, dtype=torch.int32)
    assert torch.equal(word_sums(words, 333), _whole(words))
    assert int(_whole(words)[2]) != 5000 * 2**62          # it did wrap


def test_a_changed_word_changes_the_sums_and_a_bad_chunk_is_refused():
    words = torch.arange(100, dtype=torch.int32)
    changed = words.clone()
    changed[57] += 1
    assert not torch.equal(word_sums(words, 10), word_sums(changed, 10))
    assert torch.equal(word_sums(torch.zeros(0, dtype=torch.int32)), torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError):
        word_sums(words, 0)


@pytest.mark.gpu
def test_gpu_the_device_sums_in_stretches_equal_one_pass_and_the_digest_holds():
    """On the device, where digest uses them: any stretch gives the one-pass sums (the child's and the
    checker's digests, and records of earlier versions, agree), and a changed byte changes the digest."""
    from kernelgym_gap.core.inputs import digest
    g = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn((3, 1 << 20), generator=g, device="cuda", dtype=torch.float16)
    words = x.reshape(-1).view(torch.int32)
    whole = _whole(words.cpu())
    for chunk in (1 << 10, 12345, 1 << 24):
        assert torch.equal(word_sums(words, chunk).cpu(), whole)
    before = digest((x,))
    x[1, 7] += 1
    assert digest((x,)) != before
