"""A discrete-event simulator of the evaluation pipeline (issue 35): evaluations as stages on a GPU's lane
(core/lane.py's writer-preferring reader/writer lock), slots per GPU, host cores, GPUs per host, and the
reward server and the store as single servers with a service time. It replays the stage durations that
scripts/throughput.py records (results/h200_*/throughput*_records.jsonl), is calibrated against the measured
rates, and predicts design changes as parameter changes (sim/levers.py).

Trusted side, standard library only: it runs no submission and imports nothing from child/ or dsl/. The
numbers it prints for a change are predictions, never measurements (scripts/simulate_throughput.py)."""
