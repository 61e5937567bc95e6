"""Runner processes that execute the user's agent on a store, supervised.

Each process runs a ``ConcurrentRunner`` (``adapters.runner.concurrent_runner``: up to ``concurrency``
rollouts at once) or, with ``concurrency=None``, Agent-lightning's stock ``LitAgentRunner`` (one
rollout at a time, AgentOps tracer: what ``trajectory_source=client`` reads). Processes attach to
the store over HTTP, the way a distributed deployment runs them, and poll it every
``poll_interval`` seconds when idle (50 ms here instead of Agent-lightning's 5 s).

``RunnerProcesses.supervise()`` watches the processes from a thread: a dead one is respawned after
0.5 s, 1 s, 2 s... (capped), under a new store worker id so that the loop can tell the rollouts of the
dead process from the new one's; a slot whose process dies ``max_crashes`` times in a row, each
within ``crash_window_s`` of its start (agent import included), is given up. It implements
``ports.runner_pool.RunnerPool``. Processes run ``python -m adapters.runner.entry`` under this interpreter or
another one (``python=``: an agent's own environment). Each gets its settings and the store's token on a
pipe (its store client and its OTLP span exporter send the token) and exits when its parent is gone,
even after ``kill -9`` or a SIGTERM that ends it: the kernel kills it (``adapters.runner.entry``, armed
before any heavy import), and a watch thread polls as a fallback. A child has no terminal (stdin
``/dev/null``, a session of its own: a framework's prompt ends at once) and reports each distinct error it
logs on a second pipe (``ErrorReport``), which ``first_error`` hands the loop for its error line.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TextIO

from agentlightning import AgentOpsTracer, LightningStore, LitAgent, LitAgentRunner
from agentlightning.execution import ExecutionEvent, ThreadingEvent
from pydantic import BaseModel, ConfigDict

from adapters.agl.auth import TokenStoreClient, export_spans_with_token
from adapters.runner.concurrent_runner import AGENT_ERROR, DEFAULT_CONCURRENCY, HUNG_EXIT_CODE, ConcurrentRunner
from adapters.runner.forks import ForkServer, shared_fork_server
from adapters.runner.protocol import RUNNER_MODULE, STOP
from adapters.runner.tls import share_default_tls_contexts

logger = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_S = 0.05


def load_agent(reference: str) -> LitAgent[Any]:
    """The agent named by ``"package.module:attribute"`` (what runner processes import).

    The attribute is an agent (``@agl.rollout``, a ``LitAgent`` instance) or a ``LitAgent`` subclass,
    made with no arguments, as Agent-lightning's examples define theirs. The working directory is
    importable, as with ``python -m``: ``agent=my_agent:fn`` finds ``./my_agent.py``.
    """
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"agent reference {reference!r} must look like 'package.module:attribute'")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        agent = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"cannot load agent {reference!r}: {error}") from error
    if isinstance(agent, type) and issubclass(agent, LitAgent):
        agent = _instantiate(reference, agent)
    if not isinstance(agent, LitAgent):
        raise ValueError(f"{reference!r} is a {type(agent).__name__}, not an agentlightning agent (@agl.rollout)")
    return agent


_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _instantiate(reference: str, agent_class: type[LitAgent[Any]]) -> LitAgent[Any]:
    """``agent_class()``, or a one-line error naming the arguments its ``__init__`` needs."""
    try:
        needed = [
            name
            for name, parameter in inspect.signature(agent_class).parameters.items()
            if parameter.default is inspect.Parameter.empty and parameter.kind not in _VARIADIC
        ]
    except (TypeError, ValueError):
        needed = []
    if needed:
        raise ValueError(
            f"{reference!r} is a LitAgent class whose __init__ needs {', '.join(needed)}: "
            "point agent= at a module-level instance instead"
        )
    try:
        return agent_class()
    except Exception as error:
        raise ValueError(f"cannot make {reference!r}(): {type(error).__name__}: {error}") from error


def make_runner(poll_interval_s: float = DEFAULT_POLL_INTERVAL_S) -> LitAgentRunner[Any]:
    """A runner with the AgentOps tracer, which records token ids and logprobs of OpenAI calls."""
    return LitAgentRunner(
        tracer=AgentOpsTracer(),
        poll_interval=poll_interval_s,
        interval_jitter=poll_interval_s / 2,
    )


async def run_runner(
    agent: LitAgent[Any],
    store: LightningStore,
    stop: ExecutionEvent,
    *,
    worker_id: int = 0,
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
) -> None:
    """Execute rollouts from ``store`` in this event loop until ``stop`` is set."""
    runner = make_runner(poll_interval_s)
    # Not ``run_context``: agentlightning 0.3.0 passes worker_id=0 to init_worker whatever it is
    # given, so every runner process would register as the same ``Worker-0`` in the store.
    runner.init(agent=agent)
    try:
        runner.init_worker(worker_id=worker_id, store=store)
        if _alarm is not None:
            _alarm.watch()  # AgentOps, set up just now, replaced the handlers of its logger
        try:
            await runner.iter(event=stop)
        finally:
            runner.teardown_worker(worker_id=worker_id)
    finally:
        runner.teardown()


async def run_concurrent_runner(
    agent: LitAgent[Any],
    store: LightningStore,
    stop: ExecutionEvent,
    *,
    worker_id: int = 0,
    concurrency: int,
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
    exit_when_hung: bool = False,
) -> None:
    """Execute up to ``concurrency`` rollouts at once from ``store`` in this event loop until ``stop`` is set."""
    runner = ConcurrentRunner(
        agent,
        store,
        worker_id=store_worker_id(worker_id),
        concurrency=concurrency,
        poll_interval_s=poll_interval_s,
        exit_when_hung=exit_when_hung,
    )
    await runner.run(stop)


def _exit_with_parent(parent_pid: int, interval_s: float = 0.5) -> None:
    """Exit when the parent is gone (even after its kill -9): an orphan runner must not outlive its run."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class RunnerSettings(BaseModel):
    """What a runner process is told on its control pipe (``adapters.runner.entry``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parent_pid: int
    agent: str
    store_url: str
    worker_id: int
    poll_interval_s: float
    token: str | None
    concurrency: int | None
    sys_path: tuple[str, ...] = ()
    """The parent's import path, given only when the child runs the parent's own interpreter."""
    report_fd: int | None = None
    """The child's end of the pipe on which it reports the errors its agent logs (``ErrorReport``)."""


class ErrorReport(logging.Handler):
    """Sends the parent one line per distinct error logged in a runner process (the agent's, its framework's).

    What a run that cannot train names as the likely cause: a traceback the runner or the agent's framework
    logged, or a span that ended with an error (``AGENT_ERROR``), even when every rollout still succeeded.
    At most ``LIMIT`` lines a process; the log itself is untouched.
    """

    LIMIT = 20

    def __init__(self, pipe: TextIO) -> None:
        super().__init__(logging.WARNING)
        self.pipe, self.sent, self.broken = pipe, set[str](), False

    def emit(self, record: logging.LogRecord) -> None:
        last_resort = logging.lastResort
        if last_resort is not None and record.levelno >= last_resort.level and self._alone(record):
            last_resort.handle(record)  # what Python printed for it before this handler was on the root
        if record.levelno < logging.ERROR and not getattr(record, AGENT_ERROR, False):
            return
        line = error_line(record)
        if self.broken or line in self.sent or len(self.sent) >= self.LIMIT:
            return
        self.sent.add(line)
        try:
            self.pipe.write(line + "\n")
            self.pipe.flush()
        except (OSError, ValueError):  # the parent is gone or stopped reading
            self.broken = True

    def _alone(self, record: logging.LogRecord) -> bool:
        """Whether no other handler takes ``record`` (Python then prints it with its last-resort handler)."""
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(h is not self and record.levelno >= h.level for h in logger.handlers):
                return False
            logger = logger.parent if logger.propagate else None
        return True

    def watch(self) -> ErrorReport:
        """Listen on the root logger (what nothing else handles is still printed, as before)."""
        logging.getLogger().addHandler(self)
        return self


def error_line(record: logging.LogRecord) -> str:
    """One line for a logged error: its message, and the exception's last line (``ValueError: ...``) if any."""
    message = " ".join(record.getMessage().split())
    if record.exc_info and record.exc_info[1] is not None:
        error = record.exc_info[1]
        message = f"{message}: {type(error).__name__}: {' '.join(str(error).split())}"
    return message[:500]


class SpanExportAlarm(logging.Handler):
    """Says on stderr (the trainer's output, for runners it started) that a span exporter in this runner fails.

    OpenTelemetry's exporters and AgentOps log such failures and carry on. Only Agent-lightning's own
    ``LightningStoreOTLPExporter`` sending a rollout's spans to the store (the stock runner's) carries rewards:
    its failure loses them while the rollout still succeeds. Any other exporter (a framework's telemetry, such as
    CrewAI's, or the agent's own OpenTelemetry setup) loses only its own data, and the line says so, naming the
    logger, and the exporter and its URL where the failure came from inside an exporter's ``export``
    (``ExportWatch``). One line at the first failure of each kind, then every 100th.
    """

    EVERY = 100

    def __init__(self, worker_id: int) -> None:
        super().__init__(logging.WARNING)
        self.worker_id, self.failures, self.other_failures = worker_id, 0, 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "export" not in message.lower():
            return
        first = " ".join(message.split())[:300]
        exporting = ExportWatch.current()
        source = f"logger {record.name}" + (f", {exporting.exporter} to {exporting.url}" if exporting else "")
        if exporting is not None and exporting.to_store:
            self.failures += 1
            if self.failures == 1 or self.failures % self.EVERY == 0:
                sys.stderr.write(
                    f"agl-tinker runner {self.worker_id}: span export to the store failed ({self.failures}x; "
                    f"{source}): {first}; the rewards and spans of its rollouts do not reach the trainer\n"
                )
            return
        self.other_failures += 1
        if self.other_failures == 1 or self.other_failures % self.EVERY == 0:
            sys.stderr.write(
                f"agl-tinker runner {self.worker_id}: a span exporter other than Agent-lightning's failed "
                f"({self.other_failures}x; {source}): {first}; this does not carry the rollouts' rewards "
                "and spans, which reach the trainer on their own way\n"
            )

    def watch(self) -> SpanExportAlarm:
        """Listen to the exporters' loggers; again after AgentOps configures its own (it drops their handlers)."""
        for name in ("agentops", "opentelemetry"):
            found = logging.getLogger(name)
            if self not in found.handlers:
                found.addHandler(self)
        return self


@dataclass(frozen=True, slots=True)
class ExportWatch:
    """Which OTLP exporter this thread is running (or ran last): what a failure logged meanwhile belongs to.

    OpenTelemetry's OTLP exporter logs its failures without naming itself; ``install`` wraps its ``export`` so
    that the alarm can tell Agent-lightning's export to the store from a framework's. Exporters run on their
    span processor's own thread, so the thread's last export is the one a failure logged there is about.
    """

    exporter: str
    url: str
    to_store: bool
    """Agent-lightning's ``LightningStoreOTLPExporter``, sending a rollout's spans to the store."""

    _local: ClassVar[threading.local] = threading.local()

    @classmethod
    def current(cls) -> ExportWatch | None:
        found = getattr(cls._local, "export", None)
        return found if isinstance(found, ExportWatch) else None

    @classmethod
    def note(cls, exporter: object) -> None:
        from agentlightning.utils.otlp import LightningStoreOTLPExporter

        to_store = isinstance(exporter, LightningStoreOTLPExporter) and exporter.rollout_id is not None
        url = str(getattr(exporter, "_endpoint", None) or "?")
        cls._local.export = cls(type(exporter).__name__, url, to_store)

    @classmethod
    def install(cls) -> None:
        """Wrap ``OTLPSpanExporter.export`` (HTTP, what Agent-lightning and most frameworks use) once."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        original = OTLPSpanExporter.export
        if getattr(original, "_agl_tinker_watched", False):
            return

        def export(self: OTLPSpanExporter, spans: Any) -> Any:
            cls.note(self)
            return original(self, spans)

        export._agl_tinker_watched = True  # type: ignore[attr-defined]
        OTLPSpanExporter.export = export  # type: ignore[method-assign]


_alarm: SpanExportAlarm | None = None


def run_runner_process(settings: Mapping[str, Any], control: TextIO) -> None:
    """A runner process's work, after ``adapters.runner.entry`` tied it to its parent.

    Runs until ``stop`` arrives on ``control`` or the pipe closes (the parent stopped or is gone).
    """
    parsed = RunnerSettings.model_validate(settings)
    _exit_with_parent(parsed.parent_pid)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("TINKER_TELEMETRY", "0")
    os.environ.setdefault("AGENTOPS_LOG_LEVEL", "ERROR")  # no "Session Replay" line per rollout
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when runners stop
    export_spans_with_token(parsed.token)
    if parsed.report_fd is not None:
        os.set_inheritable(parsed.report_fd, False)  # the agent's own subprocesses must not hold it open
        ErrorReport(os.fdopen(parsed.report_fd, "w", encoding="utf-8")).watch()
    global _alarm
    ExportWatch.install()
    _alarm = SpanExportAlarm(parsed.worker_id).watch()
    stop = ThreadingEvent()

    def listen() -> None:
        for line in control:
            if line.strip() == STOP:
                break
        stop.set()

    threading.Thread(target=listen, name="runner-control", daemon=True).start()
    share_default_tls_contexts()  # before the agent's module builds any client
    agent = load_agent(parsed.agent)

    async def serve() -> None:
        store = TokenStoreClient(parsed.store_url, parsed.token)
        try:
            if parsed.concurrency is None:
                await run_runner(agent, store, stop, worker_id=parsed.worker_id, poll_interval_s=parsed.poll_interval_s)
            else:
                await run_concurrent_runner(
                    agent,
                    store,
                    stop,
                    worker_id=parsed.worker_id,
                    concurrency=parsed.concurrency,
                    poll_interval_s=parsed.poll_interval_s,
                    exit_when_hung=True,
                )
        finally:
            await store.close()

    asyncio.run(serve())


class RunnerChild:
    """One runner process: ``<python> -m adapters.runner.entry <fd>``, its settings and ``stop`` on the pipe ``fd``.

    Under this interpreter it is forked from the process's fork server (``adapters.runner.fork_server``: the
    runner's imports paid once, not at every start and respawn) where it can be, else started as its own
    interpreter. Shaped like ``multiprocessing.Process`` where the pool needs it (``start``, ``exitcode``,
    ``kill``, ``join``).
    """

    def __init__(
        self, python: str, settings: RunnerSettings, name: str, on_error: Callable[[str], None] | None = None
    ) -> None:
        """``on_error``: called (from a reader thread) with each line of the child's ``ErrorReport``."""
        self._python, self._settings, self.name, self._on_error = python, settings, name, on_error
        self._popen: subprocess.Popen[bytes] | None = None
        self._forked: tuple[ForkServer, int] | None = None
        self._control: TextIO | None = None

    def start(self) -> None:
        read_end, write_end = os.pipe()
        report_read, report_write = os.pipe()
        env = _child_environment(self._python)
        cwd = _working_directory()
        server = shared_fork_server(self._python, env) if cwd and _same_interpreter(self._python) else None
        try:
            if server is not None and cwd is not None:
                self._forked = server, server.spawn(read_end, report_write, cwd, env)
            else:
                self._popen = subprocess.Popen(
                    [self._python, "-m", RUNNER_MODULE, str(read_end)],
                    pass_fds=(read_end, report_write),
                    stdin=subprocess.DEVNULL,  # a framework's prompt ("view your traces? [y/N]") ends at once
                    start_new_session=True,  # no controlling terminal either: /dev/tty cannot be opened to ask
                    env=env,
                )
        except BaseException:
            os.close(write_end)
            os.close(report_read)
            raise
        finally:
            os.close(read_end)
            os.close(report_write)
        threading.Thread(target=self._read_errors, args=(report_read,), name=f"{self.name}-errors", daemon=True).start()
        self._control = os.fdopen(write_end, "w", encoding="utf-8")
        self._send(self._settings.model_copy(update={"report_fd": report_write}).model_dump_json())

    def _read_errors(self, fd: int) -> None:
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as report:
            for line in report:
                if self._on_error is not None and line.strip():
                    self._on_error(line.strip())

    def _send(self, line: str) -> None:
        if self._control is None or self._control.closed:
            return
        try:
            self._control.write(line + "\n")
            self._control.flush()
        except (BrokenPipeError, ValueError):  # the child is gone
            self._close_control()

    def _close_control(self) -> None:
        if self._control is not None:
            with contextlib.suppress(OSError):
                self._control.close()

    def stop(self) -> None:
        """Ask the child to finish the rollouts in flight and exit."""
        self._send(STOP)
        self._close_control()

    @property
    def pid(self) -> int | None:
        """The process id (a forked child's once its fork server has answered)."""
        if self._forked is not None:
            server, child = self._forked
            return server.pid(child)
        return None if self._popen is None else self._popen.pid

    @property
    def exitcode(self) -> int | None:
        """``None`` while running (or before ``start``); negative for a signal, as ``multiprocessing`` says."""
        if self._forked is not None:
            server, child = self._forked
            code = server.exitcode(child)
        elif self._popen is not None:
            code = self._popen.poll()
        else:
            return None
        if code is not None:
            self._close_control()
        return code

    def is_alive(self) -> bool:
        return (self._popen is not None or self._forked is not None) and self.exitcode is None

    def kill(self) -> None:
        if self._forked is not None:
            server, child = self._forked
            server.kill(child)
        elif self._popen is not None and self._popen.poll() is None:
            self._popen.kill()

    def join(self, timeout: float | None = None) -> None:
        if self._forked is not None:
            server, child = self._forked
            server.wait(child, timeout)
        elif self._popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout)
        self.exitcode  # noqa: B018  # closes the pipe of a child that has exited


def _child_environment(python: str) -> dict[str, str]:
    """The trainer's environment, less what would make another interpreter load the trainer's packages.

    The interpreter's own ``bin/`` goes first on ``PATH``: an agent's tools installed by its requirements (an MCP
    server started by command name, ``uvx``) are found as if its environment were activated.
    """
    env = dict(os.environ)
    if not _same_interpreter(python):
        env.pop("PYTHONHOME", None)
        env.pop("VIRTUAL_ENV", None)
    bin_dir = os.path.dirname(os.path.abspath(python))  # not resolved: a venv's python links out of its bin/
    rest = [d for d in env.get("PATH", os.defpath).split(os.pathsep) if d != bin_dir]
    env["PATH"] = os.pathsep.join([bin_dir, *rest])
    return env


def _working_directory() -> str | None:
    """This process's working directory; ``None`` if it was removed (a spawned child still starts there)."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        return None


def _same_interpreter(python: str) -> bool:
    """Whether ``python`` is this interpreter (a venv's ``python`` links to its base: compare paths, not targets)."""
    return os.path.abspath(python) == os.path.abspath(sys.executable)


def store_worker_id(worker_id: int) -> str:
    """The id ``LitAgentRunner`` registers in the store (and puts on its attempts) for ``worker_id``."""
    return f"Worker-{worker_id}"


REMOTE_ID_BLOCK = 1000
"""Worker ids each ``agl-tinker runner`` command owns: its processes and their respawns."""


def remote_first_worker_id() -> int:
    """A first worker id for a pool that attaches to someone else's store (``agl-tinker runner``): a random block
    of ``REMOTE_ID_BLOCK`` ids above the trainer's own pool (0 up), so runners started on several machines, or
    beside the trainer's, register as distinct workers (two commands share a block with chance 1 in 10^6)."""
    return secrets.randbelow(10**6) * REMOTE_ID_BLOCK + REMOTE_ID_BLOCK


@dataclass(slots=True)
class _Slot:
    """One runner position: its current process and its recent crashes."""

    process: RunnerChild
    worker_id: int
    started_at: float = field(default_factory=time.monotonic)
    quick_crashes: int = 0
    """Consecutive deaths, each within ``crash_window_s`` of the process's start."""
    restart_at: float | None = None
    """While dead: when to respawn (monotonic)."""
    kill_requested: bool = False
    """Killed on purpose (hung agent): respawn at once, not counted as a crash."""
    given_up: bool = False


class RunnerProcesses:
    """``n`` runner processes attached to a store by URL (they stand in for other machines)."""

    def __init__(
        self,
        agent_reference: str,
        store_url: str,
        n: int,
        *,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        token: str | None = None,
        concurrency: int | None = DEFAULT_CONCURRENCY,
        max_crashes: int = 3,
        crash_window_s: float = 60.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        check_interval_s: float = 0.1,
        python: str | None = None,
        first_worker_id: int = 0,
    ) -> None:
        """``token``: the store's shared secret (``adapters.agl.auth``), handed to the children in memory.

        ``first_worker_id``: the store worker id of the first process (``Worker-<id>``; the others and respawns
        count up from it). Pools that share a store need ranges of their own (``remote_first_worker_id``), or one
        pool's dead worker would end the other's rollouts and one's heartbeats would hide the other's silence.

        ``concurrency``: rollouts each process runs at once (``None``: the stock one-at-a-time ``LitAgentRunner``).
        ``python``: the interpreter the runners run under (default this one): an agent's own environment, with
        Agent-lightning and this project's runner part (``adapters.runner.env_check`` checks it; the agent is then
        loaded only there).
        """
        if n < 1:
            raise ValueError(f"need at least one runner, got {n}")
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"runner concurrency must be at least 1, got {concurrency}")
        self._python = python or sys.executable
        same = _same_interpreter(self._python)
        if same:
            load_agent(agent_reference)  # fail here, with a clear message, rather than in n children
        self._settings = RunnerSettings(
            parent_pid=os.getpid(),
            agent=agent_reference,
            store_url=store_url,
            worker_id=0,
            poll_interval_s=poll_interval_s,
            token=token,
            concurrency=concurrency,
            sys_path=tuple(sys.path) if same else (),
        )
        self._concurrency = concurrency
        self._max_crashes, self._crash_window_s = max_crashes, crash_window_s
        self._backoff_s, self._max_backoff_s, self._check_interval_s = backoff_s, max_backoff_s, check_interval_s
        if first_worker_id < 0:
            raise ValueError(f"first_worker_id must not be negative, got {first_worker_id}")
        ids = range(first_worker_id, first_worker_id + n)
        self._slots = [_Slot(self._process(worker_id), worker_id) for worker_id in ids]
        self._next_worker_id = first_worker_id + n
        self._lock = threading.Lock()
        self._errors_lock = threading.Lock()
        self._dead: set[str] = set()
        self._restarts = 0
        self._last_exitcode: int | None = None
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._first_error: str | None = None
        self._n_errors = 0

    def _process(self, worker_id: int) -> RunnerChild:
        settings = self._settings.model_copy(update={"worker_id": worker_id})
        return RunnerChild(self._python, settings, name=f"agl-runner-{worker_id}", on_error=self._note_error)

    def _note_error(self, line: str) -> None:
        with self._errors_lock:
            self._n_errors += 1
            if self._first_error is None:
                self._first_error = line

    def first_error(self) -> str | None:
        """The first error the runner processes logged (the agent's, its framework's), or None."""
        with self._errors_lock:
            return self._first_error

    @property
    def _processes(self) -> Sequence[RunnerChild]:
        return [slot.process for slot in self._slots]

    def start(self) -> RunnerProcesses:
        now = time.monotonic()
        for slot in self._slots:
            slot.process.start()
            slot.started_at = now
        return self

    def supervise(self) -> RunnerProcesses:
        """Restart dead processes from a background thread until ``stop``."""
        if self._supervisor is None:
            self._supervisor = threading.Thread(target=self._supervise, name="agl-runner-supervisor", daemon=True)
            self._supervisor.start()
        return self

    def _supervise(self) -> None:
        while not self._stopping.wait(self._check_interval_s):
            try:
                self.check()
            except Exception:  # a failed spawn must not end supervision; the next pass retries
                logger.exception("runner supervision pass failed")

    def check(self) -> None:
        """One supervision pass: note deaths, schedule and perform restarts, give up crash loops."""
        now = time.monotonic()
        with self._lock:
            for slot in self._slots:
                if slot.given_up or self._stopping.is_set():
                    continue
                if slot.restart_at is None:
                    if slot.process.exitcode is not None:
                        self._on_death(slot, now)
                elif now >= slot.restart_at:
                    slot.worker_id, self._next_worker_id = self._next_worker_id, self._next_worker_id + 1
                    slot.process = self._process(slot.worker_id)
                    slot.process.start()
                    slot.started_at, slot.restart_at = now, None
                    self._restarts += 1

    def _on_death(self, slot: _Slot, now: float) -> None:
        code = slot.process.exitcode
        self._dead.add(store_worker_id(slot.worker_id))
        if slot.kill_requested:
            slot.kill_requested, slot.restart_at = False, now
            return
        self._last_exitcode = code
        if code == HUNG_EXIT_CODE:
            logger.warning("runner %s exited: hung sync agents held all its slots; restarting it", slot.worker_id)
            slot.restart_at = now
            return
        quick = now - slot.started_at < self._crash_window_s
        slot.quick_crashes = slot.quick_crashes + 1 if quick else 1
        if slot.quick_crashes >= self._max_crashes:
            slot.given_up = True
            logger.error(
                "runner %s exited (code %s) %d times in a row; giving it up", slot.worker_id, code, slot.quick_crashes
            )
            return
        delay = min(self._backoff_s * 2 ** (slot.quick_crashes - 1), self._max_backoff_s)
        slot.restart_at = now + delay
        logger.warning("runner %s exited (code %s); restarting it in %.0fs", slot.worker_id, code, delay)

    def restart(self, worker_id: str) -> None:
        """Kill the process serving store worker ``worker_id`` (a hung agent); ``check`` respawns it.

        A concurrent runner is left alone: it cancels the agent of a rollout that ended in the store
        itself, and exits on its own (``HUNG_EXIT_CODE``) when sync agents that ignore it hold every slot.
        """
        if self._concurrency is not None:
            return
        with self._lock:
            for slot in self._slots:
                if store_worker_id(slot.worker_id) == worker_id and slot.restart_at is None and not slot.given_up:
                    slot.kill_requested = True
                    slot.process.kill()

    @property
    def alive(self) -> int:
        return sum(1 for p in self._processes if p.is_alive())

    @property
    def restarts(self) -> int:
        return self._restarts

    @property
    def given_up(self) -> bool:
        """Every slot crashed too often: no runner is alive and none will restart."""
        return all(slot.given_up for slot in self._slots)

    def dead_workers(self) -> Collection[str]:
        with self._lock:
            return frozenset(self._dead)

    def describe(self) -> str:
        given_up = sum(1 for slot in self._slots if slot.given_up)
        return (
            f"{self.alive} of {len(self._slots)} runner processes alive, {self._restarts} restarts, "
            f"{given_up} given up after {self._max_crashes} quick exits in a row; "
            f"last exit code {self._last_exitcode}"
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask runners to finish their current rollouts and exit; kill those still running after ``timeout_s``.

        One deadline for all: the processes finish in parallel, so n of them take ``timeout_s``, not n times it.
        """
        deadline = time.monotonic() + timeout_s
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(max(0.0, deadline - time.monotonic()))
        for process in self._processes:
            process.stop()
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(1.0)

    def __enter__(self) -> RunnerProcesses:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
