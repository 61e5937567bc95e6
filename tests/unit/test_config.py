"""Loading the training config: file + overrides, and one clear line for every mistake."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from returns.result import Failure, Success

from app.config import TrainConfig, load_config


def error_of(result: object) -> str:
    assert isinstance(result, Failure), result
    return str(result.failure())


def test_defaults_are_the_demo_on_the_local_backend() -> None:
    config = load_config().unwrap()
    assert config == TrainConfig()
    assert (config.policy.backend, config.tasks, config.store_url, config.endpoint_host) == (
        "local",
        "demo",
        None,
        "127.0.0.1",
    )


def test_overrides_apply_on_top_of_a_toml_file_with_typed_values(tmp_path: Path) -> None:
    file = tmp_path / "run.toml"
    file.write_text("learning_rate = 0.001\nbatch_size = 4\n[policy]\nlora_rank = 8\n[warm_start]\nsteps = 5\n")
    config = load_config(str(file), ["batch_size=2", "policy.num_threads=1", "wandb_project=proj", "store_url=null"])
    assert isinstance(config, Success)
    loaded = config.unwrap()
    assert (loaded.learning_rate, loaded.batch_size, loaded.policy.lora_rank, loaded.policy.num_threads) == (
        0.001,
        2,
        8,
        1,
    )
    assert (loaded.warm_start.steps, loaded.wandb_project, loaded.store_url) == (5, "proj", None)


@pytest.mark.parametrize(
    ("override", "read"),
    [
        ("wandb_name=2024", lambda c: c.wandb_name == "2024"),
        ("log_path=runs/1e3", lambda c: c.log_path == "runs/1e3"),
        ("agent_match=true", lambda c: c.agent_match == "true"),
        ('wandb_project="quoted"', lambda c: c.wandb_project == "quoted"),
        ('wandb_name="2024"', lambda c: c.wandb_name == "2024"),
        ('policy.backend="local"', lambda c: c.policy.backend == "local"),
        ("batch_size=8", lambda c: c.batch_size == 8 and type(c.batch_size) is int),
        ("learning_rate=1e-3", lambda c: c.learning_rate == 1e-3),
        ("policy.lora_rank=32", lambda c: c.policy.lora_rank == 32),
        ("policy.base_model=123", lambda c: c.policy.base_model == "123"),
        ("async.enabled=true", lambda c: c.asynchronous.enabled is True),
        ("keep_rollouts=false", lambda c: c.keep_rollouts is False),
        ("max_batches=null", lambda c: c.max_batches is None),
        ('warm_start={"steps": 3}', lambda c: c.warm_start.steps == 3 and c.warm_start.batch_size == 32),
    ],
)
def test_an_override_is_typed_by_the_field_it_sets(override: str, read: Callable[[TrainConfig], bool]) -> None:
    assert read(load_config(None, [override]).unwrap())


def test_null_unsets_a_text_field_that_may_be_unset_and_is_text_where_it_may_not(tmp_path: Path) -> None:
    """``null`` spells "unset" (as pydantic-settings' CLI reads it); a path that may not be unset takes it as text."""
    file = tmp_path / "run.toml"
    file.write_text('wandb_name = "old"\n')
    loaded = load_config(str(file), ["wandb_name=null", "log_path=null"]).unwrap()
    assert (loaded.wandb_name, loaded.log_path) == (None, "null")


def test_a_json_file_loads_too(tmp_path: Path) -> None:
    file = tmp_path / "run.json"
    file.write_text('{"group_size": 3, "policy": {"backend": "local"}}')
    assert load_config(str(file)).unwrap().group_size == 3


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["learning_rate=-1"], "learning_rate: Input should be greater than 0"),
        (["batch_size=many"], "batch_size: Input should be a valid integer"),
        (["batch_size=8.5"], "batch_size: Input should be a valid integer"),
        (["async.enabled=maybe"], "async.enabled: Input should be a valid boolean"),
        (["policy.backend=2024"], "policy.backend: Input should be 'local' or 'tinker'"),
        (["policy.lora_rnak=32"], "policy.lora_rnak: unknown setting"),
        (["bacth_size=4"], "bacth_size: unknown setting"),
        (["policy.backend=tinker"], "policy: the tinker backend needs policy.base_model"),
        (["policy.backend=tinker", "policy.base_model=Qwen/Qwen3-8B"], "set policy.lora_rank >= 1"),
        (["policy.tiny_echo_system=true"], "set policy.tiny_echo_steps too"),
        (["loss_fn=sft"], "loss_fn: Input should be 'importance_sampling', 'ppo' or 'cispo'"),
        (["learning_rate"], "must look like key=value"),
        (["batch_size=4", "batch_size.inner=1"], "batch_size is not a table"),
        (["async.num_minibatches=2"], "async.num_minibatches needs async.enabled=true"),
        (["async.enabled=true", "async.num_minibatches=3"], "must divide the 10 groups of a step"),
        (["async.enabled=true", "async.num_minibatches=2", "num_substeps=2"], "for each of num_substeps=2"),
    ],
)
def test_mistakes_come_back_as_one_line_naming_the_field(overrides: list[str], expected: str) -> None:
    message = error_of(load_config(None, overrides))
    assert expected in message
    assert "\n" not in message


def test_several_mistakes_are_reported_together() -> None:
    message = error_of(load_config(None, ["batch_size=0", "group_size=0"]))
    assert "batch_size" in message and "group_size" in message


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("missing.toml", None, "does not exist"),
        ("run.yaml", "a: 1", "use .toml or .json"),
        ("bad.toml", "learning_rate = = 1", "is not valid TOML"),
        ("list.json", "[1, 2]", "must hold a table"),
    ],
)
def test_bad_files_are_clear_errors(tmp_path: Path, name: str, content: str | None, expected: str) -> None:
    file = tmp_path / name
    if content is not None:
        file.write_text(content)
    assert expected in error_of(load_config(str(file)))


def test_the_config_is_frozen() -> None:
    config = TrainConfig()
    with pytest.raises(Exception, match="frozen"):
        config.batch_size = 3  # type: ignore[misc]
