"""Domains that live elsewhere: an MCP server's tools as a domain (:mod:`.mcp`, the ``mcp`` extra) and an HTTP
service's (:mod:`.http`)."""
