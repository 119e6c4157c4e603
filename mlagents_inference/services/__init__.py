"""What the front-ends share: the line protocol (protocol), Ray support (ray_support), the run context of one command
(context), the Open Inference Protocol's codecs (open_inference) and, built on them, its data plane (dataplane), the
typed errors of a served request (errors), the batcher (batcher) and what the serve fronts share (serve_common)."""

__all__ = []
