"""``palacectl ui``: the dashboard, a local web window onto the palace for the people who run it.

A client of the local daemon like the CLI (it never opens the database): an ASGI application
served by hypercorn's trio worker on 127.0.0.1, behind a per-run secret.

Modules, in the order they depend on each other:

* ``security``: the secret, the cookie, the CSRF token, the Host and Origin checks (pure);
* ``http``: the few ASGI request and response helpers the app needs (no framework);
* ``sse``: the MemPalace-compatible ``/logstream/stream`` (its filters, frames and cap);
* ``views``: what a page's answer is gathered with (``Views``, ``gather``) and the shape of a
  feature's route (``Route``);
* ``app``: routes, the gate every request passes, static files, the page with the features' nav
  entries and scripts;
* ``server``: the listening socket, hypercorn, ``ui.json``, the browser.

The pages are the features' (``Feature.ui``, ``Feature.script``, ``Feature.pages``: each in its
feature's package); this package is the frame and names none. Never imports palaced (palacectl
never does); the frame's page is in ``static/`` (no build step, nothing fetched from the
internet).
"""
