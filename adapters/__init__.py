"""How each outside system (Agent-lightning, Tinker, tinker-cookbook, PyTorch) provides the ports."""
