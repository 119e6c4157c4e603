"""Loaders: a policy from a checkpoint (checkpoint), from an ML-Agents ONNX alone rebuilt as modules
(onnx_alone), or as the ML-Agents ONNX file itself (onnx_file, torch-free); policy_files picks among them."""

__all__ = []
