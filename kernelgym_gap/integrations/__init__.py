"""Adapters for the RL trainers people use (docs/training.md).

  trl.py            `reward_function(...)` for `trl.GRPOTrainer(reward_funcs=...)`, `KernelToolEnv` for
                    `environment_factory=`
  verl.py           `compute_score` / `compute_score_batch` for verl's `custom_reward_function`
  verifiers.py      `load_environment(...)`: a verifiers (v0 API) single-turn or multi-turn environment
  datasets.py       every task's prompt per DSL as a Hugging Face `datasets.Dataset` (TRL, verifiers, verl rows)
  reward_server.py  `kernelgym-gap serve-reward`: a batch scoring endpoint for trainers on other machines, and
                    `RewardClient`
  scorer.py         what they share: `Scorer` (the batch path with a result cache in front; concurrent single
                    calls are coalesced into one `evaluate_many` batch), the reply text of a completion, and a
                    record's terms as a flat dict

Each module imports its trainer lazily or not at all: `kernelgym_gap.integrations.trl.reward_function` works
without TRL installed (it only returns a callable of TRL's shape).
"""
