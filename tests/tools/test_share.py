"""The golden ShareFetch and ShareAcknowledge bodies of the share tests, checked against what Kafka's own
classes encode (tests/java/ShareResponseBytes.java, run with the rig's JDK and jars)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kafka_rig import java_program
from quotagate.protocol.apis import ApiKey
from tests.support.share_messages import GOLDEN


@pytest.mark.java
def test_the_golden_bodies_are_what_kafka_encodes() -> None:
    source = Path(__file__).resolve().parents[1] / "java" / "ShareResponseBytes.java"
    result = subprocess.run(java_program(source), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    printed = {}
    for line in result.stdout.split("\n"):
        if line:
            name, version, body = line.split()
            api_key = ApiKey.SHARE_FETCH if name == "fetch" else ApiKey.SHARE_ACKNOWLEDGE
            printed[(api_key, int(version.removeprefix("v")))] = bytes.fromhex(body)
    assert printed == GOLDEN
