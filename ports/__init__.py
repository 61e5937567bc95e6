"""What the application needs from the outside world, as small typed Protocols.

Ports import only ``domain``; no agentlightning, tinker or torch type appears in a signature here.
"""
