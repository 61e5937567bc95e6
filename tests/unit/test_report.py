"""The run report: curves from metrics.jsonl (a resumed run's later lines win) plotted to a PNG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from returns.result import Failure

from app.faces.report import read_curves, write_report


def write_metrics(run: Path, rows: list[dict[str, object]]) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_curves_keep_one_point_per_step_and_the_latest_wins(tmp_path: Path) -> None:
    write_metrics(
        tmp_path,
        [
            {"step": 0, "warm_start/loss_first": 6.5},
            {"step": 0, "env/all/reward/total": 0.1, "test/env/all/reward/total": 0.2, "optim/loss:sum": 0.0},
            {"step": 1, "env/all/reward/total": 0.3, "optim/loss:sum": 0.5, "optim/entropy": 0.9},
            {"step": 1, "env/all/reward/total": 0.4, "optim/loss:sum": 0.25, "optim/entropy": 0.8},
            {"step": 2, "test/env/all/reward/total": 0.7},
        ],
    )
    curves = read_curves(tmp_path / "metrics.jsonl").unwrap()
    assert curves.train_reward == [(0, 0.1), (1, 0.4)]
    assert curves.test_reward == [(0, 0.2), (2, 0.7)]
    assert curves.loss == [(0, 0.0), (1, 0.25)]
    assert curves.entropy == [(1, 0.8)]


def test_write_report_makes_a_png(tmp_path: Path) -> None:
    write_metrics(tmp_path, [{"step": i, "env/all/reward/total": i / 10, "optim/loss:sum": 0.0} for i in range(5)])
    path = write_report(tmp_path).unwrap()
    assert path == tmp_path / "report.png"
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_the_sampler_trainer_kl_is_read_and_drawn_in_a_panel_of_its_own(tmp_path: Path) -> None:
    rows: list[dict[str, object]] = [
        {"step": i, "env/all/reward/total": i / 10, "optim/loss:sum": 0.0, "optim/entropy": 1.0} for i in range(4)
    ]
    for i, row in enumerate(rows[1:], start=1):  # batch 0 logged no KL (nothing trainable)
        row |= {"optim/kl_sample_train_v1": (-1) ** i * 1e-8, "optim/kl_sample_train_v2": 0.05 * i}
    write_metrics(tmp_path, rows)
    curves = read_curves(tmp_path / "metrics.jsonl").unwrap()
    assert curves.kl_v1 == [(1, -1e-8), (2, 1e-8), (3, -1e-8)]
    assert curves.kl_v2 == [(1, 0.05), (2, 0.1), (3, pytest.approx(0.15))]
    with_kl = write_report(tmp_path).unwrap()
    write_metrics(tmp_path, [{k: v for k, v in r.items() if "kl_sample_train" not in k} for r in rows])
    without = write_report(tmp_path, tmp_path / "without.png").unwrap()
    assert png_height(with_kl) > png_height(without)  # the KL panel is a third row; runs without it keep two


def png_height(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[20:24], "big")  # IHDR: width at 16, height at 20


def test_missing_empty_or_broken_metrics_are_clear_failures(tmp_path: Path) -> None:
    missing = read_curves(tmp_path / "nope" / "metrics.jsonl")
    assert isinstance(missing, Failure) and "no metrics file" in missing.failure()
    write_metrics(tmp_path, [{"step": 0, "warm_start/loss_first": 1.0}])
    empty = read_curves(tmp_path / "metrics.jsonl")
    assert isinstance(empty, Failure) and "no reward metrics" in empty.failure()
    (tmp_path / "metrics.jsonl").write_text("{not json\n")
    broken = read_curves(tmp_path / "metrics.jsonl")
    assert isinstance(broken, Failure) and "metrics.jsonl:1 is not JSON" in broken.failure()
