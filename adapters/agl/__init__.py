"""Agent-lightning: its rollout stores, the project's store server and the store's own process.

Provides ``ports.rollout_store.RolloutStore`` and ``ports.rollout_store.TripletSource`` (``store``:
``AglRolloutStore`` on any ``LightningStore``, in memory, over HTTP or MongoDB; ``AglTripletSource`` over an
Agent-lightning triplet adapter, ``client_triplets.PolicyCallsOnly`` for the tracer's LLM-call spans or
``adapters.endpoint.triplets``). The store servers this project starts are Agent-lightning's with what
``server`` adds: the shared secret (``auth``), a finished rollout in one request (``finish``), trained
rollouts forgotten (``forget``), a lean middleware (``middleware``); ``workers`` watches runners elsewhere
through their worker records, ``store_process`` serves the run's store from a process of its own.
"""
