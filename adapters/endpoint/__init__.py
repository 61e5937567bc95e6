"""The OpenAI-compatible policy endpoint agents call: chat completions and responses over the current policy.

Provides ``ports.policy_endpoint.PolicyServer`` (``policy_endpoint.PolicyEndpoint``: the lean Starlette
server of ``server`` or Agent-lightning's LiteLLM proxy, both on ``provider``), and the triplets of what it
recorded (``capture``) as an Agent-lightning triplet adapter, ``triplets.EndpointTraceToTriplet``, which
``adapters.agl.store.AglTripletSource`` turns into ``ports.rollout_store.TripletSource``.
"""
