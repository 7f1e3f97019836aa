"""Imported at start-up by every Python process started with this directory on PYTHONPATH: the
least-privilege tests start the portal's processes (web, worker, beat, the migration Job's) this
way, each as in its pod. There the official client's in-cluster configuration reads the pod's
ServiceAccount token and the cluster's CA from /var/run/secrets/kubernetes.io/serviceaccount,
which a test cannot write; here from QM_TEST_SERVICE_ACCOUNT (a directory with `ca.crt` and,
for a pod that mounts one, `token`). The API server's address comes, as in a pod, from
KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT."""

import os

_directory = os.environ.get("QM_TEST_SERVICE_ACCOUNT")
if _directory:
    from kubernetes.aio.config import incluster_config as _aio_incluster
    from kubernetes.config import incluster_config as _incluster

    for _module in (_incluster, _aio_incluster):
        _module.SERVICE_TOKEN_FILENAME = os.path.join(_directory, "token")
        _module.SERVICE_CERT_FILENAME = os.path.join(_directory, "ca.crt")
