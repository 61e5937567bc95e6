"""The shipped demo: a number-word task (``task``) and the agent that answers it (``agent``).

The agent is written as users write theirs (an ``@agl.rollout`` function over the ``openai``
client); ``tasks=demo`` and the default ``agent`` of ``app.config.TrainConfig`` select them.
"""
