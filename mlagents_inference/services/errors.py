"""The ways a served request can fail, each carrying its status, as MLServer's errors.py does (Apache-2.0): the REST
status and the gRPC code's name. The data plane (services.dataplane) raises them; each transport maps them once
(dataplane.rest_error for aiohttp, dataplane.grpc_error for grpcio). They are UsageErrors: one line each, as
every refusal of this program."""

from ..core.errors import UsageError

__all__ = ["RequestError", "BadRequest", "Forbidden", "NotFound", "Unavailable", "EngineFailed", "typed"]


class RequestError(UsageError):
    """A request refused or failed: `status` (HTTP) and `code` (the name of its grpc.StatusCode)."""

    status, code = 400, "INVALID_ARGUMENT"


class BadRequest(RequestError):
    """What the request holds does not fit the model or the protocol: 400 / INVALID_ARGUMENT."""


class Forbidden(RequestError):
    """A call this server was not started to answer (the repository API without --allow-model-control): 403 /
    PERMISSION_DENIED."""

    status, code = 403, "PERMISSION_DENIED"


class NotFound(RequestError):
    """An unknown model or version: 404 / NOT_FOUND."""

    status, code = 404, "NOT_FOUND"


class Unavailable(RequestError):
    """The server is stopping (or cannot take the request now): 503 / UNAVAILABLE."""

    status, code = 503, "UNAVAILABLE"


class EngineFailed(RequestError):
    """The engine failed on the request (out of memory, a runtime's own error): 500 / INTERNAL."""

    status, code = 500, "INTERNAL"


def typed(exc: UsageError) -> RequestError:
    """`exc` as a RequestError: a plain UsageError (a check's refusal) is a BadRequest."""
    return exc if isinstance(exc, RequestError) else BadRequest(str(exc))
