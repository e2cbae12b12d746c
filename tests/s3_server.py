"""An S3 server of a test's own: S3Proxy on local files, from the jar ``scripts/services.sh``
installs, on a free port and with the credentials the test chooses (the shared server's are
fixed, and too plain to search logs for)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.gateway_process import free_port, serving

__all__ = ["S3PROXY_JARS", "s3_server"]

S3PROXY_JARS = Path(sys.prefix) / "share" / "s3proxy"


def _answers(endpoint: str) -> bool:
    try:
        return b"<" in httpx.get(f"{endpoint}/", timeout=2).content
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def s3_server(root: Path, access_key_id: str, secret_access_key: str) -> Iterator[str]:
    """Run S3Proxy with its data in ``root`` accepting only the given credentials; yield its
    endpoint URL. Skips (fails under CI) without the jar or a JVM."""
    jars = sorted(S3PROXY_JARS.glob("s3proxy-*-jar-with-dependencies.jar"))
    if not jars or not shutil.which("java"):
        reason = f"no S3Proxy jar in {S3PROXY_JARS} (scripts/services.sh) or no java"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    (root / "data").mkdir(parents=True, exist_ok=True)
    endpoint = f"http://127.0.0.1:{free_port()}"
    conf = root / "s3proxy.conf"
    conf.write_text(
        f"s3proxy.endpoint={endpoint}\n"
        "s3proxy.authorization=aws-v2-or-v4\n"
        f"s3proxy.identity={access_key_id}\n"
        f"s3proxy.credential={secret_access_key}\n"
        "jclouds.provider=filesystem-nio2\n"
        f"jclouds.filesystem.basedir={root / 'data'}\n"
    )
    with (root / "s3proxy.log").open("wb") as log:
        proc = subprocess.Popen(
            ["java", "-Xmx256m", "-jar", str(jars[-1]), "--properties", str(conf)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        with serving(proc, endpoint, _answers, root / "s3proxy.log", "S3Proxy", 60):
            yield endpoint
