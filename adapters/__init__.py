"""How each outside system (Agent-lightning, Tinker, tinker-cookbook, PyTorch) provides the ports.

One subpackage per system, each saying in its ``__init__.py`` which system it binds and which ports it
provides: ``agl``, ``runner``, ``langchain``, ``endpoint``, ``tinker``, ``cookbook``, ``local``, ``files``.
Package ``__init__`` files stay light (``local`` aside): ``python -m adapters.runner.entry`` imports them first.
"""
