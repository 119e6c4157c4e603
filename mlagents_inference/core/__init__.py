"""The torch-free core: the behaviour spec, observations as arrays, --obs words and files, model sources, the
ONNX reader, onnxruntime sessions, files and signals, numbers as text, errors. Imports no torch."""

__all__ = []
