"""palacectl: the command line and (later) MCP adapter for talking to the local palaced.

Layers: palace_proto → client (sync socket client) → output / watch → cli (typer commands).
Never imports palaced; speaks only the protocol in palace_proto.
"""
