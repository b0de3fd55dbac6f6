"""An object store that fails: HTTP 500s, 503 SlowDowns, a cut or shortened body, a server
that never answers or stalls mid-body, an endpoint nobody listens on, a missing bucket,
missing credentials, options the client refuses.

The store is a real S3-compatible server (moto) on 127.0.0.1 behind a small HTTP proxy
that injects each fault into the real responses s3fs receives. What is guaranteed: every
failure is a typed error naming the object (``ReadError`` for the transport, ``FormatError``
for a missing dataset, ``ConfigError`` for bad options), never botocore's or aiohttp's own
exception types, and a server that stops answering ends in an error, not a hang.
Starting the server takes seconds, so the cases that need it are ``slow``.
"""

from __future__ import annotations

import http.client
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

import feedline
from feedline.errors import ConfigError, FormatError, ReadError

BUCKET = "faults"


_STATUS = {"403": ("SignatureDoesNotMatch", []), "404": ("NoSuchKey", []),
           "429": ("SlowDown", [("Retry-After", "1")]), "416": ("InvalidRange", [])}


class FaultProxy:
    """Forwards HTTP to ``upstream``; requests whose path contains ``only`` get ``mode``:
    ``"500"`` or ``"503"`` (S3's SlowDown; both for the first ``times`` requests), ``"cut"``
    (Content-Length promised, half the body sent, connection closed), ``"stall"`` (half
    the body sent, then nothing), ``"short"`` (a shorter body, consistently framed),
    ``"silent"`` (never answers), ``"slow"`` (answers after ``delay`` seconds, for the
    first ``times`` requests), ``"trickle"`` (the body 64 bytes every 0.1 s) or
    ``"underlong"`` (a Content-Length of half the body, then the whole body)."""

    extra_modes = ("403", "404", "429", "416", "ranges-ignored", "flip", "html-200")
    """Round 13 (``sweep_round13``): a status with S3's error body (403: wrong credentials,
    404, 429 with Retry-After, 416), ``Range`` dropped on the way (the whole object comes
    back, status 200), a byte of each body flipped, an HTML page with status 200."""

    def __init__(self, upstream: str) -> None:
        parsed = urlparse(upstream)
        self.upstream = (str(parsed.hostname), int(parsed.port or 80))
        self.mode, self.only = "pass", ""
        self.hits, self.times = 0, 1 << 30  # "500", "503", "slow": the first `times` matching requests
        self.delay = 0.0
        self.release = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def handle_one(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fault = proxy.mode if proxy.mode != "pass" and proxy.only in self.path else "pass"
                if fault == "silent":
                    proxy.release.wait(60)
                    self.close_connection = True
                    return
                if fault in ("500", "503", "slow", *_STATUS):
                    proxy.hits += 1
                    fault = fault if proxy.hits <= proxy.times else "pass"
                if fault in _STATUS:
                    code, headers = _STATUS[fault]
                    self.reply(int(fault), b"" if self.command == "HEAD" else
                               b"<Error><Code>%s</Code><Message>injected</Message></Error>" % code.encode(),
                               headers)
                    return
                if fault == "slow":
                    proxy.release.wait(proxy.delay)
                if fault == "500":
                    self.reply(500, b"<Error><Code>InternalError</Code><Message>injected</Message></Error>")
                    return
                if fault == "503":
                    self.reply(503, b"" if self.command == "HEAD" else
                               b"<Error><Code>SlowDown</Code><Message>Please reduce your request "
                               b"rate.</Message></Error>")
                    return
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                sent = {k: v for k, v in self.headers.items() if fault != "ranges-ignored" or k.lower() != "range"}
                conn.request(self.command, self.path, body=body, headers=sent)
                res = conn.getresponse()
                data = res.read()
                if fault == "flip" and self.command == "GET" and data:
                    data = data[: len(data) // 2] + bytes([data[len(data) // 2] ^ 0x40]) + data[len(data) // 2 + 1:]
                elif fault == "html-200" and self.command == "GET":
                    self.reply(200, b"<html><body>Please sign in to the guest network</body></html>",
                               [("Content-Type", "text/html")])
                    return
                headers = [(k, v) for k, v in res.getheaders()
                           if k.lower() not in ("content-length", "transfer-encoding", "connection")]
                if self.command == "HEAD":
                    self.reply(res.status, b"", headers, length=res.getheader("Content-Length") or "0")
                elif fault == "stall" and len(data) > 1:  # half the body, then nothing
                    self.reply(res.status, data[: len(data) // 2], headers, length=str(len(data)),
                               flush=True)
                    proxy.release.wait(60)
                    self.close_connection = True
                elif fault == "cut" and len(data) > 1:
                    self.reply(res.status, data[: len(data) // 2], headers, length=str(len(data)))
                    self.close_connection = True
                elif fault == "short" and len(data) > 1:
                    self.reply(res.status, data[: len(data) // 2], headers)
                elif fault == "trickle":
                    self.reply(res.status, b"", headers, length=str(len(data)), flush=True)
                    for at in range(0, len(data), 64):
                        if proxy.release.wait(0.1):
                            break
                        self.wfile.write(data[at:at + 64])
                        self.wfile.flush()
                elif fault == "underlong" and len(data) > 1:
                    self.reply(res.status, data, headers, length=str(len(data) // 2))
                else:
                    self.reply(res.status, data, headers)

            def reply(self, status: int, data: bytes, headers: list[tuple[str, str]] = (),  # type: ignore[assignment]
                      length: str | None = None, flush: bool = False) -> None:
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", length if length is not None else str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                if flush:
                    self.wfile.flush()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = handle_one

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up: expected
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def start_store(root: Path) -> tuple[FaultProxy, dict[str, Any], Any, Callable[[], None]]:
    """A small packed dataset at s3://faults/ds on a moto server behind a FaultProxy:
    (proxy, storage_options through it, an s3fs file system straight to the server, stop)."""
    import s3fs
    from moto.server import ThreadedMotoServer

    from feedline.format import pack

    (root / "src").mkdir()
    for i in range(6):
        (root / "src" / f"s{i}.bin").write_bytes(os.urandom(5000))
    pack(root / "src", root / "ds", shard_size=12 << 10)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    direct = s3fs.S3FileSystem(endpoint_url=f"http://{host}:{port}", key="k", secret="s",
                               skip_instance_cache=True)
    direct.mkdir(BUCKET)
    for name in sorted(os.listdir(root / "ds"), key=lambda n: n == "manifest.json"):
        direct.put_file(str(root / "ds" / name), f"{BUCKET}/ds/{name}")
    proxy = FaultProxy(f"http://{host}:{port}")
    # one short read timeout and no client retries keep the failing cases fast
    options = {"endpoint_url": proxy.url, "key": "k", "secret": "s", "skip_instance_cache": True,
               "config_kwargs": {"read_timeout": 2, "connect_timeout": 2, "retries": {"max_attempts": 1}}}

    def stop() -> None:
        proxy.close()
        server.stop()

    return proxy, options, direct, stop


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FaultProxy, dict[str, Any]]]:
    """(proxy, storage_options) with a small packed dataset uploaded at s3://faults/ds."""
    proxy, options, _, stop = start_store(tmp_path_factory.mktemp("remote"))
    try:
        yield proxy, options
    finally:
        stop()


@pytest.fixture
def proxy(store: tuple[FaultProxy, dict[str, Any]]) -> Iterator[FaultProxy]:
    yield store[0]
    store[0].mode, store[0].only = "pass", ""
    store[0].hits, store[0].times = 0, 1 << 30


def _open(options: dict[str, Any], prefix: str = "ds") -> feedline.io.PackedDataset:
    return feedline.open_dataset(f"s3://{BUCKET}/{prefix}", storage_options=options)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_healthy_store_through_the_proxy(store: tuple[FaultProxy, dict[str, Any]]) -> None:
    ds = _open(store[1])
    assert len(ds) == 6 and len(ds.read_many(range(6))) == 6


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["500", "cut", "short"])
@pytest.mark.parametrize("target", ["manifest.json", ".idx", ".tar"])
def test_a_failing_store_is_a_read_error_naming_the_object(store: tuple[FaultProxy, dict[str, Any]],
                                                           proxy: FaultProxy, mode: str, target: str) -> None:
    if target == ".tar":
        ds = _open(store[1])
    proxy.mode, proxy.only = mode, target
    with pytest.raises((ReadError, FormatError)) as info:  # the size check may catch a short object first
        if target == ".tar":
            ds.read_many(range(6))
        else:
            _open(store[1])
    assert target in str(info.value.place.get("path", "")) + str(info.value.place.get("shard", ""))
    assert "Traceback" not in str(info.value)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_server_that_never_answers_times_out(store: tuple[FaultProxy, dict[str, Any]], proxy: FaultProxy) -> None:
    proxy.mode, proxy.only = "silent", "manifest.json"
    with pytest.raises(ReadError, match=r"(?i)timeout"):
        _open(store[1])


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_missing_bucket_is_no_dataset(store: tuple[FaultProxy, dict[str, Any]]) -> None:
    with pytest.raises(FormatError, match="no manifest"):
        feedline.open_dataset("s3://no-such-bucket/ds", storage_options=store[1])


QUICK = {"key": "k", "secret": "s", "skip_instance_cache": True,
         "config_kwargs": {"read_timeout": 1, "connect_timeout": 1, "retries": {"max_attempts": 1}}}


@pytest.mark.timeout(60)
def test_a_dead_endpoint_and_options_the_client_refuses() -> None:
    # no server needed: nobody listens on the discard port
    with pytest.raises(ReadError, match="manifest") as info:
        _open({**QUICK, "endpoint_url": "http://127.0.0.1:9"})
    assert info.value.fix and "EndpointConnectionError" in str(info.value)
    with pytest.raises((ConfigError, ReadError)):
        _open({**QUICK, "endpoint_url": "http://127.0.0.1:9", "no_such_option": 3})
    with pytest.raises((ConfigError, ReadError)):
        _open({**QUICK, "endpoint_url": 5})


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_slow_down_503s_are_retried_then_a_read_error(store: tuple[FaultProxy, dict[str, Any]],
                                                      proxy: FaultProxy) -> None:
    retrying = {**store[1], "config_kwargs": {"read_timeout": 2, "connect_timeout": 2,
                                              "retries": {"max_attempts": 4}}}
    ds = _open(retrying)
    proxy.mode, proxy.only, proxy.times = "503", ".tar", 2  # two SlowDowns, then the store recovers
    assert len(ds.read_many(range(6))) == 6
    proxy.hits, proxy.times = 0, 1 << 30  # SlowDown for good
    with pytest.raises(ReadError, match=r"Service Unavailable|SlowDown|503") as info:
        _open(retrying).read_many(range(6))
    assert ".tar" in str(info.value.place.get("path", "")) + str(info.value.place.get("shard", ""))


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("target", [".idx", ".tar"])
def test_a_server_that_stalls_mid_body_times_out_naming_the_object(
        store: tuple[FaultProxy, dict[str, Any]], proxy: FaultProxy, target: str) -> None:
    ds = _open(store[1]) if target == ".tar" else None
    proxy.mode, proxy.only = "stall", target
    with pytest.raises(ReadError, match=r"(?i)timeout") as info:
        ds.read_many(range(6)) if ds is not None else _open(store[1])
    assert target in str(info.value.place.get("path", "")) + str(info.value.place.get("shard", ""))
    assert "read timeout" in str(info.value)  # it says what happened (before: "FSTimeoutError: ", no text)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_missing_credentials_are_a_read_error_naming_the_manifest(
        store: tuple[FaultProxy, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance metadata on loopback
    anonymous = {k: v for k, v in store[1].items() if k not in ("key", "secret")}
    with pytest.raises(ReadError, match=r"(?i)credentials") as info:
        _open(anonymous)
    assert "manifest.json" in str(info.value.place.get("path", ""))
    assert info.value.fix and "credentials" in info.value.fix
