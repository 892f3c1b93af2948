"""`quotagate pipeline` itself: generate, then all, on a tiny input; and a bad input named.

Runs main([...]) in this process on the test session's SparkSession (a job stops its session when
done, which here must not end the one the other tests share)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from quotagate.cli import main


@pytest.mark.long_only
def test_generate_then_all_writes_the_proxy_toml_and_kafka_configs_commands(
    shared_session, tmp_path: Path, capsys
) -> None:
    generated, work = tmp_path / "generated", tmp_path / "work"
    assert main(["pipeline", "generate", "--out", str(generated), "--seconds", "30"]) == 0
    assert main(["pipeline", "all", "--input", str(generated), "--work", str(work), "--bootstrap", "k:9092"]) == 0
    out = capsys.readouterr().out
    assert "usage table:" in out and "report:" in out, out
    toml = (work / "recommendations" / "quotas.toml").read_text()
    # ANONYMOUS is every client without SASL: a client-id quota, as the proxy's TOML writes it
    steady = re.search(r'\[\[quotas\]\]\nclient_id = "steady-producer"\nproducer_byte_rate = (\d+)', toml)
    assert steady and 200_000 <= int(steady[1]) <= 200_000 * 1.5, toml
    assert 'user = "alice"\nclient_id = "consumer"\nconsumer_byte_rate = ' in toml, toml
    # the two producers' tenant: rolled up, replayed and recommended as one
    tenant = re.search(r'# tenant "ingest-team": producer_byte_rate = (\d+)', toml)
    assert tenant and 250_000 <= int(tenant[1]) <= 250_000 * 8 * 1.5, toml
    assert (work / "rollup" / "tenant_minute").is_dir()
    assert "ingest-team" in (work / "report.html").read_text()
    commands = (work / "recommendations" / "kafka-configs.sh").read_text()
    assert "kafka-configs.sh --bootstrap-server k:9092 --alter" in commands, commands
    assert "--entity-name steady-producer" in commands and "producer_byte_rate=" in commands, commands
    assert (work / "report.html").stat().st_size > 0


def test_a_missing_input_directory_is_named_and_the_run_fails(shared_session, tmp_path: Path, capsys) -> None:
    missing = tmp_path / "no-such-usage"
    assert main(["pipeline", "ingest", "--input", str(missing), "--table", str(tmp_path / "table")]) != 0
    err = capsys.readouterr().err
    assert str(missing) in err, err
