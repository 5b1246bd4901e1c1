"""Doors: the approval step for agents the runtime does not drive. Each door is a thin adapter over the one
:class:`~dial_runtime.doors.gate.Gate` (a call made a proposal, waited on, its outcome handed back once):
:mod:`dial_runtime.doors.mcp_server` serves it over MCP (``dial-runtime mcp``, the ``mcp`` extra)."""
