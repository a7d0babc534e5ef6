"""TRL: a real GRPOTrainer runs 2 optimisation steps on the CPU with a tiny model built from a config (no
downloads: a word-level tokenizer built in code), its completions scored by integrations.trl.reward_function
on the cpu backend. The tiny model's sampling is replaced by fixed completions (a correct reference solution
and a broken one) through a `generate` override; the trainer, its reward call and its logging are TRL's own."""
import math
import re

import pytest

trl = pytest.importorskip("trl")
transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
tokenizers = pytest.importorskip("tokenizers")
torch = pytest.importorskip("torch")

from kernelgym_gap.integrations.datasets import task_dataset, task_rows  # noqa: E402
from kernelgym_gap.integrations.scorer import completion_text  # noqa: E402
from kernelgym_gap.integrations.trl import KernelToolEnv, reward_function  # noqa: E402

PIECE = r"\w+|[^\w\s]|\s+"          # words, single punctuation, whitespace runs: decoding is exact
SPECIALS = ["<pad>", "<unk>", "<eos>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def _tokenizer(texts):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for text in texts:
        for piece in re.findall(PIECE, text):
            vocab.setdefault(piece, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(PIECE), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>",
                                   additional_special_tokens=SPECIALS[3:])
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def _scripted_model(tokenizer, completions):
    """A tiny Llama whose generate() answers the fixed completions in turn (then <eos>)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    class Scripted(LlamaForCausalLM):
        scripted: list = []

        def generate(self, input_ids=None, attention_mask=None, **kwargs):
            rows = []
            for i in range(input_ids.shape[0]):
                ids = tokenizer(self.scripted[i % len(self.scripted)], add_special_tokens=False)["input_ids"]
                rows.append(ids + [tokenizer.eos_token_id])
            width = max(len(r) for r in rows)
            rows = [r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows]
            return torch.cat([input_ids, torch.tensor(rows, dtype=input_ids.dtype)], dim=1)

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.eos_token_id)
    model = Scripted(config)
    model.scripted = list(completions)
    return model


def _solutions(registry):
    task = registry.get("AddReLU")
    good = task.solution_path(task.solutions[0]).read_text()
    bad = good.replace("tl.maximum(s, 0.0)", "s")          # no ReLU: a mismatch
    assert bad != good
    return f"Here is my kernel.\n```python\n{good}```\n", f"```python\n{bad}```\n"


def test_reward_function_contract_strings_chat_and_none(registry):
    """The callable TRL calls: strings or chat messages, a task column, None for a row without a task,
    and a whole call evaluated as one batch (identical completions once), on the warm path."""
    good, bad = _solutions(registry)
    f = reward_function(backend="cpu", workers=2, warm=True)     # a warm pool per worker, kept across calls
    chat = [[{"role": "assistant", "content": good}], [{"role": "assistant", "content": bad}]]
    rewards = f(prompts=["p"] * 4, completions=[good, bad] + chat, task=["AddReLU"] * 4)
    assert rewards == [1.0, 0.0, 1.0, 0.0]
    assert f.scorer.stats["evaluated"] == 2 and f.scorer.stats["batches"] == 1
    assert [r.status.value for r in f.last_records] == ["ok", "mismatch", "ok", "mismatch"]
    assert f(prompts=["p"], completions=[good], task=[None]) == [None]
    assert f.last_records == [None]
    assert f(prompts=["p", "p"], completions=[bad, good], task=[None, "AddReLU"]) == [None, 1.0]
    assert f.last_records[0] is None and f.last_records[1].status.value == "ok"   # lined up with the rewards
    failing = reward_function(backend="cpu", failure_reward=-1.0, scorer=f.scorer)
    assert failing(prompts=["p", "p"], completions=[good, "no code at all"], task="AddReLU") == [1.0, -1.0]
    with pytest.raises(ValueError, match="task"):
        f(prompts=["p"], completions=[good])
    f.scorer.close()


def test_grpo_trainer_two_steps_with_our_reward(registry, tmp_path):
    from trl import GRPOConfig, GRPOTrainer
    good, bad = _solutions(registry)
    train = task_dataset(tasks=["AddReLU"], dsls=["triton"], backend="cpu", system_prompt=None)
    assert train.num_rows == 1 and train[0]["task"] == "AddReLU"
    texts = [m["content"] for r in task_rows(tasks=["AddReLU"], dsls=["triton"], backend="cpu")
             for m in r["prompt"]] + [good, bad, CHAT_TEMPLATE]
    tokenizer = _tokenizer(texts)
    assert tokenizer.decode(tokenizer(good)["input_ids"]) == good          # the code survives the round trip
    model = _scripted_model(tokenizer, [good, bad])
    reward = reward_function(backend="cpu", workers=2)
    args = GRPOConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, num_generations=2,
                      gradient_accumulation_steps=1, max_completion_length=1024, learning_rate=1e-3,
                      logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, bf16=False,
                      seed=0, dataloader_num_workers=0, log_completions=False)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=train,
                          processing_class=tokenizer)
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 2
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters())), "no optimisation"

    # our per-completion rewards, as the trainer logged them against the completions it scored
    logged = list(zip(trainer._logs["completion"], trainer._logs["rewards"]["kernelgym_gap"]))
    assert len(logged) == 2
    for completion, r in logged:
        text = completion_text(completion)
        assert r == (1.0 if "tl.maximum(s, 0.0)" in text else 0.0), (r, text[:80], [(x.status.value, x.message[:300]) for x in reward.last_records])
    # the correct reference solution scores above the broken one, and the records say why
    status = {r.status.value for r in reward.last_records}
    assert status == {"ok", "mismatch"}
    # the step metrics: the mean of our rewards, our correct-fraction metric, and the total reward
    steps = [h for h in trainer.state.log_history if "rewards/kernelgym_gap/mean" in h]
    assert len(steps) == 2
    for h in steps:
        assert math.isclose(h["rewards/kernelgym_gap/mean"], 0.5)
        assert math.isclose(h["reward"], 0.5)
        assert math.isclose(h["kernelgym_gap/correct"], 0.5)
    # step 2 scored the same two completions: answered from the cache, not evaluated again
    assert reward.scorer.stats["evaluated"] == 2 and reward.scorer.stats["cache_hits"] == 2
    reward.scorer.close()


def test_environment_for_environment_factory(registry):
    """What TRL's environment_factory sees: reset(**row), one public tool method with a docstring TRL can
    turn into a schema, get_reward()."""
    import inspect
    good, bad = _solutions(registry)
    env = KernelToolEnv(backend="cpu", workers=1)
    public = sorted(n for n, _ in inspect.getmembers(type(env), predicate=inspect.isfunction) if not n.startswith("_"))
    assert public == ["get_reward", "reset", "submit_kernel"]
    from transformers.utils import get_json_schema
    schema = get_json_schema(env.submit_kernel)
    assert schema["function"]["name"] == "submit_kernel" and "source" in schema["function"]["parameters"]["properties"]
    obs = env.reset(task="AddReLU", dsl="triton")
    assert "AddReLU" in obs and "add_relu" in obs
    assert env.reset(task="AddReLU", prompt=[{"role": "user", "content": "x"}]) is None
    assert env.get_reward() == 0.0
    fb = env.submit_kernel(bad)
    assert "mismatch" in fb and env.get_reward() == 0.0
    fb = env.submit_kernel(good)
    assert "status: ok" in fb and env.get_reward() == 1.0
