"""`mirror serve`: the same engine behind a small ASGI app, with a scheduler, webhooks and job records."""
