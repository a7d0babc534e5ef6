"""Adapters for the RL trainers people use (docs/training.md).

  trl.py            `reward_function(...)` for `trl.GRPOTrainer(reward_funcs=...)`, `KernelToolEnv` for
                    `environment_factory=`
  verl.py           `compute_score` / `compute_score_batch` for verl's `custom_reward_function`
  verifiers.py      `load_environment(...)`: a verifiers (v0 API) single-turn or multi-turn environment
  datasets.py       every task's prompt per DSL as a Hugging Face `datasets.Dataset` (TRL, verifiers, verl rows)
  reward_server.py  `kernelgym-gap serve-reward`: the CLI of the batch scoring endpoint for trainers on other
                    machines (imports the web stack only when serving); the server itself is reward_app.py
                    (admission, answers) on kernelgym_gap/serving/, reward_items.py (one bad item is that
                    item's failure), reward_slots.py (slot processes, round robin across clients, cancelled
                    when a client goes), reward_requests.py (request ids kept in SQLite: a retry after a
                    restart is answered, never evaluated twice at once)
  reward_client.py  `RewardClient` (retries with the same request id), verl's `compute_score`, OpenRLHF's
                    `reward_func`
  terms.py          what a trainer logs of one evaluation, and the failure of an item that was not evaluated
  scorer.py         what they share: `Scorer` (the batch path with a result cache in front; concurrent single
                    calls are coalesced into one `evaluate_many` batch), the reply text of a completion, and a
                    record's terms as a flat dict

Each module imports its trainer lazily or not at all: `kernelgym_gap.integrations.trl.reward_function` works
without TRL installed (it only returns a callable of TRL's shape).
"""
