"""Embedded local PyTorch backend for the policy ports (``Trainer``, ``Sampler``)."""

from adapters.local.backend import LocalTrainer
from adapters.local.sampler import LocalSampler
from adapters.local.tiny_model import build_tiny_model, cached_tiny_model

__all__ = ["LocalSampler", "LocalTrainer", "build_tiny_model", "cached_tiny_model"]
