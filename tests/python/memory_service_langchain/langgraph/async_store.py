"""Async LangGraph BaseStore implementation backed by the Memory Service REST API."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable

import httpx

logger = logging.getLogger(__name__)
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from .indexing import IndexBuilder, IndexRedactor, build_index_payload
from .transport import (
    httpx_async_client_kwargs,
    resolve_env_config,
    resolve_rest_base_url,
    resolve_unix_socket,
)


class AsyncMemoryServiceStore(BaseStore):
    """Async LangGraph BaseStore backed by the Memory Service episodic API.

    Use explicit constructor arguments, or `from_env()` for env-based setup.
    """

    def __init__(
        self,
        *,
        base_url: str,
        token: str,
        unix_socket: str | None = None,
        timeout: float = 10.0,
        index_builder: IndexBuilder | None = None,
        index_redactor: IndexRedactor | None = None,
    ) -> None:
        self._unix_socket = resolve_unix_socket(unix_socket)
        self._base_url = resolve_rest_base_url(base_url, self._unix_socket)
        self._token = token
        if index_builder is not None and index_redactor is not None:
            raise ValueError("index_builder and index_redactor are mutually exclusive")
        async def _log_request(request: httpx.Request) -> None:
            logger.debug("memory-service request: %s %s", request.method, request.url)

        self._client = httpx.AsyncClient(
            **httpx_async_client_kwargs(
                base_url=self._base_url,
                unix_socket=self._unix_socket,
                timeout=timeout,
            ),
            headers={"Authorization": f"Bearer {self._token}"} if self._token else {},
            event_hooks={"request": [_log_request]},
        )
        if index_builder is not None:
            self._index_builder = index_builder
        else:
            self._index_builder = lambda namespace, key, value, index: build_index_payload(
                namespace, key, value, index, redactor=index_redactor
            )

    @classmethod
    def from_env(cls, **overrides: Any) -> "AsyncMemoryServiceStore":
        config = resolve_env_config()
        config.update(overrides)
        return cls(**config)

    # ------------------------------------------------------------------
    # BaseStore interface — the only two abstract methods in langgraph 1.x
    # ------------------------------------------------------------------

    async def abatch(self, ops: Iterable[GetOp | SearchOp | PutOp | ListNamespacesOp]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._aget(op.namespace, op.key))
            elif isinstance(op, PutOp):
                if op.value is None:
                    await self._adelete(op.namespace, op.key)
                else:
                    await self._aput(op.namespace, op.key, op.value, op.index)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(
                    await self._asearch(
                        op.namespace_prefix,
                        query=op.query,
                        filter=op.filter,
                        limit=op.limit,
                        offset=op.offset,
                    )
                )
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._alist_namespaces(op))
            else:
                results.append(None)
        return results

    def batch(self, ops: Iterable[GetOp | SearchOp | PutOp | ListNamespacesOp]) -> list[Result]:
        return asyncio.get_event_loop().run_until_complete(self.abatch(ops))

    # ------------------------------------------------------------------
    # Private async helpers (HTTP calls)
    # ------------------------------------------------------------------

    async def _aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        index: bool | list[str] | None = None,
    ) -> None:
        body: dict[str, Any] = {
            "namespace": list(namespace),
            "key": key,
            "value": value,
        }
        built_index = self._index_builder(namespace, key, value, index)
        if built_index is not None:
            body["index"] = built_index

        resp = await self._client.put("/v1/memories", json=body)
        resp.raise_for_status()

    async def _aget(self, namespace: tuple[str, ...], key: str) -> Item | None:
        params = _ns_params(namespace)
        params.append(("key", key))
        resp = await self._client.get("/v1/memories", params=params)
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        return _to_item(resp.json())

    async def _adelete(self, namespace: tuple[str, ...], key: str) -> None:
        params = _ns_params(namespace)
        params.append(("key", key))
        resp = await self._client.delete("/v1/memories", params=params)
        if resp.status_code == 404:
            return
        resp.raise_for_status()

    async def _asearch(
        self,
        namespace_prefix: tuple[str, ...],
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[SearchItem]:
        if offset:
            raise ValueError("Memory Service memory search does not support offset pagination")
        body: dict[str, Any] = {
            "namespace_prefix": list(namespace_prefix),
            "limit": min(limit, 100),
        }
        if query:
            body["query"] = query
        if filter:
            body["filter"] = filter

        resp = await self._client.post("/v1/memories/search", json=body)
        resp.raise_for_status()
        return [_to_search_item(item) for item in resp.json().get("items", [])]

    async def _alist_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        params: list[tuple[str, str]] = []
        if op.match_conditions:
            for cond in op.match_conditions:
                for seg in cond.path:
                    if seg == "*":
                        break
                    params.append((cond.match_type, seg))
        if op.max_depth is not None:
            params.append(("max_depth", str(op.max_depth)))

        resp = await self._client.get("/v1/memories/namespaces", params=params)
        resp.raise_for_status()
        return [tuple(ns) for ns in resp.json().get("namespaces", [])]

    # ------------------------------------------------------------------
    # Async context manager
    # ------------------------------------------------------------------

    async def __aenter__(self) -> "AsyncMemoryServiceStore":
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self._client.aclose()


def _ns_params(namespace: tuple[str, ...]) -> list[tuple[str, str]]:
    return [("ns", seg) for seg in namespace]


def _to_item(data: dict[str, Any]) -> Item:
    return Item(
        namespace=tuple(data["namespace"]),
        key=data["key"],
        value=data.get("value", {}),
        created_at=data.get("createdAt"),
        updated_at=data.get("createdAt"),
    )


def _to_search_item(data: dict[str, Any]) -> SearchItem:
    return SearchItem(
        namespace=tuple(data["namespace"]),
        key=data["key"],
        value=data.get("value", {}),
        created_at=data.get("createdAt"),
        updated_at=data.get("createdAt"),
        score=data.get("score"),
    )
