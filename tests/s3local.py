"""A real S3 API for tests: moto's S3 server on 127.0.0.1, on a port the OS picks.

Not a mock object: ckptsel talks to it over HTTP through s3fs exactly as it would to AWS
(``AWS_ENDPOINT_URL`` plus dummy credentials, which child processes and Ray actors receive
too). The fixtures are registered in ``conftest.py``::

    def test_x(s3, tmp_path):
        s3.upload(tmp_path / "run", "run")          # -> "s3://<bucket>/run"
        measure_run(s3.url("run"), ..., out=s3.url("records"))

* ``s3_endpoint`` (session): the server, in this process (``ThreadedMotoServer``), listening
  on loopback only; stopped at the end of the session. It needs ``moto[s3] flask
  flask-cors`` and ``s3fs`` (``scripts/setup.sh --dev``): without them the tests skip.
* ``s3`` (per test): a fresh bucket (moto keeps one backend per process, so tests never see
  each other's objects), the ``AWS_*`` variables set, s3fs's instance cache cleared (a
  cached ``S3FileSystem`` keeps its old endpoint and listings), and a private node cache.

moto checks ``If-Match`` / ``If-None-Match`` and then stores the object without a lock, so
two racing conditional PUTs could both win there, where AWS S3 lets exactly one win. The
server's ``put_object`` is serialized here so that the fake keeps S3's guarantee.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

DUMMY_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
_PUT_LOCK = threading.Lock()


def _serialize_puts() -> None:
    """Make moto's conditional PUT check-and-store atomic, as it is on S3."""
    from moto.s3.responses import S3Response

    original = S3Response.put_object
    if getattr(original, "ckptsel_serialized", False):
        return

    def put_object(self, *args, **kwargs):
        with _PUT_LOCK:
            return original(self, *args, **kwargs)

    put_object.ckptsel_serialized = True
    S3Response.put_object = put_object


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 in a thread of this process; yields its endpoint."""
    from moto.server import ThreadedMotoServer

    _serialize_puts()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'ckptsel[s3]')")
    pytest.importorskip("moto.server", reason="moto is not installed (scripts/setup.sh --dev)")
    pytest.importorskip("flask", reason="moto's server needs flask (scripts/setup.sh --dev)")
    with moto_server() as endpoint:
        yield endpoint


@dataclass
class S3:
    """One test's bucket on the local server."""

    endpoint: str
    bucket: str
    fs: Any

    def url(self, *parts: str) -> str:
        return "s3://" + "/".join([self.bucket, *parts])

    def upload(self, local: Path, *parts: str) -> str:
        """Copy a local folder (or file) to ``s3://<bucket>/<parts>``; returns the URL."""
        self.fs.put(str(local), "/".join([self.bucket, *parts]), recursive=Path(local).is_dir())
        return self.url(*parts)

    def keys(self, *parts: str) -> list[str]:
        """Every key below ``parts``, relative to it, sorted."""
        base = "/".join([self.bucket, *parts]).rstrip("/") + "/"
        return sorted(k[len(base) :] for k in self.fs.find(base.rstrip("/"), refresh=True))

    def env(self) -> dict[str, str]:
        return dict(DUMMY_ENV, AWS_ENDPOINT_URL=self.endpoint)


def s3_env(endpoint: str) -> dict[str, str]:
    """The environment a process needs to reach the local server."""
    return dict(DUMMY_ENV, AWS_ENDPOINT_URL=endpoint)


@pytest.fixture
def s3(s3_endpoint, monkeypatch, tmp_path) -> Iterator[S3]:
    import s3fs

    for key in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
    for key, value in s3_env(s3_endpoint).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CKPTSEL_CACHE_DIR", str(tmp_path / "node-cache"))
    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    bucket = f"ckptsel-{uuid.uuid4().hex[:16]}"
    fs.mkdir(bucket)
    yield S3(s3_endpoint, bucket, fs)
    s3fs.S3FileSystem.clear_instance_cache()
