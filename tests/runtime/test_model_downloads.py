"""The model manager on a loopback Hub (tests/support/fake_hub.py) that speaks the endpoints huggingface_hub calls:
catalog and Hugging Face pulls, resume after a dropped connection and after a pause, a wrong hash, gated
repositories, disk space, memory marks, adding and removing models."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from runtime.api import DownloadCancelled, ModelError, Runtime
from runtime.local_models import catalog as catalog_module
from runtime.local_models import hub as hub_module
from runtime.local_models.hub import parse_hub_ref
from runtime.local_models.machine import human_bytes
from tests.support.fake_hub import COMMIT, FakeHub, refused_endpoint, tiny_gguf

QWEN = ("bartowski/Qwen2.5-1.5B-Instruct-GGUF", "Qwen2.5-1.5B-Instruct-Q4_K_M.gguf")
BIG = 24 << 20


@pytest.fixture
def hub(monkeypatch):
    with FakeHub() as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.endpoint)
        yield fake


@pytest.fixture
async def rt(home):
    runtime = await Runtime.open(home)
    yield runtime
    await runtime.aclose()


@pytest.fixture(scope="module")
def gguf_small(tmp_path_factory):
    return tiny_gguf(tmp_path_factory.mktemp("gguf") / "small.gguf").read_bytes()


@pytest.fixture(scope="module")
def gguf_big(tmp_path_factory):
    return tiny_gguf(tmp_path_factory.mktemp("gguf") / "big.gguf", payload_bytes=BIG).read_bytes()


def blobs_dir(rt: Runtime, repo: str):
    return rt.core.library.hub_cache / ("models--" + repo.replace("/", "--")) / "blobs"


async def test_a_catalog_model_is_downloaded_verified_and_installed(rt, hub, gguf_small):
    hub.add(*QWEN, gguf_small)
    seen = []
    model = await rt.models.pull("qwen2.5-1.5b-instruct", seen.append)
    assert model.ref == "builtin/qwen2.5-1.5b-instruct" and model.source == "hub"
    path = rt.core.library.path(rt.core.library.get("qwen2.5-1.5b-instruct"))
    assert path.read_bytes() == gguf_small and path.is_symlink()  # huggingface_hub's cache layout
    assert path.parent.name == COMMIT and path.resolve().parent.name == "blobs"
    assert model.sha256 == hub.files[QWEN].sha256
    assert [p.phase for p in seen][0] == "checking" and seen[-1].phase == "done"
    assert seen[-1].done == seen[-1].total == len(gguf_small)
    (catalog,) = [c for c in rt.models.catalog() if c.id == "qwen2.5-1.5b-instruct"]
    assert catalog.installed == model.ref
    assert "qwen2.5-1.5b-instruct" in await rt.providers.get("builtin").list_models()
    # What went over the wire: HEAD on the Hub's resolve URL without a token, the bytes from the CDN.
    heads = [(p, h) for host, method, p, h in hub.requests if host == "hub" and method == "HEAD"]
    assert heads[0][0] == f"/{QWEN[0]}/resolve/main/{QWEN[1]}" and "authorization" not in heads[0][1]
    assert len(hub.cdn_gets()) == 1
    # Pulling it again downloads nothing.
    again = await rt.models.pull("qwen2.5-1.5b-instruct")
    assert again.name == model.name and len(hub.cdn_gets()) == 1


async def test_a_dropped_connection_resumes_with_a_range_request(rt, hub, gguf_big):
    hub.add("org/big-GGUF", "big-Q4_K_M.gguf", gguf_big)
    hub.drop_after(15 << 20)
    model = await rt.models.pull("org/big-GGUF/big-Q4_K_M.gguf")
    assert hub.drops_done == 1
    first, second = hub.cdn_gets()
    assert "range" not in first and second["range"] == f"bytes={15 << 20}-"  # resumed, not restarted
    path = rt.core.library.path(rt.core.library.get(model.name))
    assert path.read_bytes() == gguf_big and model.name == "big-q4_k_m"


async def test_a_paused_download_resumes_where_it_stopped(rt, hub, gguf_big):
    hub.add("org/big-GGUF", "big.gguf", gguf_big)
    hub.faults.throttle = 20 << 20  # bytes per second: slow enough to pause mid-file
    progress = []
    pull = asyncio.ensure_future(rt.models.pull("org/big-GGUF/big.gguf", progress.append))
    while not any(p.done >= 10 << 20 for p in progress):
        await asyncio.sleep(0.02)
    pull.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pull
    partial = next(blobs_dir(rt, "org/big-GGUF").glob("*.incomplete"))
    assert partial.stat().st_size >= 10 << 20
    assert rt.core.library.get("big") is None
    hub.faults.throttle = None
    model = await rt.models.pull("org/big-GGUF/big.gguf")  # waits for the paused thread, then resumes
    resumed = hub.cdn_gets()[-1]["range"]
    assert resumed.startswith("bytes=") and int(resumed[6:-1]) >= 10 << 20
    assert rt.core.library.path(rt.core.library.get(model.name)).read_bytes() == gguf_big
    assert not list(blobs_dir(rt, "org/big-GGUF").glob("*.incomplete"))
    assert rt.models.paused() == []  # finished: nothing left to resume


async def test_a_paused_download_is_listed_after_a_restart_and_can_be_discarded(home, hub, gguf_big):
    hub.add(*QWEN, gguf_big)
    hub.faults.throttle = 20 << 20
    rt = await Runtime.open(home)
    progress = []
    pull = asyncio.ensure_future(rt.models.pull("qwen2.5-1.5b-instruct", progress.append))
    while not any(p.done >= 5 << 20 for p in progress):
        await asyncio.sleep(0.02)
    assert rt.models.paused() == []  # running, not paused
    pull.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pull
    await rt.aclose()  # Hearth quits with the download paused

    rt = await Runtime.open(home)
    try:
        (paused,) = rt.models.paused()
        partial = next(blobs_dir(rt, QWEN[0]).glob("*.incomplete"))
        assert paused.ref == "qwen2.5-1.5b-instruct" and paused.label == "Qwen2.5 1.5B Instruct"
        assert paused.total == len(gguf_big) and paused.downloaded == partial.stat().st_size >= 5 << 20
        assert await rt.models.cancel(paused.ref)  # Cancel on a paused download deletes its bytes
        assert not partial.exists() and rt.models.paused() == []
        assert not await rt.models.cancel(paused.ref)
        partial.write_bytes(b"x")  # a stray partial file that no download noted is not listed
        assert rt.models.paused() == []
    finally:
        await rt.aclose()


async def test_an_unreachable_hub_is_said_plainly_and_kept_bytes_only_when_there_are_some(rt, hub, gguf_big,
                                                                                       monkeypatch):
    nowhere = refused_endpoint()
    monkeypatch.setenv("HF_ENDPOINT", nowhere)
    with pytest.raises(ModelError) as refused:
        await rt.models.pull("qwen2.5-1.5b-instruct")
    host = nowhere.removeprefix("http://")
    assert str(refused.value) == (f"Hearth could not reach Hugging Face ({host}). Check the internet connection, "
                                  "then try again.")  # no exception class, no partial download: nothing came
    assert rt.models.paused() == [] and not list(rt.core.library.hub_cache.rglob("*.incomplete"))

    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    hub.add(*QWEN, gguf_big)
    hub.faults.throttle = 20 << 20
    progress = []
    pull = asyncio.ensure_future(rt.models.pull("qwen2.5-1.5b-instruct", progress.append))
    while not any(p.done >= 5 << 20 for p in progress):
        await asyncio.sleep(0.02)
    pull.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pull
    (paused,) = rt.models.paused()
    monkeypatch.setenv("HF_ENDPOINT", nowhere)  # the connection is gone when it is resumed
    with pytest.raises(ModelError) as kept:
        await rt.models.pull("qwen2.5-1.5b-instruct")
    assert str(kept.value) == (f"Hearth could not reach Hugging Face ({host}). Check the internet connection, then "
                               f"try again. The {human_bytes(paused.downloaded)} downloaded so far are kept: trying "
                               "again goes on from there.")
    assert rt.models.paused() == [paused]


async def test_a_cancelled_download_deletes_what_it_had_downloaded(rt, hub, gguf_big):
    hub.add("org/big-GGUF", "big.gguf", gguf_big)
    hub.faults.throttle = 20 << 20
    progress = []
    pull = asyncio.ensure_future(rt.models.pull("org/big-GGUF/big.gguf", progress.append))
    while not any(p.done >= 5 << 20 for p in progress):
        await asyncio.sleep(0.02)
    assert await rt.models.cancel("org/big-GGUF/big.gguf")
    with pytest.raises(DownloadCancelled) as info:
        await pull
    assert info.value.discarded and str(info.value) == (
        "The download of big.gguf was cancelled; what it had downloaded was deleted.")
    assert not list(blobs_dir(rt, "org/big-GGUF").glob("*.incomplete"))
    assert rt.core.library.get("big") is None
    assert not await rt.models.cancel("org/big-GGUF/big.gguf")  # nothing runs any more
    hub.faults.throttle = None
    await rt.models.pull("org/big-GGUF/big.gguf")  # a new pull starts from the first byte
    assert "range" not in hub.cdn_gets()[-1]


async def test_cancel_while_a_new_pull_waits_for_a_paused_thread_cancels_that_pull_too(rt, hub, gguf_big):
    hub.add("org/big-GGUF", "big.gguf", gguf_big)
    hub.faults.throttle = 400 << 10  # a chunk takes longer than a pause waits for the thread: it outlives the pause
    progress = []
    first = asyncio.ensure_future(rt.models.pull("org/big-GGUF/big.gguf", progress.append))
    while not any(p.done > 0 for p in progress):
        await asyncio.sleep(0.02)
    first.cancel()  # Pause
    with pytest.raises(asyncio.CancelledError):
        await first
    again = asyncio.ensure_future(rt.models.pull("org/big-GGUF/big.gguf"))  # Download: waits for that thread
    await asyncio.sleep(0.1)
    gets = len(hub.cdn_gets())
    assert await rt.models.cancel("org/big-GGUF/big.gguf")
    with pytest.raises(DownloadCancelled) as info:
        await asyncio.wait_for(again, 30)
    assert info.value.discarded and len(hub.cdn_gets()) == gets  # it never started downloading again
    assert not list(blobs_dir(rt, "org/big-GGUF").glob("*.incomplete"))


async def test_a_wrong_hash_is_rejected_and_the_file_removed(rt, hub, gguf_small):
    hub.add("org/bad-GGUF", "bad.gguf", gguf_small, publish_sha256="ab" * 32)
    with pytest.raises(ModelError, match="does not match the checksum") as info:
        await rt.models.pull("org/bad-GGUF/bad.gguf")
    assert "Traceback" not in str(info.value)
    assert not any(blobs_dir(rt, "org/bad-GGUF").iterdir())
    assert rt.core.library.records() == []


async def test_a_gated_repository_needs_the_keyring_token_which_never_reaches_the_cdn(rt, hub, gguf_small):
    hub.add("meta/gated-GGUF", "gated.gguf", gguf_small, gated=True)
    with pytest.raises(ModelError, match="gated") as info:
        await rt.models.pull("meta/gated-GGUF/gated.gguf")
    assert "Settings ▸ Models" in str(info.value)
    rt.models.set_hf_token(hub.token)
    model = await rt.models.pull("meta/gated-GGUF/gated.gguf")
    assert model.name == "gated"
    hub_auth = [h.get("authorization") for host, _m, _p, h in hub.requests if host == "hub"]
    assert hub_auth[0] is None and hub_auth[-1] == f"Bearer {hub.token}"  # asked without, then with the token
    assert all("authorization" not in h for h in hub.cdn_gets())
    assert hub.token not in (rt.home / "models" / "library.json").read_text()


async def test_unknown_repositories_and_files_are_clear_sentences(rt, hub, gguf_small):
    hub.add("org/real-GGUF", "real.gguf", gguf_small)
    with pytest.raises(ModelError, match=r"no public model repository 'org/nothing'"):
        await rt.models.pull("org/nothing/x.gguf")
    with pytest.raises(ModelError, match=r"has no file 'missing\.gguf'"):
        await rt.models.pull("org/real-GGUF/missing.gguf")
    with pytest.raises(ModelError, match="not a catalog model"):
        await rt.models.pull("just-a-word")


async def test_not_enough_disk_space_stops_before_downloading(rt, hub, gguf_small, monkeypatch):
    hub.add(*QWEN, gguf_small)
    monkeypatch.setattr(hub_module, "free_disk_bytes", lambda _path: 1000)  # a full disk cannot be made here
    with pytest.raises(ModelError, match="Not enough free disk space"):
        await rt.models.pull("qwen2.5-1.5b-instruct")
    assert hub.cdn_gets() == []


async def test_models_that_will_not_fit_in_memory_are_marked_before_download(rt, hub, gguf_small, monkeypatch):
    monkeypatch.setattr(catalog_module, "total_ram_bytes", lambda: 4_000_000_000)
    marks = {c.id: c.fits for c in rt.models.catalog()}
    assert marks["qwen2.5-1.5b-instruct"] is True and marks["llama-3.2-3b-instruct"] is True
    assert marks["qwen2.5-7b-instruct"] is False and marks["llama-3.1-8b-instruct"] is False
    hub.add("bartowski/Qwen2.5-7B-Instruct-GGUF", "Qwen2.5-7B-Instruct-Q4_K_M.gguf", gguf_small)
    seen = []
    await rt.models.pull("qwen2.5-7b-instruct", seen.append)
    assert seen[1].phase == "downloading" and seen[1].fits is False and seen[1].ram_needed == 5_700_000_000


async def test_removing_a_download_deletes_its_file_and_resets_the_default(rt, hub, gguf_small):
    hub.add(*QWEN, gguf_small)
    model = await rt.models.pull("qwen2.5-1.5b-instruct")
    await rt.save_settings(rt.settings.model_copy(update={"default_model": model.ref}))
    blob = rt.core.library.path(rt.core.library.get(model.name)).resolve()
    await rt.models.remove(model.name)
    assert not blob.exists() and rt.core.library.records() == []
    assert not (rt.core.library.hub_cache / f"models--{QWEN[0].replace('/', '--')}").exists()
    assert rt.settings.default_model == "builtin/smollm2-135m"
    assert json.loads((rt.home / "settings.json").read_text()).get("default_model") is None  # the default again
    with pytest.raises(ModelError, match="No installed model"):
        await rt.models.remove(model.name)
    with pytest.raises(ModelError, match="bundled model"):
        await rt.models.remove("smollm2-135m")


async def test_a_local_gguf_is_added_in_place_and_never_deleted(rt, tmp_path):
    mine = tiny_gguf(tmp_path / "My-Model.Q4.gguf")
    model = await rt.models.add_local(mine)
    assert model.name == "my-model.q4" and model.source == "local" and model.path == str(mine)
    assert model.sha256 == hub_module.hashlib.sha256(mine.read_bytes()).hexdigest()
    assert (await rt.models.add_local(mine)).name == model.name  # the same file twice: one entry
    await rt.models.remove(model.name)
    assert mine.is_file()
    junk = tmp_path / "notes.gguf"
    junk.write_text("not a model")
    with pytest.raises(ModelError, match="not a GGUF model file"):
        await rt.models.add_local(junk)
    with pytest.raises(ModelError, match="There is no file"):
        await rt.models.add_local(tmp_path / "absent.gguf")


def test_hugging_face_references_are_parsed_from_names_and_urls():
    url = "https://huggingface.co/bartowski/Qwen2.5-3B-Instruct-GGUF/blob/main/Qwen2.5-3B-Instruct-Q4_K_M.gguf"
    ref = parse_hub_ref(url)
    assert (ref.repo, ref.file, ref.revision) == ("bartowski/Qwen2.5-3B-Instruct-GGUF",
                                                  "Qwen2.5-3B-Instruct-Q4_K_M.gguf", "main")
    assert parse_hub_ref("hf.co/org/repo/sub/dir/m.gguf").file == "sub/dir/m.gguf"
    assert parse_hub_ref("org/repo/resolve/abc/m.gguf").file == "resolve/abc/m.gguf"  # plain names are literal
    for bad, why in [("org/repo/README.md", "not one"), ("org/repo/m-00001-of-00002.gguf", "split"),
                     ("nothing", "not a catalog model"), ("org/repo/../x.gguf", "not a file name")]:
        with pytest.raises(ModelError, match=why):
            parse_hub_ref(bad)


async def test_a_pull_while_the_same_file_downloads_is_refused(rt, hub, gguf_big):
    hub.add("org/big-GGUF", "big.gguf", gguf_big)
    hub.faults.throttle = 40 << 20
    started = threading.Event()
    first = asyncio.ensure_future(rt.models.pull("org/big-GGUF/big.gguf", lambda p: started.set()))
    while not started.is_set():
        await asyncio.sleep(0.01)
    with pytest.raises(ModelError, match="already downloading"):
        await rt.models.pull("org/big-GGUF/big.gguf")
    hub.faults.throttle = None
    assert (await first).name == "big"
