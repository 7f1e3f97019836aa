"""Renderers of the Kubernetes objects queues manages: pure functions, model to dict."""
