"""Runners for the hello agent, started the Agent-lightning way (the original's ``runner`` mode).

``python -m examples.hello.run_runners --store http://127.0.0.1:4747 -n 2``: an ``agl.Trainer`` in
role ``runner`` attached to a store that ``agl-tinker store`` (or ``agl store``) serves; a training
started elsewhere (``agl-tinker train store_url=... n_runners=0``) puts rollouts there. Ctrl-C stops.
"""

from __future__ import annotations

import argparse
import os
from urllib.parse import urlsplit

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("AGENTOPS_LOG_LEVEL", "ERROR")

import agentlightning as agl

from app.faces.agl_algorithm import end_forked_children_with_this_process
from examples.hello.hello import hello


def cli() -> None:
    parser = argparse.ArgumentParser(description="Run hello runners against a store.")
    parser.add_argument("--store", default="http://127.0.0.1:4747")
    parser.add_argument("-n", type=int, default=2, help="runner processes")
    args = parser.parse_args()
    url = urlsplit(args.store)
    end_forked_children_with_this_process()  # a SIGTERM or SIGKILL of this process ends its runners too
    strategy = agl.ClientServerExecutionStrategy(
        role="runner", server_host=url.hostname, server_port=url.port, n_runners=args.n
    )
    trainer = agl.Trainer(
        store=agl.LightningStoreClient(args.store),
        strategy=strategy,
        n_runners=args.n,
        runner=agl.LitAgentRunner(tracer=agl.AgentOpsTracer(), poll_interval=0.05),
    )
    trainer.fit(hello)


if __name__ == "__main__":
    cli()
