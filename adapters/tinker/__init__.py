"""Tinker: the policy ports on the tinker SDK, and a Tinker-API server for one's own machines (``server``).

Provides ``ports.policy.Trainer``, ``ports.policy.Sampler`` and ``ports.policy.LogprobScorer``
(``backend``), with a watch that the server still takes connections (``liveness``) and identical sample
requests sent as one call (``coalescing``). Every import of the SDK is absolute (``import tinker``), so this
package, ``adapters.tinker``, never shadows it.
"""
