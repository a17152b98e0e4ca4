"""Instances as pods on a Kubernetes cluster (see backend.py). Only this package imports kubernetes_asyncio."""
