"""The model in torch: ML-Agents' encoders and networks under their own attribute names (the checkpoint's
keys), and the export as ML-Agents' ModelSerializer does it."""

__all__ = []
