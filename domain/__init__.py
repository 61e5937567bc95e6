"""Pure core of agl-tinker: what is true of traces, trajectories and groups without any I/O.

Nothing here imports agentlightning, tinker, tinker_cookbook, torch, litellm or does I/O; the
import-contract test in ``tests/unit/test_architecture.py`` keeps it that way.
"""
