"""serve: the stream's JSON lines over TCP or a Unix socket, the lines waiting on every connection answered together
(docs/serve.md). Placeholder while it is built: refused in one line."""
from .context import Context
from .errors import UsageError


def mode_serve(ctx: Context):
    if ctx.args.ray:  # (issue 27 item 5: Ray Serve; reconciled with the socket server at merge)
        from .ray_serve import serve_on_ray
        return serve_on_ray(ctx)
    raise UsageError("--mode serve is not built yet")
