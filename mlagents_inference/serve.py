"""serve: the stream's JSON lines over TCP or a Unix socket, the lines waiting on every connection answered together
(docs/serve.md). Placeholder while it is built: refused in one line."""
from .context import Context
from .errors import UsageError


def mode_serve(ctx: Context):
    raise UsageError("--mode serve is not built yet")
