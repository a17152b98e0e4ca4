"""The operator's informers are the backend's (``sandbox.backends.kubernetes.informer``): one list + watch cache for
the pods (the backend's pod cache, which the health pass and reconciliation read) and the custom objects alike."""

from sandbox.backends.kubernetes.informer import BACKOFF_S, Change, Informer, newer, stripped

__all__ = ["BACKOFF_S", "Change", "Informer", "newer", "stripped"]
