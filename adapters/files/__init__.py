"""The run's log directory on disk (``log_path``): checkpoint records, metrics, rollouts and transcripts.

Provides ``ports.run_log``: ``CheckpointLog``, ``MetricsLog`` and ``RolloutLog`` in tinker-cookbook's
formats (``run_log``), ``TranscriptLog`` as HTML pages on the cookbook's logtree (``transcripts``).
``cache`` names the per-machine cache that agent environments, SkyRL and built tiny models share.
"""
