"""kubesim: a simulated GPU cluster speaking the Kubernetes API, for demos, tests, benchmarks."""
