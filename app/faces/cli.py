"""``agl-tinker``: train, serve a store, run runners, evaluate, and plot a run.

Every failure the user can fix (a bad config, an unreachable store, a missing model) ends with
one ``error:`` line and a non-zero exit code: 2 for configuration, 1 for everything else.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from returns.result import Failure, Success

from app.config import ConfigError, TrainConfig, load_config

EXIT_CONFIG = 2
EXIT_RUNTIME = 1

_QUIET_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx", "agentlightning", "opentelemetry", "uvicorn")


def _setup_environment(verbose: bool) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("TINKER_TELEMETRY", "0")
    os.environ.setdefault("LITELLM_DONT_SHOW_FEEDBACK_BOX", "true")
    os.environ.setdefault("AGENTOPS_LOG_LEVEL", "ERROR")
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if not verbose:
        for name in _QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)


def _error(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _config(args: argparse.Namespace) -> TrainConfig | ConfigError:
    loaded = load_config(args.config, args.overrides)
    if isinstance(loaded, Failure):
        error: ConfigError = loaded.failure()
        return error
    config: TrainConfig = loaded.unwrap()
    return config


def _preflight(config: TrainConfig) -> int | None:
    """The exit code of the first problem with the run's files, agent or ports (before the heavy imports)."""
    from app.faces.preflight import preflight

    match preflight(config):
        case Failure(problem):
            return _error(problem.message, problem.exit_code)
    return None


def _cmd_train(args: argparse.Namespace) -> int:
    config = _config(args)
    if isinstance(config, ConfigError):
        return _error(str(config), EXIT_CONFIG)
    if args.show_config:
        print(json.dumps(config.model_dump(by_alias=True), indent=2))
        return 0
    problem = _preflight(config)
    if problem is not None:
        return problem
    from app.faces.console import run_training_with_progress

    return run_training_with_progress(config, write_plot=not args.no_report)


def _cmd_eval(args: argparse.Namespace) -> int:
    config = _config(args)
    if isinstance(config, ConfigError):
        return _error(str(config), EXIT_CONFIG)
    problem = _preflight(config)
    if problem is not None:
        return problem
    from app.faces.console import run_evaluation

    return run_evaluation(config, args.checkpoint)


def _cmd_report(args: argparse.Namespace) -> int:
    from app.faces.report import write_report, write_transcript_index

    report = write_report(args.log_path, args.out)
    index = write_transcript_index(args.log_path)  # after the plot, which it shows
    match report:
        case Success(path):
            print(f"wrote {path}")
            if index is not None:
                print(f"transcripts: {index}")
            return 0
        case Failure(message):
            if index is not None:
                print(f"transcripts: {index}")
            return _error(str(message), EXIT_RUNTIME)
    raise AssertionError("unreachable")


def _cmd_store(args: argparse.Namespace) -> int:
    from app.faces.console import serve_store

    return serve_store(args.host, args.port)


def _cmd_runner(args: argparse.Namespace) -> int:
    from app.faces.console import serve_runners

    if args.concurrency < 1:
        print(f"agl-tinker: error: --concurrency must be at least 1, got {args.concurrency}", file=sys.stderr)
        return 2
    return serve_runners(args.agent, args.store, args.n, None if args.stock else args.concurrency, args.python)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agl-tinker", description="Train Agent-lightning agents with the Tinker RL loop."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO, including the dependencies")
    commands = parser.add_subparsers(dest="command", required=True)

    def config_args(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--config", help="a .toml or .json file of settings (see app/config.py)")
        sub.add_argument("overrides", nargs="*", metavar="key=value", help="settings on top, e.g. learning_rate=1e-3")

    train = commands.add_parser("train", help="train: embedded store, endpoint, runners and trainer in one command")
    config_args(train)
    train.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    train.add_argument("--no-report", action="store_true", help="do not write report.png at the end")
    train.set_defaults(run=_cmd_train)

    evaluate = commands.add_parser(
        "eval", help="evaluate the last checkpoint of a run (or --checkpoint) on its test tasks"
    )
    config_args(evaluate)
    evaluate.add_argument("--checkpoint", help="a state path from checkpoints.jsonl (default: the run's last)")
    evaluate.set_defaults(run=_cmd_eval)

    report = commands.add_parser(
        "report", help="plot reward and loss curves of a run to a PNG and list its transcript pages (index.html)"
    )
    report.add_argument("log_path", nargs="?", default="runs/demo")
    report.add_argument("--out", help="PNG path (default: LOG_PATH/report.png)")
    report.set_defaults(run=_cmd_report)

    store = commands.add_parser("store", help="serve an in-memory Agent-lightning store over HTTP for other machines")
    store.add_argument("--host", default="127.0.0.1", help="bind address (default loopback; 0.0.0.0 exposes it)")
    store.add_argument("--port", type=int, default=4747)
    store.set_defaults(run=_cmd_store)

    runner = commands.add_parser("runner", help="run N runner processes that take rollouts from a store URL")
    runner.add_argument("--store", required=True, help="store URL, e.g. http://127.0.0.1:4747")
    runner.add_argument(
        "--agent", default=TrainConfig().agent, help="package.module:attribute of the @agl.rollout agent"
    )
    runner.add_argument("-n", type=int, default=1, help="number of runner processes")
    runner.add_argument(
        "--concurrency",
        type=int,
        default=TrainConfig().runner_concurrency,
        help="rollouts each process runs at once",
    )
    runner.add_argument(
        "--stock",
        action="store_true",
        help="Agent-lightning's LitAgentRunner instead: one rollout at a time (for trajectory_source=client)",
    )
    runner.add_argument(
        "--python",
        help="the interpreter the runners run under, e.g. an agent's own environment (scripts/agent-env.sh)",
    )
    runner.set_defaults(run=_cmd_runner)
    return parser


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM outside an event loop (start-up, ``agl-tinker runner``) stops the command as Ctrl-C does.

    Inside one, ``app.faces.console.run_until_terminated`` takes SIGTERM over and unwinds the run in order."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _setup_environment(args.verbose)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return _error("interrupted", 130)


if __name__ == "__main__":
    sys.exit(main())
