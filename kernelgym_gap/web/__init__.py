"""The leaderboard: an ASGI app (Starlette, Jinja2 templates, server-side SVG) over the results store.

`board` (ranking queries) and `chart` (the E-vs-U screening chart) import nothing from the web stack, so
the CLI can print rankings without it; `app.create_app` builds the server and `worker` evaluates queued
submissions in background threads of the server process (each evaluation in the engine's sandboxed
child: the server never imports submitted code).
"""
