"""palacectl: the command line and the MCP adapter for talking to the local palaced.

Layers: palace_proto → client (sync socket client; aclient for the MCP adapter) → output / files /
watch / rules / service → cli (common → command modules → root). Never imports palaced; speaks
only the protocol in palace_proto.
"""
