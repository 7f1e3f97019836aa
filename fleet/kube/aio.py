"""Asynchronous reads from a cluster, with the official client's asyncio package
(`kubernetes.aio`): a pod's log followed for as long as the pod runs, from an event loop,
holding no thread (the web server streams it, config/asgi_handler.py).

One ApiClient per cluster and event loop, built from the cluster's kubeconfig (or the in-cluster
service account) as fleet.kube.clusters builds the synchronous one, and rebuilt when the
kubeconfig changes. Its connection pool has no limit of its own: the portal's caps on open
follows (queues.services.log_streams) bound it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import quote

import aiohttp
from kubernetes.aio import client as aio_client
from kubernetes.aio import config as aio_config
from kubernetes.aio.config.config_exception import ConfigException

from fleet.kube.client import REQUEST_RECORDERS, REQUEST_TIMEOUT, USER_AGENT
from fleet.kube.clusters import _cache_key
from fleet.kube.errors import ConfigurationError, TransientError, error_from_response

_clients: dict[tuple, aio_client.ApiClient] = {}


async def _api_client(cluster) -> aio_client.ApiClient:
    loop = asyncio.get_running_loop()
    key = (id(loop), _cache_key(cluster))
    found = _clients.get(key)
    if found is not None:
        return found
    configuration = aio_client.Configuration(connection_pool_maxsize=0)
    configuration.retries = None  # a follow is opened once; the caller says what failed
    try:
        if cluster.in_cluster:
            aio_config.load_incluster_config(client_configuration=configuration)
        else:
            await aio_config.load_kube_config(
                config_file=cluster.kubeconfig_path,
                context=cluster.context or None,
                client_configuration=configuration,
                persist_config=False,
            )
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        raise ConfigurationError(f"Cannot load the cluster configuration: {exc}") from exc
    api = aio_client.ApiClient(configuration=configuration)
    api.user_agent = USER_AGENT
    for stale in [k for k in _clients if k[0] == id(loop) and k[1][0] == cluster.pk]:
        await _clients.pop(stale).close()
    _clients[key] = api
    return api


async def pod_log_follow(
    cluster, namespace: str, name: str, *, tail: int | None = None
) -> AsyncIterator[bytes]:
    """Yield the pod's log as byte chunks until the API server ends the stream (the pod's
    container ended) or the connection breaks. A refusal (the pod is gone, say) raises the
    KubeError the API's answer makes; no answer raises TransientError."""
    api = await _api_client(cluster)
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/log"
    query = [("follow", "true")]
    if tail is not None:
        query.append(("tailLines", str(int(tail))))
    for record in REQUEST_RECORDERS:
        record("GET", path, query, None)
    method, url, headers, _, _ = await api.param_serialize(
        "GET", path, query_params=query, header_params={"Accept": "*/*"},
        auth_settings=["BearerToken"],
    )  # fmt: skip
    # Connecting is bounded as every request is; reading is not (a quiet job writes nothing
    # for a long while): the caller bounds how long a follow may last.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=REQUEST_TIMEOUT[0], sock_read=None)
    try:
        answer = await api.call_api(method, url, header_params=headers, _request_timeout=timeout)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise TransientError(
            f"cannot reach the Kubernetes API at {api.configuration.host}: {exc}",
            reason="Connection",
        ) from exc
    response = answer.response
    try:
        if response.status != 200:
            raise error_from_response(response.status, await response.read())
        async for chunk in response.content.iter_any():
            yield chunk
    except (aiohttp.ClientError, TimeoutError):
        return  # the stream broke: it ends here, as the synchronous follow does
    finally:
        response.close()
