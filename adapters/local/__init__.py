"""Embedded local PyTorch backend for the policy ports."""
