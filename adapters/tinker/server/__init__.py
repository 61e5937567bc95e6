"""A Tinker-API server on one's own machines: SkyRL's, in its own environment, behind a compatibility proxy.

Provides no port: the Tinker backend (``adapters.tinker.backend``) trains against it as against the hosted service.
"""
