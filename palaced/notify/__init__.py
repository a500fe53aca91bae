"""Notifications out (issue 28, part 3): palace tells a person when something needs them.

The package, in the order things flow:

* ``settings``: the ``[notify]`` section of ``config.toml`` (pure; config.py calls it);
* ``triggers``: which committed events (and forks) are a *thing* for which person (pure);
* ``payloads``: one grouped message, and its shape for each channel (pure);
* ``dispatch``: the sans-IO core — grouping, rate limit, retries with back-off, bounds; every
  entry point takes ``now``;
* ``channels``: the deliverers (a desktop notification, a webhook, SMTP mail), the only IO;
* ``notifier``: the trio task that follows the event bus and drives the core.

This ``__init__`` imports nothing, so config.py can read the settings without pulling trio in.
Must not import: ``palaced.api``, ``palaced.app`` or ``palaced.handlers``.
"""
