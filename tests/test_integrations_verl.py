"""verl: verl's own reward loading (`get_custom_reward_fn`, from `custom_reward_function.path` / `.name`) loads
integrations/verl.py by path and scores completions on the cpu backend; verl's reward managers (the reward
loop's NaiveRewardManager, one call per sample, and the batch manager) run it over a DataProto. Without verl
installed, the contract test at the end still checks the interface verl documents."""
import asyncio
import inspect
import re

import pytest

import kernelgym_gap.integrations.verl as kg_verl
from kernelgym_gap.integrations.scorer import shared_scorer

KEYS = {"score", "reward", "acc", "correct", "correctness", "performance", "E", "U", "status", "reward_mode",
        "reason"}


def _replies(registry):
    task = registry.get("GELU")
    good = task.solution_path(next(s for s in task.solutions if s.dsl == "triton" and s.defect is None)).read_text()
    return f"I will fuse it.\n```python\n{good}```", "```python\ndef gelu(x):\n    return x\n```"


def test_contract_without_verl(registry):
    """The signature verl documents for a custom reward function, and what it returns (no evaluation)."""
    params = list(inspect.signature(kg_verl.compute_score).parameters)
    assert params[:4] == ["data_source", "solution_str", "ground_truth", "extra_info"]
    assert list(inspect.signature(kg_verl.compute_score_batch).parameters)[:4] == [
        "data_sources", "solution_strs", "ground_truths", "extra_infos"]
    assert inspect.iscoroutinefunction(kg_verl.compute_score_async)
    # the task comes from extra_info["task"], else from data_source; the backend from extra_info
    assert kg_verl._request("kernelgym_gap/GELU-v0", "x", {"task": "Softmax", "backend": "cpu"}, None, None)[:3] == \
        ("Softmax", "cpu", "triton")
    assert kg_verl._request("GELU", "x", None, "cuda", "tilelang")[:3] == ("GELU", "cuda", "tilelang")
    assert kg_verl._request(None, "x", {}, None, None)[0] is None      # scored as that sample's failure


def test_verl_loads_compute_score_by_path_and_scores(registry):
    verl_reward = pytest.importorskip("verl.trainer.ppo.reward")
    from omegaconf import OmegaConf
    good, bad = _replies(registry)
    config = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": kg_verl.__file__, "name": "compute_score", "reward_kwargs": {"backend": "cpu", "workers": 2}}}})
    fn = verl_reward.get_custom_reward_fn(config)
    out = fn(data_source="kernelgym_gap/GELU-v0", solution_str=good, ground_truth="GELU",
             extra_info={"task": "GELU", "backend": "cpu"})
    assert set(out) == KEYS and out["score"] == 1.0 and out["status"] == "ok" and out["acc"] == 1.0
    worse = fn(data_source="GELU", solution_str=bad, ground_truth=None, extra_info=None)
    assert worse["score"] == 0.0 < out["score"] and worse["status"] != "ok"


def _tokenizer(texts):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    piece = r"\w+|[^\w\s]|\s+"
    vocab = {"<pad>": 0, "<unk>": 1, "<eos>": 2}
    for text in texts:
        for p in re.findall(piece, text):
            vocab.setdefault(p, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(piece), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>")


def _data(tokenizer, prompts, replies, extra_infos):
    """A DataProto as verl's rollout hands it to a reward manager (prompts left-padded, responses right)."""
    import numpy as np
    import torch
    from verl import DataProto
    enc = lambda t: tokenizer(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    p_ids, r_ids = [enc(p) for p in prompts], [enc(r) for r in replies]
    P, R = max(map(len, p_ids)), max(map(len, r_ids))
    prompts_t = torch.tensor([[0] * (P - len(x)) + x for x in p_ids])
    responses_t = torch.tensor([x + [0] * (R - len(x)) for x in r_ids])
    mask = torch.tensor([[0] * (P - len(a)) + [1] * len(a) + [1] * len(b) + [0] * (R - len(b))
                         for a, b in zip(p_ids, r_ids)])
    n = len(replies)
    return DataProto.from_dict(
        tensors={"prompts": prompts_t, "responses": responses_t, "attention_mask": mask,
                 "input_ids": torch.cat([prompts_t, responses_t], dim=1)},
        non_tensors={"data_source": np.array(["kernelgym_gap"] * n, dtype=object),
                     "reward_model": np.array([{"ground_truth": "GELU", "style": "rule"}] * n, dtype=object),
                     "extra_info": np.array(extra_infos, dtype=object)})


def test_verl_reward_managers_score_a_batch(registry):
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.workers.reward_manager.batch import BatchRewardManager
    good, bad = _replies(registry)
    prompts = ["Write GELU.", "Write GELU in Triton."]
    tok = _tokenizer(prompts + [good, bad])
    infos = [{"task": "GELU", "backend": "cpu"}, {"task": "GELU", "backend": "cpu"}]
    kwargs = {"backend": "cpu", "workers": 2}

    # the reward loop's manager: one compute_score call per sample, run concurrently in executor threads
    config = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": kg_verl.__file__, "name": "compute_score", "reward_kwargs": kwargs}}})
    manager = NaiveRewardManager(config, tok, get_custom_reward_fn(config))
    data = _data(tok, prompts, [good, bad], infos)
    scorer = shared_scorer("cpu", workers=2)
    batches = scorer.stats["batches"]

    async def both():
        return await asyncio.gather(*(manager.run_single(data[i:i + 1]) for i in range(2)))
    outs = manager.loop.run_until_complete(both())
    assert [o["reward_score"] for o in outs] == [1.0, 0.0]
    assert outs[0]["reward_extra_info"]["status"] == "ok" and set(outs[1]["reward_extra_info"]) >= KEYS
    assert scorer.stats["batches"] - batches <= 1      # coalesced (or answered from the cache)

    # the batch manager with compute_score_batch: rewards at each response's last token
    config_b = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": kg_verl.__file__, "name": "compute_score_batch", "reward_kwargs": kwargs}}})
    batch_manager = BatchRewardManager(tok, num_examine=0, compute_score=get_custom_reward_fn(config_b))
    result = batch_manager(_data(tok, prompts, [good, bad], [dict(i) for i in infos]), return_dict=True)
    totals = result["reward_tensor"].sum(dim=1).tolist()
    assert totals == [1.0, 0.0]
    assert result["reward_extra_info"]["status"] == ["ok", result["reward_extra_info"]["status"][1]]
    assert result["reward_extra_info"]["status"][1] != "ok"


def test_verl_batch_manager_scores_an_unknown_task_as_that_samples_failure(registry):
    """verl's own BatchRewardManager over a batch where one sample names a task that does not exist: that
    sample scores 0 with status invalid_item and the reason, the other is evaluated (issue 37: before, the
    UnknownTaskError went up through the manager into the trainer)."""
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.workers.reward_manager.batch import BatchRewardManager
    good, _ = _replies(registry)
    prompts = ["Write GELU.", "Write it."]
    tok = _tokenizer(prompts + [good])
    config = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": kg_verl.__file__, "name": "compute_score_batch", "reward_kwargs": {"backend": "cpu", "workers": 2}}}})
    manager = BatchRewardManager(tok, num_examine=0, compute_score=get_custom_reward_fn(config))
    infos = [{"task": "NoSuchTask", "backend": "cpu"}, {"task": "GELU", "backend": "cpu"}]
    result = manager(_data(tok, prompts, [good, good], infos), return_dict=True)
    assert result["reward_tensor"].sum(dim=1).tolist() == [0.0, 1.0]
    info = result["reward_extra_info"]
    assert info["status"] == ["invalid_item", "ok"]
    assert "NoSuchTask" in info["reason"][0] and info["reason"][1] == ""
