"""GRPO with TRL's GRPOTrainer against this environment's reward, offline, in minutes (docs/training.md).

    .venv/bin/python examples/grpo_trl.py                       # cpu: correctness; about 5-10 minutes on 2 cores
    .venv/bin/python examples/grpo_trl.py --backend cuda        # a GPU: E and U, slow -> fast variants

The policy is a tiny Llama built from a config (nothing is downloaded) whose vocabulary is the action tokens
of examples/kernel_actions.py: each completion is three tokens (a kernel variant, a BLOCK constant, a
num_warps constant), decoded into a real Triton LayerNorm module (a reference solution, fast or slow, or a
hostile submission from tests/fixtures/hostile) and scored by the documented adapter,
`kernelgym_gap.integrations.trl.reward_function`, through TRL's own trainer, sampling and logging.

What to expect: on cpu the reward is correctness (1 for a correct kernel, 0 for a wrong one, a hostile one or
an empty reply), and the mean reward rises as the policy drops hostile variants and BLOCK sizes narrower
than the rows. On cuda the reward adds E and U: the policy moves from the scalar-loop and single-program
variants to the rowwise one (E, U and the share of `efficient` verdicts rise). Hostile variants are never
rewarded on either backend (`hostile_rewarded` in the metrics stays 0). The identical kernels the policy
samples again and again are answered from the Scorer's cache: each distinct kernel is evaluated once, so
most of the wall time is the first steps' evaluations.

Writes results/examples/<run>/metrics.json (one row per step: mean reward, correct share, hostile share,
E, U, verdicts, the actions sampled) and curves.png (when matplotlib is installed; else it says so).
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_actions as ka  # noqa: E402

SPECIALS = ["<pad>", "<unk>", "<eos>"]
PROMPT = "LayerNorm"


def build_tokenizer(tokens):
    """A word-level tokenizer over the prompt word and the action tokens (built in code: no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {t: i for i, t in enumerate([*SPECIALS, PROMPT, *tokens])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>")
    fast.padding_side = "left"
    return fast


def build_model(tokenizer, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.eos_token_id)
    return LlamaForCausalLM(config)


class StepMetrics:
    """Wraps the documented reward function: decodes each completion into a kernel reply, scores the batch
    through `reward_function`, and keeps one metrics row per call (one call per optimisation step here)."""

    def __init__(self, reward, tokens):
        self.reward, self.tokens, self.rows = reward, tokens, []
        self.__name__ = reward.__name__            # what TRL logs the reward under

    def __call__(self, prompts=None, completions=None, **kwargs):
        from kernelgym_gap.integrations.scorer import completion_text
        t0 = time.monotonic()
        actions = [ka.parse_action(completion_text(c), self.tokens) for c in completions]
        replies = [ka.reply_for(a) for a in actions]
        rewards = self.reward(prompts=prompts, completions=replies, **kwargs)
        self.rows.append(self._row(actions, rewards, self.reward.last_records, time.monotonic() - t0))
        r = self.rows[-1]
        print(f"step {r['step']:3d}  mean reward {r['mean_reward']:.3f}  correct {r['correct_share']:.2f}  "
              f"hostile {r['hostile_share']:.2f}  evaluated {r['evaluated_total']}  ({r['reward_seconds']:.1f} s)",
              flush=True)
        return rewards

    def _row(self, actions, rewards, records, seconds):
        n = len(actions)
        hostile = [i for i, a in enumerate(actions) if ka.is_hostile(a["variant"])]
        correct = [r for r in records if r is not None and r.correct]
        es = [r.terms.get("E") for r in correct if isinstance((r.terms or {}).get("E"), (int, float))]
        us = [r.terms.get("U") for r in correct if isinstance((r.terms or {}).get("U"), (int, float))]
        verdicts = collections.Counter((r.diagnosis or {}).get("verdict") for r in correct
                                       if (r.diagnosis or {}).get("verdict"))
        by_action: dict = {}
        for a, rw, rec in zip(actions, rewards, records):
            e = by_action.setdefault(ka.action_name(a), {"count": 0, "rewards": [], "status": None})
            e["count"] += 1
            e["rewards"].append(rw)
            e["status"] = rec.status.value if rec is not None else None
        stats = self.reward.scorer.stats
        return {"step": len(self.rows) + 1, "completions": n,
                "mean_reward": sum(rewards) / n if n else None,
                "correct_share": len(correct) / n if n else None,
                "hostile_share": len(hostile) / n if n else None,
                "hostile_rewarded": sum(1 for i in hostile if rewards[i] > 0),
                "no_variant_share": sum(a["variant"] is None for a in actions) / n if n else None,
                "rowwise_share": sum(a["variant"] == "rowwise" for a in actions) / n if n else None,
                "mean_E": sum(es) / len(es) if es else None, "mean_U": sum(us) / len(us) if us else None,
                "efficient_share": verdicts.get("efficient", 0) / n if n and correct and verdicts else None,
                "verdicts": dict(verdicts), "statuses": dict(collections.Counter(
                    r.status.value for r in records if r is not None)),
                "actions": by_action, "reward_seconds": seconds,
                "evaluated_total": stats["evaluated"], "cache_hits_total": stats["cache_hits"]}


def plot(rows, path: Path, backend: str) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no curves.png: matplotlib is not installed (pip install -e '.[plots]')"
    steps = [r["step"] for r in rows]
    panels = [("mean reward", "mean_reward"), ("correct share", "correct_share"), ("hostile share", "hostile_share")]
    if backend == "cuda":
        panels += [("mean E (correct)", "mean_E"), ("mean U (correct)", "mean_U"), ("efficient share", "efficient_share")]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.0), squeeze=False)
    for ax, (title, key) in zip(axes[0], panels):
        ys = [r[key] if r[key] is not None else math.nan for r in rows]
        ax.plot(steps, ys, marker="o", markersize=3)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(f"GRPO on LayerNorm kernel actions ({backend} backend)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="cpu", choices=("cpu", "cuda", "auto"))
    p.add_argument("--steps", type=int, default=30, help="optimisation steps (default 30)")
    p.add_argument("--generations", type=int, default=8, help="completions per step, one group (default 8)")
    p.add_argument("--lr", type=float, default=0.02, help="learning rate (default 0.02)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", default=",".join(ka.VARIANTS),
                   help="comma-separated variant tokens the policy may use (default: all)")
    p.add_argument("--blocks", default=",".join(ka.BLOCKS))
    p.add_argument("--warps", default=",".join(ka.WARPS))
    p.add_argument("--workers", type=int, default=None, help="parallel evaluations (default: one per core)")
    p.add_argument("--out", default=None, help="results folder (default results/examples/grpo_trl-<backend>)")
    args = p.parse_args(argv)

    import datasets
    from trl import GRPOConfig, GRPOTrainer

    from kernelgym_gap.integrations.trl import reward_function

    tokens = []
    for given, space in ((args.variants, ka.VARIANTS), (args.blocks, ka.BLOCKS), (args.warps, ka.WARPS)):
        for t in (x.strip() for x in given.split(",") if x.strip()):
            if t not in space:
                p.error(f"unknown action token {t!r}; expected one of {', '.join(space)}")
            tokens.append(t)
    out = Path(args.out or ka.ROOT / "results" / "examples" / f"grpo_trl-{args.backend}")
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = build_tokenizer(tokens)
    model = build_model(tokenizer, args.seed)
    train = datasets.Dataset.from_list([{"prompt": PROMPT, "task": ka.TASK}] * args.steps)
    reward = StepMetrics(reward_function(backend=args.backend, workers=args.workers), tuple(tokens))
    scratch = tempfile.mkdtemp(prefix="kgg-grpo-")            # the trainer's output_dir: nothing is saved there
    config = GRPOConfig(output_dir=scratch, max_steps=args.steps, per_device_train_batch_size=args.generations,
                        num_generations=args.generations, gradient_accumulation_steps=1, max_completion_length=3,
                        learning_rate=args.lr, lr_scheduler_type="constant", logging_steps=1, report_to="none",
                        save_strategy="no", use_cpu=args.backend == "cpu", bf16=False, seed=args.seed,
                        dataloader_num_workers=0, log_completions=False, disable_tqdm=True, shuffle_dataset=False,
                        # the policy's vocabulary is the action tokens: it never samples <eos>, <pad>, <unk> or the
                        # prompt word, so every completion is three actions (some name no variant: an empty reply)
                        generation_kwargs={"bad_words_ids": [[tokenizer.convert_tokens_to_ids(t)]
                                                             for t in (*SPECIALS, PROMPT)]})
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=train,
                          processing_class=tokenizer)
    t0 = time.monotonic()
    try:
        trainer.train()
    finally:
        reward.reward.scorer.close()
        shutil.rmtree(scratch, ignore_errors=True)
    wall = time.monotonic() - t0
    rows = reward.rows
    summary = {"backend": reward.reward.scorer.backend, "task": ka.TASK, "steps": len(rows),
               "generations": args.generations, "lr": args.lr, "seed": args.seed, "tokens": tokens,
               "train_seconds": wall, "first_mean_reward": rows[0]["mean_reward"] if rows else None,
               "last_mean_reward": rows[-1]["mean_reward"] if rows else None,
               "hostile_rewarded": sum(r["hostile_rewarded"] for r in rows),
               "scorer": dict(reward.reward.scorer.stats), "steps_metrics": rows,
               "trainer_log": [h for h in trainer.state.log_history if "reward" in h]}
    (out / "metrics.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"wrote {out / 'metrics.json'}")
    print(plot(rows, out / "curves.png", summary["backend"]))
    print(f"{len(rows)} steps in {wall:.0f} s; mean reward {summary['first_mean_reward']:.3f} (step 1) -> "
          f"{summary['last_mean_reward']:.3f} (step {len(rows)}); hostile completions rewarded: "
          f"{summary['hostile_rewarded']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
