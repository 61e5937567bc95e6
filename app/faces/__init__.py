"""The faces: how people and programs drive the use cases.

The command line (``cli``, with ``console`` for its terminal side, ``preflight`` for the checks it
makes before anything heavy is imported, and ``report`` for a run's curves), the original example's
names (``compat``, ``agl_tinker_compat``) and the ``agl.Trainer`` algorithm (``agl_algorithm``).
Faces may touch libraries and adapters; they get a run's parts from ``app.launch``.
"""
