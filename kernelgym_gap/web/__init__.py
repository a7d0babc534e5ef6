"""The leaderboard: an ASGI app (Starlette, Jinja2 templates, server-side SVG) over the results store.

`board` (ranking queries) and `chart` (the E-vs-U screening chart) import nothing from the web stack, so
the CLI can print rankings without it; `app.create_app` builds the server, which only validates, queues and
reads; `worker` is the separate process that evaluates queued submissions (each in the engine's sandboxed
child: neither process imports submitted code).
"""
