"""Use cases and the public facade of agl-tinker.

``app.rollouts`` and ``app.groups`` run over the ports only; ``app.compat`` is the seed-compatible
facade and, with ``app.bootstrap``, the composition root that binds the real adapters.
"""
