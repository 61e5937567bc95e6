"""Tinker's built-in losses, token-wise and *summed* (not averaged) as Tinker defines them.

From the Tinker docs ("Loss Functions"), with ``ratio = exp(target_logprobs - sampling_logprobs)``:

- ``cross_entropy``: ``-(weights * target_logprobs).sum()``
- ``importance_sampling``: ``-(ratio * advantages).sum()``
- ``ppo``: ``-min(ratio * A, clip(ratio, 0.8, 1.2) * A).sum()`` (epsilon low = high = 0.2)
- ``cispo``: ``-(sg(clip(ratio, 0.0, 4.0)) * target_logprobs * A).sum()`` (Tinker's default thresholds: the
  clipped ratio only weights each token's gradient, so no token's gradient is zeroed as PPO's clip does)

The sums run over every token of every datum in the ``forward_backward`` call; normalisation is
the caller's job (the cookbook folds it into advantages and weights). Tinker's datums carry no
mask (the cookbook strips it), so for the RL losses a given ``mask`` only multiplies the
per-token terms -- where the cookbook builds it, advantages are already 0 off the mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ports.policy import LossName, TrainingDatum

PPO_CLIP_LOW = 0.8
PPO_CLIP_HIGH = 1.2
CISPO_CLIP_LOW = 0.0
CISPO_CLIP_HIGH = 4.0


@dataclass(frozen=True, slots=True)
class LossInputs:
    """Right-padded [D, T] tensors built from the datums; ``valid`` marks real positions."""

    targets: torch.Tensor
    valid: torch.Tensor
    weights: torch.Tensor
    sampling_logprobs: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor


def _padded(
    rows: list[tuple[float, ...]] | list[tuple[int, ...]], width: int, dtype: torch.dtype, fill: float
) -> torch.Tensor:
    out = torch.full((len(rows), width), fill, dtype=dtype)
    for i, row in enumerate(rows):
        if row:
            out[i, : len(row)] = torch.tensor(row, dtype=dtype)
    return out


def build_inputs(data: list[TrainingDatum], loss: LossName, dtype: torch.dtype) -> LossInputs:
    """Check each datum has what ``loss`` needs and pad everything to one [D, T] shape."""
    width = max(len(d.model_input) for d in data)
    for d in data:
        n = len(d.model_input)
        needed: dict[str, tuple[float, ...] | tuple[int, ...]] = {"target_tokens": d.target_tokens}
        if loss is LossName.CROSS_ENTROPY:
            needed["weights"] = d.weights
        else:
            needed |= {"logprobs": d.logprobs, "advantages": d.advantages}
        if d.mask:
            needed["mask"] = d.mask
        for key, values in needed.items():
            if len(values) != n:
                raise ValueError(f"{loss}: datum {key} has length {len(values)}, model_input has {n}")
    lengths = [len(d.model_input) for d in data]
    valid = torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    return LossInputs(
        targets=_padded([d.target_tokens for d in data], width, torch.long, 0),
        valid=valid,
        weights=_padded([d.weights for d in data], width, dtype, 0.0),
        sampling_logprobs=_padded([d.logprobs for d in data], width, dtype, 0.0),
        advantages=_padded([d.advantages for d in data], width, dtype, 0.0),
        mask=_padded([d.mask if d.mask else (1.0,) * len(d.model_input) for d in data], width, dtype, 0.0),
    )


def token_losses(loss: LossName, target_logprobs: torch.Tensor, inputs: LossInputs) -> torch.Tensor:
    """Per-token loss terms [D, T] (zero on padding); their sum is Tinker's loss."""
    valid = inputs.valid.to(target_logprobs.dtype)
    if loss is LossName.CROSS_ENTROPY:
        return -(inputs.weights * target_logprobs) * valid
    # Padding positions hold logprob 0 on both sides, so their ratio is a finite 1 (times 0).
    ratio = torch.exp(target_logprobs - inputs.sampling_logprobs)
    advantages = inputs.advantages
    if loss is LossName.IMPORTANCE_SAMPLING:
        objective = ratio * advantages
    elif loss is LossName.PPO:
        clipped = torch.clamp(ratio, PPO_CLIP_LOW, PPO_CLIP_HIGH)
        objective = torch.minimum(ratio * advantages, clipped * advantages)
    elif loss is LossName.CISPO:
        weight = torch.clamp(ratio, CISPO_CLIP_LOW, CISPO_CLIP_HIGH).detach()
        objective = weight * target_logprobs * advantages
    else:
        raise ValueError(f"unsupported loss {loss!r}")
    return -objective * inputs.mask * valid
