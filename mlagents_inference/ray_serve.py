"""serve --ray: Ray Serve replicas behind Ray Serve's HTTP ingress (docs/serve.md). Placeholder while it is built."""
from .errors import UsageError


def serve_on_ray(ctx) -> None:
    raise UsageError("--mode serve --ray is not built yet")
