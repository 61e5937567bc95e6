"""Use cases and the faces of agl-tinker.

Use cases run on ``domain`` and ``ports`` only: ``app.rollouts`` (one batch of rollouts through a
store), ``app.group_rollouts`` (GRPO groups of them), ``app.evaluation`` and ``app.training``.
Faces sit on top of them: ``app.compat`` (the original example's names), ``app.cli`` with
``app.console``; ``app.launch`` is the one composition root that binds the adapters to the ports.
"""
