"""A rig for driving the real agent harnesses (Claude Code, Codex, Gemini CLI, OpenCode) with a
scripted model, offline: each harness is configured from the README's own blocks, runs headless in
a network namespace with loopback only, and talks to a model server on that loopback that speaks
its provider's API and replays a script of palace tool calls, recording every request.

Modules, pure first: ``sse`` (event-stream framing), ``script`` (steps, outcomes, tool-name
matching), ``dialects`` (the four provider APIs), ``readme`` (the README's harness blocks); then
``server`` (the HTTP model server), ``netns`` (namespaces), ``install`` (npm, the ``harnesses``
fixture) and ``launchers`` (each harness's configuration and headless run). It imports palacectl
only for its hook table, never palaced.
"""
