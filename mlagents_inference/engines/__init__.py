"""Engines and devices: which device and execution providers a --device means (devices, torch-free), torch's
devices (torch_devices), the two engines over the same modules (torch_engine, onnx_engine) and the one factory
that chooses and builds them (factory, torch-free until it builds a torch engine)."""

__all__ = []
