"""Agent-lightning runners: the processes that execute the user's agent, and the Python environment they run in.

Provides ``ports.runner_pool.RunnerPool`` (``processes.RunnerProcesses``). This is the part of the project an
agent's own Python environment needs (``scripts/runner-requirements.txt``): runner processes start as
``python -m adapters.runner.entry`` (standard library only until they are tied to their parent; ``protocol``:
what parent and child say on the pipe), run a ``concurrent_runner.ConcurrentRunner`` or Agent-lightning's
``LitAgentRunner``, and reach the store through ``adapters.agl``'s clients. ``agent_env`` builds such an
environment (standard library only), ``probe`` reports what one has and ``env_check`` judges the report;
``pdeathsig_hook`` is the start-up hook such an environment gets (forked children end with their parent).
"""
