"""`hearth models list|pull|rm` as a person runs them: real child processes, the loopback Hub, a kill -9 in the
middle of a download and the same command again."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest

from runtime.local_models.machine import human_bytes
from tests.support.fake_hub import FakeHub, tiny_gguf
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer

REPO, FILE = "org/cli-GGUF", "cli-model-Q4_K_M.gguf"


async def _cli(home, *args: str, env: dict[str, str]):
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runtime.cli", "--home", str(home), "models", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**env, "PYTHONPATH": os.getcwd()},
    )


async def _result(proc):
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture(scope="module")
def big_gguf(tmp_path_factory):
    return tiny_gguf(tmp_path_factory.mktemp("gguf") / "m.gguf", payload_bytes=24 << 20).read_bytes()


@pytest.fixture
def hub_env():
    with FakeHub() as hub:
        env = {k: v for k, v in os.environ.items() if k != "HEARTH_HOME"}
        yield hub, {**env, "HF_ENDPOINT": hub.endpoint}


async def test_pull_is_killed_mid_file_and_the_same_command_resumes(home, hub_env, big_gguf):
    hub, env = hub_env
    hub.add(REPO, FILE, big_gguf)
    hub.faults.throttle = 8 << 20
    proc = await _cli(home, "pull", f"{REPO}/{FILE}", env=env)
    while True:  # the progress lines, one per 10 %
        line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        assert line, "the pull ended before it was killed"
        if "%" in line and int(line.split("%")[0].split()[-1]) >= 20:
            break
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    partial = next((home / "models" / "hub").rglob("*.incomplete"))
    have = partial.stat().st_size
    assert have >= 4 << 20
    code, out, _ = await _result(await _cli(home, "list", env=env))
    assert code == 0
    assert "Paused downloads (hearth models pull REF resumes one, hearth models rm REF deletes it):" in out
    assert f"  {REPO}/{FILE}".ljust(42) + f" {human_bytes(have)} of {human_bytes(len(big_gguf))}\n" in out

    hub.faults.throttle = None
    code, out, err = await _result(await _cli(home, "pull", f"{REPO}/{FILE}", env=env))
    assert code == 0, err
    assert f"bytes={have}-" == hub.cdn_gets()[-1]["range"]  # resumed from what the killed process wrote
    assert "Installed builtin/cli-model-q4_k_m" in out and "hearth run --model builtin/cli-model-q4_k_m" in out
    assert "done" in err and "Traceback" not in err

    code, out, _ = await _result(await _cli(home, "list", env=env))
    assert code == 0 and "builtin/cli-model-q4_k_m" in out and "qwen2.5-1.5b-instruct" in out
    assert "Paused downloads" not in out
    code, out, _ = await _result(await _cli(home, "rm", "cli-model-q4_k_m", env=env))
    assert code == 0 and "Removed cli-model-q4_k_m" in out
    code, out, _ = await _result(await _cli(home, "list", env=env))
    assert "builtin/cli-model-q4_k_m" not in out


async def test_rm_deletes_what_a_paused_download_had(home, hub_env, big_gguf):
    hub, env = hub_env
    hub.add(REPO, FILE, big_gguf)
    hub.faults.throttle = 8 << 20
    proc = await _cli(home, "pull", f"{REPO}/{FILE}", env=env)
    while "%" not in (await asyncio.wait_for(proc.stderr.readline(), 30)).decode():
        pass
    proc.send_signal(signal.SIGINT)  # Ctrl-C pauses it
    await proc.wait()
    assert list((home / "models" / "hub").rglob("*.incomplete"))
    code, out, err = await _result(await _cli(home, "rm", f"{REPO}/{FILE}", env=env))
    assert code == 0 and out.strip() == f"Deleted the partial download of {FILE}.", err
    assert not list((home / "models" / "hub").rglob("*.incomplete"))
    code, out, _ = await _result(await _cli(home, "list", env=env))
    assert code == 0 and "Paused downloads" not in out


async def test_pull_errors_are_one_sentence_and_exit_3(home, hub_env, big_gguf):
    hub, env = hub_env
    hub.add(REPO, FILE, big_gguf, publish_sha256="cd" * 32)
    code, _, err = await _result(await _cli(home, "pull", f"{REPO}/{FILE}", env=env))
    assert code == 3 and "does not match the checksum" in err and "Traceback" not in err
    code, _, err = await _result(await _cli(home, "pull", "not-a-model", env=env))
    assert code == 3 and "not a catalog model" in err
    code, _, err = await _result(await _cli(home, "rm", "nothing", env=env))
    assert code == 3 and "No installed model is named 'nothing'" in err


async def test_list_names_the_bundled_model_once_and_heads_the_model_servers(home, hub_env):
    _hub, env = hub_env
    code, out, err = await _result(await _cli(home, env=env))
    assert code == 0, err
    lines = out.splitlines()
    assert [line for line in lines if "builtin/smollm2-135m" in line] == [
        next(line for line in lines if line.startswith("  builtin/smollm2-135m "))]  # under Installed only
    assert lines[-1].startswith("  ") and "RAM" in lines[-1]  # the catalog ends it: no stray line after it
    assert "Model servers" not in out  # none is configured
    async with OpenAIServer(models=["tiny"]) as server:
        write_settings(home, server.base_url)
        code, out, err = await _result(await _cli(home, env=env))
    assert code == 0, err
    servers = out.split("\nModel servers (Settings ▸ Models):\n")[1].splitlines()
    assert servers[0] == "  local/tiny" and not any("builtin/" in line for line in servers)
