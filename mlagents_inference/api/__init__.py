"""The policy API: load() and Policy, and the contract that Policy and connect()'s RemotePolicy both honour."""

__all__ = []
