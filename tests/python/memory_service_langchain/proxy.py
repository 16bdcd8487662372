from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any, Callable
from urllib.parse import quote

import httpx
from fastapi import Response
from fastapi.responses import JSONResponse, PlainTextResponse

from .request_context import get_request_authorization, memory_service_headers, memory_service_request
from .transport import httpx_async_client_kwargs, resolve_env_config, resolve_rest_base_url, resolve_unix_socket


def to_fastapi_response(response: httpx.Response) -> Response:
    passthrough_headers = {}
    for header_name in (
        "cache-control",
        "content-disposition",
        "etag",
        "expires",
        "last-modified",
        "location",
        "pragma",
    ):
        header_value = response.headers.get(header_name)
        if header_value is not None:
            passthrough_headers[header_name] = header_value

    content_type = response.headers.get("content-type", "")
    if "application/json" in content_type:
        return JSONResponse(
            response.json(),
            status_code=response.status_code,
            headers=passthrough_headers,
        )

    media_type = content_type.split(";", 1)[0] if content_type else None
    if media_type and media_type.startswith("text/"):
        return PlainTextResponse(
            response.text,
            status_code=response.status_code,
            headers=passthrough_headers,
            media_type=media_type,
        )
    return Response(
        content=response.content,
        status_code=response.status_code,
        media_type=media_type,
        headers=passthrough_headers,
    )


class MemoryServiceProxy:
    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        unix_socket: str | None = None,
        authorization_getter: Callable[[], str | None] | None = None,
    ):
        self.unix_socket = resolve_unix_socket(unix_socket)
        self.base_url = resolve_rest_base_url(base_url, self.unix_socket)
        self.api_key = api_key
        self.authorization_getter = authorization_getter or get_request_authorization

    @classmethod
    def from_env(cls, **overrides: Any) -> "MemoryServiceProxy":
        config = resolve_env_config()
        config.update(overrides)
        return cls(**config)

    @staticmethod
    def _compact_params(params: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in params.items() if v is not None}

    @staticmethod
    def _path(value: str) -> str:
        return quote(value, safe="")

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json_body: Any | None = None,
        content: bytes | str | None = None,
        data: dict[str, Any] | None = None,
        files: dict[str, Any] | None = None,
        include_api_key: bool = True,
        include_authorization: bool = True,
        extra_headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        return await memory_service_request(
            method,
            path,
            params=params,
            json_body=json_body,
            content=content,
            data=data,
            files=files,
            base_url=self.base_url,
            unix_socket=self.unix_socket,
            api_key=self.api_key,
            authorization_getter=self.authorization_getter,
            include_api_key=include_api_key,
            include_authorization=include_authorization,
            extra_headers=extra_headers,
        )

    async def list_conversations(
        self,
        *,
        mode: str | None = None,
        after_cursor: str | None = None,
        limit: int | None = None,
        query: str | None = None,
        archived: str | None = None,
    ) -> httpx.Response:
        return await self._request(
            "GET",
            "/v1/conversations",
            params=self._compact_params(
                {
                    "mode": mode,
                    "afterCursor": after_cursor,
                    "limit": limit,
                    "query": query,
                    "archived": archived,
                }
            ),
        )

    async def get_conversation(self, conversation_id: str) -> httpx.Response:
        return await self._request("GET", f"/v1/conversations/{self._path(conversation_id)}")

    async def create_conversation(self, payload: dict[str, Any]) -> httpx.Response:
        return await self._request(
            "POST",
            "/v1/conversations",
            json_body=payload,
        )

    async def ensure_conversation(self, conversation_id: str, title: str) -> None:
        response = await self.create_conversation({"id": conversation_id, "title": title})
        if response.status_code in (200, 201):
            return
        if response.status_code == 409:
            return
        body = response.text.lower()
        if "duplicate key value violates unique constraint" in body and "conversation_groups_pkey" in body:
            return
        if response.status_code >= 400:
            response.raise_for_status()

    async def update_conversation(self, conversation_id: str, payload: dict[str, Any]) -> httpx.Response:
        return await self._request(
            "PATCH",
            f"/v1/conversations/{self._path(conversation_id)}",
            json_body=payload,
        )

    async def delete_conversation(self, conversation_id: str) -> httpx.Response:
        return await self._request(
            "PATCH",
            f"/v1/conversations/{self._path(conversation_id)}",
            json_body={"archived": True},
        )

    async def list_conversation_entries(
        self,
        conversation_id: str,
        *,
        after_cursor: str | None = None,
        limit: int | None = None,
        channel: str | None = None,
        epoch: str | None = None,
        forks: str | None = None,
    ) -> httpx.Response:
        return await self._request(
            "GET",
            f"/v1/conversations/{self._path(conversation_id)}/entries",
            params=self._compact_params(
                {
                    "afterCursor": after_cursor,
                    "limit": limit,
                    "channel": channel,
                    "epoch": epoch,
                    "forks": forks,
                }
            ),
        )

    async def list_conversation_forks(
        self,
        conversation_id: str,
    ) -> httpx.Response:
        return await self._request(
            "GET",
            f"/v1/conversations/{self._path(conversation_id)}/forks",
        )

    async def search_conversations(self, payload: dict[str, Any]) -> httpx.Response:
        return await self._request(
            "POST",
            "/v1/conversations/search",
            json_body=payload,
        )

    async def list_memberships(self, conversation_id: str) -> httpx.Response:
        return await self._request(
            "GET",
            f"/v1/conversations/{self._path(conversation_id)}/memberships",
        )

    async def create_membership(self, conversation_id: str, payload: dict[str, Any]) -> httpx.Response:
        return await self._request(
            "POST",
            f"/v1/conversations/{self._path(conversation_id)}/memberships",
            json_body=payload,
        )

    async def update_membership(
        self,
        conversation_id: str,
        user_id: str,
        payload: dict[str, Any],
    ) -> httpx.Response:
        return await self._request(
            "PATCH",
            f"/v1/conversations/{self._path(conversation_id)}/memberships/{self._path(user_id)}",
            json_body=payload,
        )

    async def delete_membership(self, conversation_id: str, user_id: str) -> httpx.Response:
        return await self._request(
            "DELETE",
            f"/v1/conversations/{self._path(conversation_id)}/memberships/{self._path(user_id)}",
        )

    async def list_ownership_transfers(
        self,
        *,
        role: str | None = None,
        after_cursor: str | None = None,
        limit: int | None = None,
    ) -> httpx.Response:
        return await self._request(
            "GET",
            "/v1/ownership-transfers",
            params=self._compact_params(
                {
                    "role": role,
                    "afterCursor": after_cursor,
                    "limit": limit,
                }
            ),
        )

    async def create_ownership_transfer(self, payload: dict[str, Any]) -> httpx.Response:
        return await self._request(
            "POST",
            "/v1/ownership-transfers",
            json_body=payload,
        )

    async def accept_ownership_transfer(self, transfer_id: str) -> httpx.Response:
        return await self._request(
            "POST",
            f"/v1/ownership-transfers/{transfer_id}/accept",
        )

    async def delete_ownership_transfer(self, transfer_id: str) -> httpx.Response:
        return await self._request(
            "DELETE",
            f"/v1/ownership-transfers/{transfer_id}",
        )

    async def get_ownership_transfer(self, transfer_id: str) -> httpx.Response:
        return await self._request(
            "GET",
            f"/v1/ownership-transfers/{transfer_id}",
        )

    async def cancel_response(self, conversation_id: str) -> httpx.Response:
        return await self._request(
            "DELETE",
            f"/v1/conversations/{self._path(conversation_id)}/response",
        )

    async def index_conversations(self, payload: list[dict[str, Any]]) -> httpx.Response:
        return await self._request(
            "POST",
            "/v1/conversations/index",
            json_body=payload,
        )

    async def upload_attachment(
        self,
        *,
        file_name: str,
        file_bytes: bytes,
        content_type: str = "application/octet-stream",
        expires_in: str | None = None,
    ) -> httpx.Response:
        return await self._request(
            "POST",
            "/v1/attachments",
            params=self._compact_params({"expiresIn": expires_in}),
            files={
                "file": (file_name, file_bytes, content_type),
            },
        )

    async def create_attachment_from_url(self, payload: dict[str, Any]) -> httpx.Response:
        return await self._request(
            "POST",
            "/v1/attachments",
            json_body=payload,
        )

    async def get_attachment(
        self, attachment_id: str, disposition: str | None = None
    ) -> httpx.Response:
        return await self._request(
            "GET",
            f"/v1/attachments/{attachment_id}",
            params=self._compact_params({"disposition": disposition}),
        )

    async def get_attachment_download_url(
        self, attachment_id: str, disposition: str | None = None
    ) -> httpx.Response:
        return await self._request(
            "GET",
            f"/v1/attachments/{attachment_id}/download-url",
            params=self._compact_params({"disposition": disposition}),
        )

    async def delete_attachment(self, attachment_id: str) -> httpx.Response:
        return await self._request("DELETE", f"/v1/attachments/{attachment_id}")

    async def download_attachment_by_token(
        self, token: str, filename: str, disposition: str | None = None
    ) -> httpx.Response:
        return await self._request(
            "GET",
            f"/v1/attachments/download/{token}/{filename}",
            params=self._compact_params({"disposition": disposition}),
            include_api_key=False,
            include_authorization=False,
        )

    async def stream_events(
        self, *, kinds: str | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Stream real-time event notifications from the memory service.

        Yields parsed event dicts with ``event``, ``kind``, and ``data`` keys.
        """
        params = self._compact_params({"kinds": kinds}) if kinds else None
        headers = memory_service_headers(
            api_key=self.api_key,
            authorization_getter=self.authorization_getter,
            extra_headers={"Accept": "text/event-stream"},
        )
        async with httpx.AsyncClient(
            **httpx_async_client_kwargs(
                base_url=self.base_url,
                unix_socket=self.unix_socket,
                timeout=None,
            )
        ) as client:
            async with client.stream(
                "GET", "/v1/events", params=params, headers=headers
            ) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        try:
                            yield json.loads(line[6:])
                        except json.JSONDecodeError:
                            pass
