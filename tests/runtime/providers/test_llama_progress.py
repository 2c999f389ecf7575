"""How far a local model has read before the first token reaches the person: a turn that waits for a warm-up
(the app's preload of the default model, `hearth run`'s) is told how far the warm-up has read, and an evaluation
says how far it got before each piece. No model is loaded here: the model's lock and its `llm` are stand-ins
for what the llama.cpp tests exercise on the real model (test_bundled_model_turns.py)."""

from __future__ import annotations

import threading
import time

from runtime.providers.llama.models import LoadedModel
from runtime.providers.llama.prefix import EVAL_PIECE, evaluate
from runtime.providers.llama.reading import preparing


def test_a_turn_waiting_for_a_warm_up_hears_how_far_it_has_read():
    model = LoadedModel(None, "model.gguf", 2048)
    holding, done = threading.Event(), threading.Event()

    def warm_up() -> None:  # what warm_prefix does: holds the model and says how far it got
        with model.mutex:
            holding.set()
            for percent in (0, 20, 40, 60, 80):
                model.warming = percent
                time.sleep(0.3)
            model.warming = None
        done.set()

    thread = threading.Thread(target=warm_up)
    thread.start()
    holding.wait(5)
    heard: list[str] = []
    with model.claimed(lambda percent: heard.append(preparing(percent))):
        assert done.is_set()  # the lock came only once the warm-up let go
    thread.join(5)
    assert heard[0] in ("Getting the model ready…", "Getting the model ready… 0%")
    assert "Getting the model ready… 40%" in heard and "Getting the model ready… 80%" in heard
    percents = [int(h.split()[-1].rstrip("%")) for h in heard if h.endswith("%")]
    assert percents == sorted(set(percents))  # each change once, in order


def test_a_free_model_is_claimed_without_a_word():
    model = LoadedModel(None, "model.gguf", 2048)
    heard: list[int | None] = []
    with model.claimed(heard.append):
        assert model.mutex.locked()
    assert heard == [] and not model.mutex.locked()


class Llm:
    """Records what `evaluate` feeds llama.cpp."""

    def __init__(self) -> None:
        self.pieces: list[int] = []

    def eval(self, tokens: list[int]) -> None:
        self.pieces.append(len(tokens))

    def reset(self) -> None:
        self.pieces.clear()


def test_an_evaluation_says_how_far_it_got_before_each_piece():
    llm, said = Llm(), []
    assert evaluate(llm, list(range(EVAL_PIECE * 5)), None, said.append)
    assert said == [0, 20, 40, 60, 80] and llm.pieces == [EVAL_PIECE] * 5
