"""What runs on the GPU in any process, trusted or not: the timing bench (bench.py) and the device's identity
(identity.py). A leaf: it imports core/ alone, and both the child (child/, dsl/) and the trusted side
(judge/) import it, so that neither imports the other (docs/architecture.md, "Layers")."""
