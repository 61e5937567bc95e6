"""Use cases and the faces of agl-tinker, and the composition root between them.

``app/usecases/`` holds the use cases, on ``domain`` and ``ports`` only: ``rollouts`` (one batch of
rollouts through a store), ``group_rollouts`` (GRPO groups of them), ``evaluation``, ``steps`` (what
both training loops share), ``training`` (the synchronous loop) and ``async_training`` (the
asynchronous one). ``app/faces/`` holds the faces that sit on top of them: ``compat`` and
``agl_tinker_compat`` (the original example's names), ``agl_algorithm`` (an ``agl.Trainer``
algorithm), ``cli`` with ``console``, ``preflight`` and ``report``. ``app/demo/`` holds the shipped
demo's agent and task. ``app.config`` is the run's frozen configuration and ``app.launch`` the one
composition root that binds the adapters to the ports.
"""
