"""Search in a large library (20,000 passages, past COMMON_FLOOR): however many passages a query's words are in,
it ranks a bounded number of them; passages holding every rare word come first even when the commoner rare words
are left out of the ranked query; a task whose documents lie outside the bounded window still finds them."""

from __future__ import annotations

import pytest

from runtime.api import Runtime
from runtime.store.knowledge_repo import RANK_BUDGET
from tests.runtime.test_knowledge import indexed

PASSAGES = 20_000
# word -> every how-many-th passage holds it (all under half of the library, so none is left out as too common)
SHARES = {"alpha": 2.5, "beta": 5}  # 8,000 and 4,000 passages: both more than RANK_BUDGET
RARE = ["cedar", "gopher", "olive", "tower", "cubit"]  # 40, then 900 passages each: together past RANK_BUDGET


def text(i: int) -> str:
    words = [f"filler{i % 997}", f"more{i % 991}", f"line{i}"]
    words += [w for w, every in SHARES.items() if i % round(every * 2) < 2]
    if i % 500 == 7:
        words.append(RARE[0])
    words += [w for n, w in enumerate(RARE[1:]) if (i + 5 * n) % 22 == 3]
    return " ".join(words)


async def library(rt: Runtime, tmp_path, names: list[str]) -> dict[str, int]:
    """Documents named `names`, their passages replaced by synthetic ones: the first gets PASSAGES of them, the
    others ten each (written last, so their rowids come after every passage of the first)."""
    paths = []
    for name in names:
        (tmp_path / name).write_text("placeholder\n")
        paths.append(str(tmp_path / name))
    await rt.create_task(knowledge=paths)
    docs = await indexed(rt)
    repo = rt.kit.knowledge.repo
    for n, name in enumerate(names):
        doc_id = docs[name]["id"]
        await repo.clear_passages(doc_id)
        count = PASSAGES if n == 0 else 10
        for start in range(0, count, 2000):
            batch = [{"text": text(i) if n == 0 else f"alpha note {i} of {name}", "line_start": i + 1,
                      "line_end": i + 1} for i in range(start, min(count, start + 2000))]
            await repo.add_passages(doc_id, start, batch)
        await repo.update_document(doc_id, passages=count)
    return {name: docs[name]["id"] for name in names}


async def steps_of(rt: Runtime, words: list[str], doc_ids: list[int]) -> int:
    """SQLite virtual-machine steps of one search on the repository's reading connection (a search before it
    opens that connection and counts the words)."""
    repo, steps = rt.kit.knowledge.repo, [0]

    def count() -> int:
        steps[0] += 1
        return 0  # go on

    await repo.bm25(words, doc_ids, 6)
    repo._reader.set_progress_handler(count, 1)
    try:
        await repo.bm25(words, doc_ids, 6)
    finally:
        repo._reader.set_progress_handler(None, 1)
    return steps[0]


@pytest.fixture
async def rt(home):
    runtime = await Runtime.open(home)
    yield runtime
    await runtime.aclose()


async def test_the_work_of_a_search_stays_bounded_however_many_passages_match(rt, tmp_path):
    ids = await library(rt, tmp_path, ["big.txt"])
    repo = rt.kit.knowledge.repo
    counts = {w: sum(w in text(i).split() for i in range(PASSAGES)) for w in SHARES}
    assert counts == {"alpha": 8000, "beta": 4000} and min(counts.values()) > RANK_BUDGET
    work = {}
    for word in SHARES:
        work[word] = await steps_of(rt, [word], list(ids.values()))
        hits = await repo.bm25([word], list(ids.values()), 6)
        assert len(hits) == 6 and all(word in h["text"].split() for h in hits)
    # Ranking all of them would cost twice as much for alpha as for beta (8,000 passages against 4,000).
    assert work["alpha"] < 1.25 * work["beta"], work


async def test_a_passage_holding_every_rare_word_comes_first(rt, tmp_path):
    ids = await library(rt, tmp_path, ["big.txt"])
    holders = [i for i in range(PASSAGES) if all(w in text(i).split() for w in RARE)]
    assert holders == [], "the synthetic library holds no such passage yet"
    repo = rt.kit.knowledge.repo
    await repo.add_passages(ids["big.txt"], PASSAGES, [{"text": "an ark of " + " ".join(RARE), "line_start": 1,
                                                        "line_end": 1}])
    await repo.update_document(ids["big.txt"], passages=PASSAGES + 1)
    hits = await repo.bm25(list(reversed(RARE)), list(ids.values()), 6)  # the commonest rare word first
    assert hits[0]["text"] == "an ark of " + " ".join(RARE)
    assert len(hits) == 6 and all(RARE[0] in h["text"].split() for h in hits[1:])  # then the rarest word's


async def test_a_task_whose_passages_lie_past_the_window_still_finds_them(rt, tmp_path):
    ids = await library(rt, tmp_path, ["big.txt", "small.txt"])
    hits = await rt.kit.knowledge.repo.bm25(["alpha"], [ids["small.txt"]], 6)
    assert len(hits) == 6 and {h["document_id"] for h in hits} == {ids["small.txt"]}
