"""The real control plane for tests and local use: etcd, kube-apiserver, controller manager,
scheduler, Kueue, JobSet, the Kubeflow training operator and kwok, built from Go modules
(cluster/build/) and run on loopback (`scripts/real-cluster up|down|status|kubeconfig`)."""
