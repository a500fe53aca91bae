"""``palacectl ui``: the dashboard, a local web window onto the palace for the people who run it.

A client of the local daemon like the CLI (it never opens the database): an ASGI application
served by hypercorn's trio worker on 127.0.0.1, behind a per-run secret.

Modules, in the order they depend on each other:

* ``security``: the secret, the cookie, the CSRF token, the Host and Origin checks (pure);
* ``http``: the few ASGI request and response helpers the app needs (no framework);
* ``sse``: the MemPalace-compatible ``/logstream/stream`` (its filters, frames and cap);
* ``views``: what each page shows, gathered from the daemon's operations;
* ``app``: routes, the gate every request passes, static files;
* ``server``: the listening socket, hypercorn, ``ui.json``, the browser.

Never imports palaced (palacectl never does); the page itself is in ``static/`` (no build step,
nothing fetched from the internet).
"""
