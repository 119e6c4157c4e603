"""The front-ends, independent of each other: the command line (cli) dispatches by name to the modes (show,
verify, export_onnx, batch, benchmark, stream, serve, ray_serve); remote is the client of serve."""

__all__ = []
