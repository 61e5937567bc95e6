"""tinker-cookbook: its environments and datasets, RL types, metrics and data processing.

Provides ``ports.trajectory_groups``: ``TaskBatches`` and ``TaskGroup`` (``env.AGLDataset`` and
``env.AGLDummyEnvGroupBuilder``), ``GroupAssembler`` (``groups.CookbookGroups``, on the RL types of
``rl_types``); and ``ports.training_data.TrainingDataBuilder`` (``training.CookbookTrainingData``).
"""
