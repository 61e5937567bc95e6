"""LangChain and LangGraph: their runs as OpenTelemetry spans that name the agent of each LLM call.

Provides no port: the runners' tracer uses it (``tracing``) where LangChain is installed, so that
``agent_match`` tells a LangGraph graph's nodes apart. Importing it imports nothing of LangChain.
"""
