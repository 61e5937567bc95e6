"""The embedded PyTorch backend against the policy ports, on a tiny real Qwen3 model built offline."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import pytest
import torch

from adapters.local import LocalSampler, LocalTrainer, build_tiny_model
from adapters.local.sampling import make_row
from ports.policy import (
    AdamParams,
    LossName,
    SampledSequence,
    Sampler,
    SamplingParams,
    StopReason,
    Trainer,
    TrainingDatum,
)


@pytest.fixture
def trainer(tiny_model: Path, tmp_path: Path) -> LocalTrainer:
    return LocalTrainer(tiny_model, checkpoint_dir=tmp_path / "ckpt")


def chat_prompt(trainer: LocalTrainer, text: str) -> list[int]:
    rendered = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    return list(trainer.tokenizer.encode(rendered, add_special_tokens=False))


def rl_datum(prompt: Sequence[int], seq: SampledSequence, advantage: float) -> TrainingDatum:
    """The cookbook's datum for one sampled completion: shifted tokens, actions masked in."""
    full = [*prompt, *seq.tokens]
    n_obs = len(prompt) - 1
    n_act = len(seq.tokens)
    return TrainingDatum(
        model_input=tuple(full[:-1]),
        target_tokens=tuple(full[1:]),
        logprobs=(0.0,) * n_obs + seq.logprobs,
        advantages=(0.0,) * n_obs + (advantage,) * n_act,
        mask=(0.0,) * n_obs + (1.0,) * n_act,
    )


async def action_logprob(trainer: LocalTrainer, datum: TrainingDatum) -> float:
    out = await trainer.forward([datum], LossName.IMPORTANCE_SAMPLING)
    return sum(lp for lp, m in zip(out.logprobs_D[0], datum.mask, strict=True) if m)


def test_tiny_model_loads_through_the_cookbook_and_renders_qwen3_chats(tiny_model: Path, tmp_path: Path) -> None:
    from tinker_cookbook.renderers import get_renderer
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    tokenizer = get_tokenizer(str(tiny_model))
    renderer = get_renderer("qwen3_instruct", tokenizer)
    prompt = renderer.build_generation_prompt([{"role": "user", "content": "I'm 12. Say twenty."}])
    text = cast(str, tokenizer.decode(prompt.to_ints()))
    assert text.startswith("<|im_start|>user\nI'm 12. Say twenty.<|im_end|>")
    assert text.endswith("<|im_start|>assistant\n")
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert renderer.get_stop_sequences() == [im_end]
    reply = [*tokenizer.encode("The answer is 305 twenty", add_special_tokens=False), im_end]
    message, _ = renderer.parse_response(reply)
    assert message["content"] == "The answer is 305 twenty"
    digits = tokenizer.encode("305", add_special_tokens=False)
    assert [tokenizer.decode([t]) for t in digits] == ["3", "0", "5"]
    assert 500 <= len(tokenizer) <= 1000

    again = build_tiny_model(tmp_path / "again", seed=0)
    other = build_tiny_model(tmp_path / "other", seed=1)
    weights = (tiny_model / "model.safetensors").read_bytes()
    assert (again / "model.safetensors").read_bytes() == weights
    assert (other / "model.safetensors").read_bytes() != weights
    assert (again / "tokenizer.json").read_text() == (tiny_model / "tokenizer.json").read_text()


def test_the_local_backend_satisfies_the_ports(trainer: LocalTrainer) -> None:
    as_trainer: Trainer = trainer
    as_sampler: Sampler = LocalSampler.from_pretrained(trainer.tokenizer_path)
    assert isinstance(as_trainer, LocalTrainer)
    assert isinstance(as_sampler, LocalSampler)


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.float64, 1e-10)])
async def test_sampled_logprobs_match_the_training_forward(
    tiny_model: Path, dtype: torch.dtype, tolerance: float
) -> None:
    trainer = LocalTrainer(tiny_model, dtype=dtype)
    sampler = await trainer.sampler("s0")
    prompts = [chat_prompt(trainer, "hi"), chat_prompt(trainer, "I'm 7. Count from one to ten, please.")]
    params = SamplingParams(max_tokens=24, seed=3)
    results = await asyncio.gather(*(sampler.sample(p, params) for p in prompts))
    for prompt, (seq,) in zip(prompts, results, strict=True):
        datum = rl_datum(prompt, seq, 1.0)
        out = await trainer.forward_backward([datum], LossName.IMPORTANCE_SAMPLING)
        train_lps = out.logprobs_D[0][len(prompt) - 1 :]
        assert len(train_lps) == len(seq.logprobs) == 24
        assert max(abs(a - b) for a, b in zip(train_lps, seq.logprobs, strict=True)) < tolerance


async def test_stop_tokens_stop_strings_and_max_tokens(trainer: LocalTrainer) -> None:
    sampler = await trainer.sampler("s0")
    prompt = chat_prompt(trainer, "Count, please.")
    greedy = SamplingParams(max_tokens=16, temperature=0.0, stop_token_ids=(-1,))
    (base,) = await sampler.sample(prompt, greedy)
    assert base.stop_reason is StopReason.LENGTH
    assert len(base.tokens) == 16

    stop_at = base.tokens.index(base.tokens[5])
    (stopped,) = await sampler.sample(
        prompt, SamplingParams(max_tokens=16, temperature=0.0, stop_token_ids=(base.tokens[5],))
    )
    assert stopped.stop_reason is StopReason.STOP
    assert stopped.tokens == base.tokens[: stop_at + 1]
    assert stopped.logprobs == pytest.approx(base.logprobs[: stop_at + 1], abs=1e-6)

    def decode(tokens: Sequence[int]) -> str:
        return cast(str, trainer.tokenizer.decode(list(tokens)))

    stop_string = decode(list(base.tokens[6:8]))
    end = next(j for j in range(16) if stop_string in decode(list(base.tokens[: j + 1])))
    string_params = SamplingParams(max_tokens=16, temperature=0.0, stop_strings=(stop_string,))
    (by_string,) = await sampler.sample(prompt, string_params)
    assert by_string.stop_reason is StopReason.STOP
    assert by_string.tokens == base.tokens[: end + 1]
    assert stop_string in decode(list(by_string.tokens))

    (short,) = await sampler.sample(prompt, SamplingParams(max_tokens=3, temperature=0.0, stop_token_ids=(-1,)))
    assert (short.tokens, short.stop_reason) == (base.tokens[:3], StopReason.LENGTH)

    (top1,) = await sampler.sample(prompt, SamplingParams(max_tokens=16, top_k=1, seed=9, stop_token_ids=(-1,)))
    (nucleus,) = await sampler.sample(prompt, SamplingParams(max_tokens=16, top_p=1e-6, seed=9, stop_token_ids=(-1,)))
    assert top1.tokens == nucleus.tokens == base.tokens

    eos = trainer.tokenizer.eos_token_id
    assert make_row(SamplingParams(max_tokens=1), 0, eos).stop_token_ids == {eos}
    assert make_row(SamplingParams(max_tokens=1, stop_strings=("x",)), 0, eos).stop_token_ids == set()


async def test_seeds_make_sampling_reproducible_and_distinct(trainer: LocalTrainer) -> None:
    sampler = await trainer.sampler("s0")
    prompt = chat_prompt(trainer, "hello")
    params = SamplingParams(max_tokens=12, seed=5, stop_token_ids=(-1,))
    four = await sampler.sample(prompt, params, num_samples=4)
    again = await sampler.sample(prompt, params, num_samples=4)
    assert [s.tokens for s in four] == [s.tokens for s in again]
    assert len({s.tokens for s in four}) == 4
    (other_seed,) = await sampler.sample(prompt, SamplingParams(max_tokens=12, seed=6, stop_token_ids=(-1,)))
    assert other_seed.tokens == four[1].tokens  # sample i of seed s draws with seed s + i


async def test_concurrent_requests_share_one_forward_pass_per_step(trainer: LocalTrainer) -> None:
    sampler = await trainer.sampler("s0")
    prompts = [chat_prompt(trainer, "I'm " + "ten " * (i % 5) + str(i)) for i in range(16)]
    params = [SamplingParams(max_tokens=8 + i, seed=i, stop_token_ids=(-1,)) for i in range(16)]

    before = sampler.forward_passes
    sequential = [(await sampler.sample(p, sp))[0] for p, sp in zip(prompts, params, strict=True)]
    sequential_passes = sampler.forward_passes - before

    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    beat = asyncio.create_task(heartbeat())
    before = sampler.forward_passes
    results = await asyncio.gather(*(sampler.sample(p, sp) for p, sp in zip(prompts, params, strict=True)))
    concurrent_passes = sampler.forward_passes - before
    beat.cancel()

    assert sequential_passes == sum(len(s.tokens) for s in sequential)
    assert concurrent_passes == max(len(s.tokens) for s in sequential) == 23
    assert ticks > concurrent_passes  # the event loop ran while torch worked on its thread
    for (got,), want in zip(results, sequential, strict=True):
        assert got.tokens == want.tokens
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-5)


async def test_a_prompt_sent_by_several_requests_at_once_is_prefilled_once(trainer: LocalTrainer) -> None:
    """A group's rollouts send the same prompt together: one prefill, then each row samples as if alone."""
    sampler = await trainer.sampler("s0")
    prompt, other = chat_prompt(trainer, "seven"), chat_prompt(trainer, "three")
    params = [SamplingParams(max_tokens=10, seed=i, stop_token_ids=(-1,)) for i in range(8)]
    alone = [(await sampler.sample(prompt, p))[0] for p in params]

    before = sampler.prefilled_tokens
    together = await asyncio.gather(*(sampler.sample(prompt, p) for p in params), sampler.sample(other, params[0]))

    assert sampler.prefilled_tokens - before == len(prompt) + len(other)
    for (got,), want in zip(together, alone, strict=False):
        assert got.tokens == want.tokens
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-5)


async def test_a_request_joining_a_running_batch_gets_the_same_result(trainer: LocalTrainer) -> None:
    sampler = await trainer.sampler("s0")
    long_prompt = chat_prompt(trainer, "Count from one to twenty, then say goodbye.")
    short_prompt = chat_prompt(trainer, "hi")
    long_params = SamplingParams(max_tokens=30, seed=1, stop_token_ids=(-1,))
    short_params = SamplingParams(max_tokens=6, seed=2, stop_token_ids=(-1,))
    (want_long,) = await sampler.sample(long_prompt, long_params)
    (want_short,) = await sampler.sample(short_prompt, short_params)

    start = sampler.forward_passes
    first = asyncio.create_task(sampler.sample(long_prompt, long_params))
    while sampler.forward_passes < start + 5:
        await asyncio.sleep(0.001)
    (got_short,) = await sampler.sample(short_prompt, short_params)
    (got_long,) = await first

    assert got_long.tokens == want_long.tokens
    assert sampler.forward_passes - start < 30 + 6  # the short request rode along in the long one's steps
    assert got_short.tokens == want_short.tokens
    assert got_short.logprobs == pytest.approx(want_short.logprobs, abs=1e-5)
    assert got_long.logprobs == pytest.approx(want_long.logprobs, abs=1e-5)


async def test_importance_sampling_moves_logprobs_with_the_advantage_sign(tiny_model: Path) -> None:
    for advantage in (1.0, -1.0):
        trainer = LocalTrainer(tiny_model)
        sampler = await trainer.sampler("s0")
        prompt = chat_prompt(trainer, "I'm 3")
        params = SamplingParams(max_tokens=10, seed=4, stop_token_ids=(-1,))
        (seq,) = await sampler.sample(prompt, params)
        datum = rl_datum(prompt, seq, advantage)
        out = await trainer.forward_backward([datum], LossName.IMPORTANCE_SAMPLING)
        assert out.metrics["loss:sum"] == pytest.approx(-advantage * len(seq.tokens), abs=1e-4)
        await trainer.optim_step(AdamParams(learning_rate=1e-2))

        before, after = sum(seq.logprobs), await action_logprob(trainer, datum)
        assert (after - before) * advantage > 1.0
        new_sampler = await trainer.sampler("s1")
        (resampled,) = await new_sampler.sample(prompt, params)
        (old_again,) = await sampler.sample(prompt, params)
        assert old_again == seq  # the published sampler kept the weights it was given
        assert resampled.logprobs != seq.logprobs
        scored = await new_sampler.compute_logprobs([*prompt, *seq.tokens])
        assert scored[0] is None
        new_total = sum(cast(float, lp) for lp in scored[len(prompt) :])
        assert new_total == pytest.approx(after, abs=1e-4)
        assert (new_total - before) * advantage > 1.0


async def test_ppo_clips_the_ratio_like_tinker(trainer: LocalTrainer) -> None:
    sampler = await trainer.sampler("s0")
    prompt = chat_prompt(trainer, "ppo")
    (seq,) = await sampler.sample(prompt, SamplingParams(max_tokens=6, seed=0, stop_token_ids=(-1,)))
    datum = rl_datum(prompt, seq, 2.0)
    ppo = await trainer.forward_backward([datum], LossName.PPO)
    assert ppo.metrics["loss:sum"] == pytest.approx(-2.0 * 6, abs=1e-4)
    assert (await trainer.optim_step(AdamParams(learning_rate=0.0)))["grad_norm"] > 0

    # Sampling logprobs 1 nat lower: ratio e > 1.2 with A > 0, so the clipped term wins and has no gradient.
    n_obs = len(prompt) - 1
    stale = TrainingDatum(
        model_input=datum.model_input,
        target_tokens=datum.target_tokens,
        logprobs=datum.logprobs[:n_obs] + tuple(lp - 1.0 for lp in seq.logprobs),
        advantages=datum.advantages,
        mask=datum.mask,
    )
    clipped = await trainer.forward_backward([stale], LossName.PPO)
    assert clipped.metrics["loss:sum"] == pytest.approx(-1.2 * 2.0 * 6, abs=1e-4)
    assert (await trainer.optim_step(AdamParams(learning_rate=0.0)))["grad_norm"] == 0.0
    unclipped = await trainer.forward([stale], LossName.IMPORTANCE_SAMPLING)
    assert unclipped.metrics["loss:sum"] == pytest.approx(-math.e * 2.0 * 6, rel=1e-4)


async def test_cispo_weights_every_token_by_its_capped_ratio_like_tinker(trainer: LocalTrainer) -> None:
    """CISPO keeps the gradient PPO's clip zeroes: importance sampling's, with the weight capped at 4."""
    sampler = await trainer.sampler("s0")
    prompt = chat_prompt(trainer, "cispo")
    (seq,) = await sampler.sample(prompt, SamplingParams(max_tokens=6, seed=0, stop_token_ids=(-1,)))
    n_obs = len(prompt) - 1
    lr0 = AdamParams(learning_rate=0.0)

    def sampled_lower_by(nats: float) -> TrainingDatum:
        datum = rl_datum(prompt, seq, 2.0)
        logprobs = datum.logprobs[:n_obs] + tuple(lp - nats for lp in seq.logprobs)
        return TrainingDatum(datum.model_input, datum.target_tokens, logprobs=logprobs, advantages=datum.advantages)

    norms: dict[tuple[LossName, float], float] = {}
    for nats in (0.0, 1.0, 2.0):
        for loss in (LossName.CISPO, LossName.IMPORTANCE_SAMPLING):
            out = await trainer.forward_backward([sampled_lower_by(nats)], loss)
            norms[loss, nats] = (await trainer.optim_step(lr0))["grad_norm"]
            if loss is LossName.CISPO:
                weight = min(math.exp(nats), 4.0)
                assert out.metrics["loss:sum"] == pytest.approx(-weight * 2.0 * sum(seq.logprobs), rel=1e-4)
    assert norms[LossName.CISPO, 1.0] > 0.0  # PPO's gradient is 0 here (test above)
    assert norms[LossName.CISPO, 0.0] == pytest.approx(norms[LossName.IMPORTANCE_SAMPLING, 0.0], rel=1e-4)
    assert norms[LossName.CISPO, 1.0] == pytest.approx(norms[LossName.IMPORTANCE_SAMPLING, 1.0], rel=1e-4)
    capped = 4.0 / math.exp(2.0)
    assert norms[LossName.CISPO, 2.0] == pytest.approx(capped * norms[LossName.IMPORTANCE_SAMPLING, 2.0], rel=1e-4)


async def test_forward_backward_accumulates_until_optim_step(trainer: LocalTrainer) -> None:
    ids = tuple(trainer.tokenizer.encode("one two three four five", add_special_tokens=False))
    datum = TrainingDatum(model_input=ids[:-1], target_tokens=ids[1:], weights=(1.0,) * (len(ids) - 1))
    await trainer.forward_backward([datum, datum], LossName.CROSS_ENTROPY)
    doubled = [p.grad.clone() for p in trainer.trainable_parameters if p.grad is not None]
    await trainer.optim_step(AdamParams(learning_rate=0.0))
    assert all(p.grad is None for p in trainer.trainable_parameters)
    await trainer.forward_backward([datum], LossName.CROSS_ENTROPY)
    await trainer.forward_backward([datum], LossName.CROSS_ENTROPY)
    twice = [p.grad for p in trainer.trainable_parameters if p.grad is not None]
    assert len(twice) == len(doubled) > 0
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(doubled, twice, strict=True))


async def test_a_batch_split_by_its_logits_budget_gives_the_one_chunk_loss_and_gradient(tiny_model: Path) -> None:
    """A large vocabulary splits a batch into chunks of few logits each (memory); the loss is a sum, so the
    split changes neither the loss, the logprobs nor the gradient."""
    data = []
    for n in (7, 12, 9, 15):
        ids = tuple(range(20 + n, 20 + 2 * n))
        data.append(TrainingDatum(model_input=ids[:-1], target_tokens=ids[1:], weights=(1.0,) * (len(ids) - 1)))
    vocab = int(LocalTrainer(tiny_model).model.config.vocab_size)
    outputs, grads = [], []
    for budget in (1 << 40, vocab * 16):  # one chunk; chunks of at most 16 tokens (one datum each, here)
        trainer = LocalTrainer(tiny_model, logits_per_chunk=budget)
        assert trainer.tokens_per_chunk == (16384 if budget > vocab * 16 else 16)
        outputs.append(await trainer.forward_backward(data, LossName.CROSS_ENTROPY))
        grads.append([p.grad.clone() for p in trainer.trainable_parameters if p.grad is not None])
        trainer.close()
    (whole, split), (whole_grads, split_grads) = outputs, grads
    assert split.metrics["loss:sum"] == pytest.approx(whole.metrics["loss:sum"], rel=1e-5)
    for a, b in zip(whole.logprobs_D, split.logprobs_D, strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
    assert len(whole_grads) == len(split_grads) > 0
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(whole_grads, split_grads, strict=True))


async def test_cross_entropy_warm_start_lowers_the_loss(trainer: LocalTrainer) -> None:
    prompt = chat_prompt(trainer, "How old are you?")
    reply = list(trainer.tokenizer.encode("I'm twenty.<|im_end|>", add_special_tokens=False))
    full = prompt + reply
    weights = (0.0,) * (len(prompt) - 1) + (1.0,) * len(reply)
    datum = TrainingDatum(model_input=tuple(full[:-1]), target_tokens=tuple(full[1:]), weights=weights)
    losses = []
    for step in range(16):
        out = await trainer.forward_backward([datum], LossName.CROSS_ENTROPY)
        losses.append(out.metrics["loss:sum"])
        if step == 0:
            reply_logprob = sum(lp for lp, w in zip(out.logprobs_D[0], weights, strict=True) if w)
            assert losses[0] == pytest.approx(-reply_logprob, rel=1e-6)
        await trainer.optim_step(AdamParams(learning_rate=2e-2, grad_clip_norm=1.0))
    assert losses[-1] < 0.5 * losses[0]
    sampler = await trainer.sampler("sft")
    (greedy,) = await sampler.sample(prompt, SamplingParams(max_tokens=len(reply), temperature=0.0))
    assert list(greedy.tokens) == reply


async def test_save_and_load_state_reproduce_weights_and_optimizer(tiny_model: Path, tmp_path: Path) -> None:
    ids = tuple(range(10, 40))
    datum = TrainingDatum(model_input=ids[:-1], target_tokens=ids[1:], weights=(1.0,) * (len(ids) - 1))
    adam = AdamParams(learning_rate=1e-2)
    first = LocalTrainer(tiny_model, checkpoint_dir=tmp_path)
    await first.forward_backward([datum], LossName.CROSS_ENTROPY)
    await first.optim_step(adam)
    path = await first.save_state("step1")
    assert Path(path, "state.json").is_file()

    second = LocalTrainer(tiny_model, checkpoint_dir=tmp_path / "other")
    fresh = await second.forward([datum], LossName.CROSS_ENTROPY)
    await second.load_state(path)
    want = await first.forward([datum], LossName.CROSS_ENTROPY)
    got = await second.forward([datum], LossName.CROSS_ENTROPY)
    assert got.logprobs_D == want.logprobs_D != fresh.logprobs_D

    for trainer in (first, second):  # Adam moments came back too: the next step matches exactly
        await trainer.forward_backward([datum], LossName.CROSS_ENTROPY)
        await trainer.optim_step(adam)
    after_first = await first.forward([datum], LossName.CROSS_ENTROPY)
    after_second = await second.forward([datum], LossName.CROSS_ENTROPY)
    assert after_second.logprobs_D == after_first.logprobs_D


@pytest.mark.parametrize("unembed", [True, False])
async def test_lora_trains_only_the_adapters(tiny_model: Path, unembed: bool) -> None:
    """With the output layer adapted too (tied to the input embeddings), the sampler's merged copy still matches."""
    trainer = LocalTrainer(tiny_model, lora_rank=4, train_unembed=unembed)
    named = dict(trainer.model.named_parameters())
    before = {k: v.detach().clone() for k, v in named.items()}
    trainable = {k for k, v in named.items() if v.requires_grad}
    assert trainable and all("lora_" in k for k in trainable)
    assert any("lm_head" in k for k in trainable) == unembed

    sampler = await trainer.sampler("s0")
    prompt = chat_prompt(trainer, "lora")
    (seq,) = await sampler.sample(prompt, SamplingParams(max_tokens=8, seed=0, stop_token_ids=(-1,)))
    datum = rl_datum(prompt, seq, 1.0)
    await trainer.forward_backward([datum], LossName.IMPORTANCE_SAMPLING)
    await trainer.optim_step(AdamParams(learning_rate=1e-2))

    changed = {k for k, v in named.items() if not torch.equal(v.detach(), before[k])}
    assert changed and changed <= trainable
    assert {k for k in changed if "lora_B" in k}
    merged = await trainer.sampler("s1")
    (again,) = await merged.sample(prompt, SamplingParams(max_tokens=8, seed=0, stop_token_ids=(-1,)))
    out = await trainer.forward([rl_datum(prompt, again, 1.0)], LossName.IMPORTANCE_SAMPLING)
    train_lps = out.logprobs_D[0][len(prompt) - 1 :]
    assert max(abs(a - b) for a, b in zip(train_lps, again.logprobs, strict=True)) < 1e-5
    assert await action_logprob(trainer, datum) > sum(seq.logprobs) + 0.5


async def test_a_non_finite_gradient_skips_the_step_and_the_next_step_trains(trainer: LocalTrainer) -> None:
    """A reward of 1e30 (or a NaN loss) must not poison the weights nor crash the run."""
    sampler = await trainer.sampler("s0")
    prompt = chat_prompt(trainer, "huge")
    (seq,) = await sampler.sample(prompt, SamplingParams(max_tokens=6, seed=1, stop_token_ids=(-1,)))
    before = [p.detach().clone() for p in trainer.trainable_parameters]

    huge = rl_datum(prompt, seq, 1e38)
    await trainer.forward_backward([huge, huge], LossName.IMPORTANCE_SAMPLING)
    skipped = await trainer.optim_step(AdamParams(learning_rate=1e-2))

    assert skipped["skipped_nonfinite"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.trainable_parameters, strict=True))
    assert all(p.grad is None for p in trainer.trainable_parameters)
    await trainer.forward_backward([rl_datum(prompt, seq, 1.0)], LossName.IMPORTANCE_SAMPLING)
    trained = await trainer.optim_step(AdamParams(learning_rate=1e-2))
    assert trained["skipped_nonfinite"] == 0.0 and math.isfinite(trained["grad_norm"])
    assert not all(torch.equal(a, b) for a, b in zip(before, trainer.trainable_parameters, strict=True))


@pytest.mark.parametrize("lora_rank", [0, 4])
async def test_a_prefix_run_once_for_its_group_gives_the_full_batchs_loss_logprobs_and_gradient(
    tiny_model: Path, lora_rank: int
) -> None:
    """Two prompts sampled four times each (one reply twice) and a lone sequence: with shared prefixes the model
    runs fewer tokens, and the loss, every logprob and the gradient are those of running each datum in full."""
    prompts = [tuple(range(30, 52)), tuple(range(60, 75))]
    replies = [(5, 6, 7), (8, 9), (5, 6, 7), (10, 11, 12, 13)]
    seqs = [(*p, *r) for p in prompts for r in replies] + [tuple(range(80, 90))]
    data = [
        TrainingDatum(
            model_input=s[:-1],
            target_tokens=s[1:],
            logprobs=(-1.0,) * (len(s) - 1),
            advantages=tuple(0.0 if t < 15 else (0.5 if k % 2 else -0.5) for t in range(len(s) - 1)),
        )
        for k, s in enumerate(seqs)
    ]
    outputs, grads, tokens = [], [], []
    for min_work in (math.inf, 0.0):
        trainer = LocalTrainer(tiny_model, lora_rank=lora_rank, shared_prefix_min_work=min_work)
        seen: list[int] = []
        embeddings = cast(torch.nn.Module, trainer.model.get_input_embeddings())
        embeddings.register_forward_hook(lambda _m, args, _out, seen=seen: seen.append(args[0].numel()))
        outputs.append(await trainer.forward_backward(data, LossName.IMPORTANCE_SAMPLING))
        grads.append([p.grad.clone() for p in trainer.trainable_parameters if p.grad is not None])
        tokens.append(sum(seen))
        trainer.close()
    (full, shared), (full_grads, shared_grads) = outputs, grads
    assert tokens[1] < tokens[0] // 2, tokens  # each prompt once, not four times
    assert shared.metrics["loss:sum"] == pytest.approx(full.metrics["loss:sum"], rel=1e-5)
    assert full.metrics["loss:sum"] != 0.0
    for a, b in zip(full.logprobs_D, shared.logprobs_D, strict=True):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-5)
    assert len(full_grads) == len(shared_grads) > 0
    assert all(torch.allclose(a, b, rtol=1e-3, atol=1e-6) for a, b in zip(full_grads, shared_grads, strict=True))


async def test_prompts_that_share_a_prefix_prefill_it_once_and_sample_as_in_full(tiny_model: Path) -> None:
    """Distinct prompts under one system prompt, sampled together: with shared prefixes the system prompt is
    prefilled once, and every reply (tokens and logprobs) is the one each prompt gets prefilled in full; a lone
    prompt of another prefix rides along in full."""
    system = "<|im_start|>system\nYou answer with one digit and nothing else, always.<|im_end|>\n"
    texts = ["seven", "three plus four", "nine", "the number after five, please"]
    results, prefilled = [], []
    for min_work in (math.inf, 0.0):
        trainer = LocalTrainer(tiny_model, shared_prefix_min_work=min_work)
        sampler = await trainer.sampler("s0")
        encode = trainer.tokenizer.encode
        prompts = [list(encode(system, add_special_tokens=False)) + chat_prompt(trainer, t) for t in texts]
        prompts.append(chat_prompt(trainer, "hi"))
        params = [SamplingParams(max_tokens=12, seed=i, stop_token_ids=(-1,)) for i in range(len(prompts))]
        results.append(await asyncio.gather(*(sampler.sample(p, q) for p, q in zip(prompts, params, strict=True))))
        prefilled.append(sampler.prefilled_tokens)
        trainer.close()
    shared_len = len(prompts[0]) - len(chat_prompt(trainer, texts[0])) + 3  # the system prompt and "<|im_start|>user\n"
    assert prefilled[0] == sum(map(len, prompts))
    assert prefilled[1] <= prefilled[0] - (len(texts) - 1) * shared_len
    for (full,), (shared,) in zip(*results, strict=True):
        assert shared.tokens == full.tokens
        assert shared.logprobs == pytest.approx(full.logprobs, abs=1e-5)


async def test_a_reply_longer_than_the_caches_room_matches_the_training_forward(trainer: LocalTrainer) -> None:
    """Decoding writes into caches with room to spare and copies them into larger ones when full: a reply well
    past that room (``kv_batch.ROOM``) keeps the logprobs a full forward gives its tokens."""
    from adapters.local.kv_batch import ROOM

    sampler = await trainer.sampler("s0")
    prompt = chat_prompt(trainer, "Count from one to a hundred.")
    (seq,) = await sampler.sample(prompt, SamplingParams(max_tokens=2 * ROOM + 5, seed=2, stop_token_ids=(-1,)))
    out = await trainer.forward([rl_datum(prompt, seq, 1.0)], LossName.IMPORTANCE_SAMPLING)
    train_lps = out.logprobs_D[0][len(prompt) - 1 :]
    assert len(seq.tokens) == 2 * ROOM + 5
    assert max(abs(a - b) for a, b in zip(train_lps, seq.logprobs, strict=True)) < 1e-5
