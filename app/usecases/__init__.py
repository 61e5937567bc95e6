"""The use cases: what agl-tinker does, written against ``domain`` data and ``ports`` only.

Rolling out a batch through a rollout store (``rollouts``), grouping it for GRPO (``group_rollouts``),
evaluating a policy on a test set (``evaluation``), and training: the steps both loops share
(``steps``), the synchronous on-policy loop (``training``) and the asynchronous off-policy one
(``async_training``), which ``training.run_training`` hands an asynchronous run to. Nothing here
imports a library or an adapter; ``app.launch`` binds the ports.
"""
