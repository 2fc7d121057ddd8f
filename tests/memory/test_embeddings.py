"""The embedders behind memory search (memory/embeddings), with real components only.

* The offline embedder: the real WordLlama model from the ``wordllama`` wheel.
* The OpenAI-compatible embedder: the official SDK against a real HTTP server on
  loopback (tests/providers/fake_openai.py), with its faults switched on.
* The registry: ``FORGE_MEMORY_EMBEDDER`` and ``FORGE_EMBEDDING_MODEL``.

None of these touch the database: they run the same on both stacks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory.embeddings import (
    BadEmbedding,
    Embedder,
    EmbeddingError,
    EmbeddingMisconfigured,
    EmbeddingUnavailable,
    blank_vector,
    embed_texts,
    get_embedder,
    reset_embedder,
)
from memory.embeddings.measure import report
from memory.embeddings.offline import OfflineEmbedder, _Model
from memory.embeddings.openai import PROBE_TEXT, OpenAIEmbedder
from tests.providers.fake_openai import Embeddings, FakeOpenAI, fake_vector

ROOT = Path(__file__).resolve().parents[2]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def unit(vector: list[float] | np.ndarray) -> np.ndarray:
    v = np.asarray(vector, dtype=np.float32)
    return v / np.linalg.norm(v)


# --- the offline embedder ------------------------------------------------------------


@pytest.fixture(scope="module")
def offline() -> OfflineEmbedder:
    embedder = OfflineEmbedder.shared()
    embedder.load()
    return embedder


def test_offline_names_its_model_and_dimensions(offline: OfflineEmbedder):
    assert offline.name == "wordllama/l2_supercat_256"
    assert offline.dim == 256
    assert OfflineEmbedder.shared() is offline


def test_offline_vectors_are_unit_rows_of_the_right_shape_and_deterministic(
    offline: OfflineEmbedder,
):
    texts = ["I drank coffee yesterday", "我昨天喝了咖啡", "x", "The meeting moved to Thursday"]
    first = embed_texts(texts, embedder=offline)
    assert first.shape == (4, 256)
    assert first.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, rtol=1e-5)
    # The same text gives the same vector, in another call, batch and position.
    again = embed_texts(["The meeting moved to Thursday", *texts[:2]], embedder=offline)
    np.testing.assert_array_equal(again[0], first[3])
    np.testing.assert_array_equal(again[1:], first[:2])
    # Different texts give different vectors.
    assert not np.allclose(first[0], first[1])


@pytest.mark.parametrize(
    ("anchor", "paraphrase", "unrelated"),
    [
        (
            "I drank coffee yesterday morning",
            "Yesterday I had a cup of coffee before work",
            "The train to Berlin was cancelled",
        ),
        (
            "We decided to use PostgreSQL for the backend",
            "The team picked Postgres as the server database",
            "She likes painting landscapes in watercolor",
        ),
        ("I am allergic to peanuts", "Peanuts give me an allergic reaction", "The stock market"),
        ("我昨天早上喝了咖啡", "昨天上班前我喝了一杯咖啡", "去柏林的火车取消了"),
        ("我对花生过敏", "吃花生会让我过敏", "今天股市收盘上涨"),
        ("我女儿九月开始上学", "我们的孩子今年秋天开始上小学", "数据库迁移在服务器上失败了"),
    ],
)
def test_offline_paraphrase_is_closer_than_an_unrelated_sentence(
    offline: OfflineEmbedder, anchor: str, paraphrase: str, unrelated: str
):
    a, p, u = embed_texts([anchor, paraphrase, unrelated], embedder=offline)
    assert cosine(a, p) > cosine(a, u) + 0.1


def test_offline_empty_text_gets_the_blank_vector_without_failing_its_batch(
    offline: OfflineEmbedder,
):
    vectors = embed_texts(["", "coffee", ""], embedder=offline)
    blank = unit(blank_vector(256))
    np.testing.assert_allclose(vectors[0], blank, rtol=1e-6)
    np.testing.assert_allclose(vectors[2], blank, rtol=1e-6)
    np.testing.assert_array_equal(vectors[1], embed_texts(["coffee"], embedder=offline)[0])
    assert embed_texts([], embedder=offline).shape == (0, 256)


def test_offline_refuses_a_non_text_as_an_embedding_error(offline: OfflineEmbedder):
    with pytest.raises(EmbeddingError):
        embed_texts(["fine", None], embedder=offline)  # type: ignore[list-item]


def test_offline_loads_once_when_threads_race_for_it():
    embedder = OfflineEmbedder()  # not the shared one: its model is not loaded yet
    start = threading.Barrier(6)
    results: list[np.ndarray] = []
    models: list[object] = []

    def work() -> None:
        start.wait()
        results.append(embed_texts(["the same sentence, six times"], embedder=embedder))
        models.append(embedder._model)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 6
    assert all(m is models[0] for m in models)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_offline_model_missing_from_the_package_is_misconfigured(tmp_path: Path):
    """An installed ``wordllama`` without the model files (another version's layout)."""
    with pytest.raises(EmbeddingMisconfigured, match="weights/l2_supercat_256"):
        _Model(tmp_path)


def test_offline_loads_with_the_network_unreachable(tmp_path: Path):
    """In a fresh interpreter whose sockets all fail, with an empty home and no cache:
    the model loads from the wheel, and neither ``requests`` nor ``wordllama`` (whose
    own loader would download) is imported."""
    script = textwrap.dedent(
        """
        import socket, sys

        def no_network(*args, **kwargs):
            raise OSError("network unreachable (test)")

        socket.socket.connect = no_network
        socket.socket.connect_ex = no_network
        socket.create_connection = no_network
        socket.getaddrinfo = no_network

        from memory.embeddings import embed_texts
        from memory.embeddings.offline import OfflineEmbedder

        vectors = embed_texts(["hello world", "你好世界"], embedder=OfflineEmbedder.shared())
        assert vectors.shape == (2, 256), vectors.shape
        print("requests" in sys.modules, "wordllama" in sys.modules)
        """
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
    assert not any(home.iterdir())  # nothing cached, nothing downloaded


# --- the OpenAI-compatible embedder against a real loopback server -------------------

MODEL = "text-embedding-fake"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


MakeEmbedder = Callable[..., OpenAIEmbedder]


@pytest.fixture
def make(fake: FakeOpenAI) -> Iterator[MakeEmbedder]:
    made: list[OpenAIEmbedder] = []

    def build(**kwargs: Any) -> OpenAIEmbedder:
        kwargs.setdefault("base_url", fake.base_url)
        kwargs.setdefault("timeout", 5.0)
        embedder = OpenAIEmbedder(kwargs.pop("model", MODEL), **kwargs)
        made.append(embedder)
        return embedder

    yield build
    for embedder in made:
        embedder.close()


@pytest.mark.parametrize("reverse", [False, True])
def test_openai_batches_and_keeps_each_vector_with_its_text(
    fake: FakeOpenAI, make: MakeEmbedder, reverse: bool
):
    fake.embeddings = Embeddings(dim=8, reverse=reverse)
    embedder = make(batch_size=64, dimensions=8)
    texts = [f"message number {i}" for i in range(150)]

    vectors = embed_texts(texts, embedder=embedder)

    assert [len(r["input"]) for r in fake.embedding_requests] == [64, 64, 22]
    assert [t for r in fake.embedding_requests for t in r["input"]] == texts
    assert vectors.shape == (150, 8)
    expected = np.stack([unit(fake_vector(t, 8)) for t in texts])
    np.testing.assert_allclose(vectors, expected, rtol=1e-5, atol=1e-6)


def test_openai_request_body_and_key(fake: FakeOpenAI, make: MakeEmbedder):
    embedder = make(dimensions=12, api_key="sk-test-key")
    embed_texts(["hello"], embedder=embedder)
    (body,) = fake.embedding_requests
    assert body == {
        "model": MODEL,
        "input": ["hello"],
        "encoding_format": "float",
        "dimensions": 12,
    }
    assert fake.headers[-1]["authorization"] == "Bearer sk-test-key"

    make(model="BAAI/bge-m3").embed_batch(["hi"])
    assert fake.embedding_requests[-1]["model"] == "BAAI/bge-m3"
    assert "dimensions" not in fake.embedding_requests[-1]


def test_openai_configured_dimensions_name_the_space_without_asking(
    fake: FakeOpenAI, make: MakeEmbedder
):
    embedder = make(dimensions=12)
    assert embedder.name == f"openai/{MODEL}@12"
    assert embedder.dim == 12
    assert fake.embedding_requests == []
    assert embed_texts(["a", "b"], embedder=embedder).shape == (2, 12)


def test_openai_learns_its_dimensions_from_the_first_answer_and_keeps_them(
    fake: FakeOpenAI, make: MakeEmbedder
):
    fake.embeddings = Embeddings(dim=8)
    embedder = make()
    # Reading the name before any answer asks the server once, with one short text.
    assert embedder.name == f"openai/{MODEL}@8"
    assert [r["input"] for r in fake.embedding_requests] == [[PROBE_TEXT]]
    assert embed_texts(["first"], embedder=embedder).shape == (1, 8)

    fake.embeddings = Embeddings(dim=16)  # the server now serves another model
    with pytest.raises(BadEmbedding, match="16 dimensions, expected 8"):
        embed_texts(["second"], embedder=embedder)
    assert embedder.name == f"openai/{MODEL}@8"


def test_openai_learns_dimensions_from_a_real_batch_when_no_one_asked_before(
    fake: FakeOpenAI, make: MakeEmbedder
):
    fake.embeddings = Embeddings(dim=5)
    embedder = make()
    assert embed_texts(["one", "two"], embedder=embedder).shape == (2, 5)
    assert len(fake.embedding_requests) == 1  # no probe: the batch told it
    assert embedder.name == f"openai/{MODEL}@5"


def test_openai_answer_wider_than_configured_dimensions_is_bad(
    fake: FakeOpenAI, make: MakeEmbedder
):
    fake.embeddings = Embeddings(dim=16, honor_dimensions=False)
    embedder = make(dimensions=8)
    with pytest.raises(BadEmbedding, match="16 dimensions, expected 8"):
        embed_texts(["text"], embedder=embedder)


def test_openai_blank_texts_are_not_sent(fake: FakeOpenAI, make: MakeEmbedder):
    embedder = make(dimensions=8)
    vectors = embed_texts(["", "coffee", "   "], embedder=embedder)
    assert [r["input"] for r in fake.embedding_requests] == [["coffee"]]
    blank = unit(blank_vector(8))
    np.testing.assert_allclose(vectors[0], blank, rtol=1e-6)
    np.testing.assert_allclose(vectors[2], blank, rtol=1e-6)
    np.testing.assert_allclose(vectors[1], unit(fake_vector("coffee", 8)), rtol=1e-5)

    assert embed_texts(["", " "], embedder=embedder).shape == (2, 8)
    assert len(fake.embedding_requests) == 1  # nothing to send, dimensions known


FAULTS: list[tuple[str, Embeddings, type[EmbeddingError]]] = [
    ("http 500", Embeddings(status=500), EmbeddingUnavailable),
    ("http 503", Embeddings(status=503), EmbeddingUnavailable),
    ("http 429", Embeddings(status=429), EmbeddingUnavailable),
    ("http 401", Embeddings(status=401), EmbeddingMisconfigured),
    ("http 404", Embeddings(status=404), EmbeddingMisconfigured),
    ("http 400", Embeddings(status=400), EmbeddingError),
    ("nan", Embeddings(corrupt="nan"), BadEmbedding),
    ("null", Embeddings(corrupt="null"), BadEmbedding),
    ("malformed json", Embeddings(corrupt="malformed"), BadEmbedding),
    ("one vector short", Embeddings(corrupt="short"), BadEmbedding),
    ("wrong dimension", Embeddings(dim=16, honor_dimensions=False), BadEmbedding),
]


@pytest.mark.parametrize(("script", "error"), [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
@pytest.mark.parametrize("dimensions", [8, None], ids=["configured", "learned"])
def test_openai_fault_is_an_embedding_error(
    fake: FakeOpenAI,
    make: MakeEmbedder,
    script: Embeddings,
    error: type[EmbeddingError],
    dimensions: int | None,
):
    embedder = make(dimensions=dimensions)
    if dimensions is None and script.dim != 8:
        assert embedder.dim == 8  # learned from a first answer; then the server changes
    fake.embeddings = script
    with pytest.raises(EmbeddingError) as caught:
        embed_texts(["one", "two"], embedder=embedder)
    assert type(caught.value) is error


@pytest.mark.timeout(30)  # the guard against a hang: the server would wait 120 s
def test_openai_slow_server_is_unavailable_after_the_timeout(fake: FakeOpenAI, make: MakeEmbedder):
    fake.embeddings = Embeddings(delay=120)
    embedder = make(timeout=0.5, dimensions=8)
    with pytest.raises(EmbeddingUnavailable, match=r"did not answer within 0\.5 s"):
        embed_texts(["anyone there?"], embedder=embedder)
    assert len(fake.embedding_requests) == 1  # no retry


@pytest.mark.timeout(30)
def test_openai_trickling_server_is_unavailable_after_the_timeout(
    fake: FakeOpenAI, make: MakeEmbedder
):
    """QA (HIGH): a server that sent its headers, then its body a byte at a time, never
    let one read wait past the timeout, so the request went on for as long as the body
    lasted (40 s), and the search with it. The timeout bounds the whole request."""
    import time

    fake.embeddings = Embeddings(trickle=0.2)
    embedder = make(timeout=1.0, dimensions=8)
    began = time.monotonic()
    with pytest.raises(EmbeddingUnavailable, match=r"did not answer within 1 s"):
        embed_texts(["anyone there?"], embedder=embedder)
    assert time.monotonic() - began < 10  # the body alone takes minutes


@pytest.mark.timeout(30)
def test_openai_server_down_is_unavailable(make: MakeEmbedder, fake: FakeOpenAI):
    embedder = make(dimensions=8)
    fake.stop()  # its port now refuses connections
    with pytest.raises(EmbeddingUnavailable, match="cannot be reached"):
        embed_texts(["hello"], embedder=embedder)
    learning = make(dimensions=None)
    with pytest.raises(EmbeddingUnavailable):
        learning.name  # noqa: B018  (the probe fails like any request)


def test_openai_refuses_unusable_configuration():
    bad: list[dict[str, Any]] = [{"dimensions": 0}, {"timeout": 0}, {"batch_size": 0}]
    for kwargs in bad:
        with pytest.raises(EmbeddingMisconfigured):
            OpenAIEmbedder(MODEL, base_url="http://127.0.0.1:9/v1", **kwargs)
    with pytest.raises(EmbeddingMisconfigured):
        OpenAIEmbedder("", base_url="http://127.0.0.1:9/v1")


# --- the registry: settings choose the embedder --------------------------------------


class TinyEmbedder(Embedder):
    """A real, deterministic embedder for the registry tests: letter counts a and b."""

    name = "tests/tiny@2"
    dim = 2

    def embed_batch(self, texts: list[str]) -> Any:
        return [[t.count("a") + 1, t.count("b") + 1] for t in texts]


def tiny_embedder() -> TinyEmbedder:
    return TinyEmbedder()


def not_an_embedder() -> object:
    return object()


def broken_factory() -> Embedder:
    raise RuntimeError("cannot start")


def test_measure_reports_quality_and_speed_of_any_embedder():
    table = report(TinyEmbedder())
    assert table.startswith("## tests/tiny@2 (2 dimensions)")
    for row in ("| Chinese (20 pairs) |", "texts/s |", "| one query (median of 200) |"):
        assert row in table


@pytest.fixture
def registry(settings: Any) -> Iterator[Any]:
    """Settings for the registry, with the process's embedder forgotten before and after."""
    settings.FORGE_MEMORY_EMBEDDER = ""
    settings.FORGE_EMBEDDING_MODEL = ""
    reset_embedder()
    yield settings
    reset_embedder()


def test_registry_uses_the_dotted_path_factory(registry: Any):
    registry.FORGE_MEMORY_EMBEDDER = f"{__name__}.tiny_embedder"
    registry.FORGE_EMBEDDING_MODEL = "openai/ignored"  # the factory wins
    embedder = get_embedder()
    assert isinstance(embedder, TinyEmbedder)
    assert get_embedder() is embedder  # built once per process
    vectors = embed_texts(["aab", "b"])
    np.testing.assert_allclose(vectors[0], unit([3, 2]), rtol=1e-6)
    np.testing.assert_allclose(vectors[1], unit([1, 2]), rtol=1e-6)
    reset_embedder()
    assert get_embedder() is not embedder


@pytest.mark.parametrize(
    "path",
    [
        f"{__name__}.no_such_factory",
        "tests.memory.no_such_module.factory",
        "nodots",
        f"{__name__}.not_an_embedder",
        f"{__name__}.broken_factory",
    ],
)
def test_registry_bad_dotted_path_is_misconfigured(registry: Any, path: str):
    registry.FORGE_MEMORY_EMBEDDER = path
    with pytest.raises(EmbeddingMisconfigured):
        get_embedder()
    with pytest.raises(EmbeddingMisconfigured):
        embed_texts(["text"])
    registry.FORGE_MEMORY_EMBEDDER = f"{__name__}.tiny_embedder"
    assert isinstance(get_embedder(), TinyEmbedder)  # a failure is not remembered


def test_registry_default_is_the_shared_offline_embedder(registry: Any):
    assert get_embedder() is OfflineEmbedder.shared()


def test_registry_openai_model_from_settings(registry: Any, fake: FakeOpenAI):
    fake.embeddings = Embeddings(dim=6)
    registry.FORGE_EMBEDDING_MODEL = f"openai/{MODEL}"
    registry.OPENAI_BASE_URL = fake.base_url
    registry.OPENAI_API_KEY = ""
    registry.FORGE_EMBEDDING_TIMEOUT = 2.5
    registry.FORGE_EMBEDDING_DIMENSIONS = 0
    registry.FORGE_EMBEDDING_BATCH = 10
    embedder = get_embedder()
    assert isinstance(embedder, OpenAIEmbedder)
    try:
        assert (embedder.model, embedder.timeout, embedder.batch_size) == (MODEL, 2.5, 10)
        assert embedder.dimensions is None
        assert embed_texts([f"t{i}" for i in range(25)]).shape == (25, 6)
        assert [len(r["input"]) for r in fake.embedding_requests] == [10, 10, 5]
        assert fake.headers[-1]["authorization"] == "Bearer not-needed"
        assert embedder.name == f"openai/{MODEL}@6"
    finally:
        embedder.close()


@pytest.mark.parametrize("model", ["text-embedding-3-small", "openai/", "offline/wordllama"])
def test_registry_embedding_model_without_the_openai_prefix_is_misconfigured(
    registry: Any, model: str
):
    registry.FORGE_EMBEDDING_MODEL = model
    with pytest.raises(EmbeddingMisconfigured, match="openai/<model>"):
        get_embedder()
