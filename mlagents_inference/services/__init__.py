"""What the front-ends share, independent of each other: the line protocol (protocol), Ray support
(ray_support) and the run context of one command (context)."""

__all__ = []
