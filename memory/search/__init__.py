"""Hybrid search of what was said: full text and dense vectors, fused by rank.

**Documents.** A slice is indexed as one document: its summary and the raw
messages of its range (``MemoryMessage`` rows ``[start_index, end_index)`` of
its unit), cut into tokens by ``memory.text`` (folded, stemmed English words,
CJK bigrams and unigrams), a line per text (the summary first, then each
message). The same tokens go to both engines:

* SQLite: the FTS5 table ``memory_search_fts(body, scope)``; ``body`` holds the
  token lines, ``scope`` the tenant and core (``t<tenant> c<core>``) so a query
  walks only the searched memory's postings. ``MemorySlice.search_rowid`` is the
  document's row; a trigger drops it when the slice is deleted.
* PostgreSQL: ``memory_memoryslice.search_document`` (a ``tsvector`` of the
  distinct tokens, GIN index) and ``search_text`` (the token lines).

Dense vectors (``memory.vectors``) are stored per slice and per message.

**Ranking** (:func:`search`), from the searched memory alone (issue 17: the
index is shared by every tenant, and an engine's own statistics, such as FTS5's
bm25, would let another tenant's rows move the order):

0. *Expansion* (:func:`expansion`): the query's English words that are whole words
   of the offline model bring their nearest words (``memory.embeddings.neighbours``)
   as extra terms, each weighing ``FORGE_MEMORY_EXPANSION_WEIGHT`` x cosine of its idf.
1. *Full text*: BM25 (``k1`` 1.2, ``b`` 0.75) over the searched slices, with
   ``N`` (slices searched), each token's ``n`` (how many of them hold it) and
   the average length counted in the searched memory;
   ``idf = ln(1 + (N - n + 0.5) / (n + 0.5))``. Every slice holding a query
   token is ranked by the sum of the idf of the tokens it holds, and the best
   :data:`RERANK` of them (at least ``limit``) by the full BM25 score of the
   :func:`salient` terms (Latin terms of little weight dropped). For a
   scope of up to :data:`TERMS_CORES_MAX` cores, from the postings this process
   holds per core (``memory.postings``, :func:`held_lexical`); for a wider one,
   by asking the database (term frequencies read from the window's token lines).
   Of a query's distinct tokens, the :data:`TERMS_MAX` that the fewest searched slices
   hold are searched (:func:`informative`; tokens no slice holds take no place), not
   the first: the rare name or place often ends a long question. On the database path
   a query of over :data:`TERMS_POOL` tokens is first cut to the ones the scope holds
   in fewest slices, from one statement counting every token (``fulltext._pool``).
2. *Best message* (:func:`best_message_matches`): the first :data:`PASSAGES` of that
   order (at least ``limit``) by their best
   single message, scored by the sum of the idf of the distinct query tokens it
   holds, plus :data:`NEIGHBOUR_SHARE` of those only its neighbours hold (the answer
   is usually one message, or two turns; a slice's BM25 sums all of them).
3. *Dense*: the query's vector against the searched cores' vectors; a slice
   scores the mean of its summary's cosine and its best message's
   (``vectors.slice_similarity``), above ``FORGE_MEMORY_DENSE_MIN_SIMILARITY``.
4. *Reciprocal-rank fusion*: ``score(s) = Σ w_i / (RRF_K + rank_i(s))`` over the
   three rankings a slice is in (``RRF_K`` = 60, ranks from 1; ``w`` 1 for full
   text, ``FORGE_MEMORY_PASSAGE_WEIGHT`` and ``FORGE_MEMORY_DENSE_WEIGHT``). Ties:
   the better full-text rank, then best-message, then dense, then the newest.
   Hits carry ``rank`` (1, 2, 3 …), never a score.

Inside each hit, its messages are ranked the same way (the query tokens' idf
times ``tf / (tf + k1)`` per message line, and the message's cosine), and the best
:data:`MESSAGES_PER_HIT` are returned.

**Fallbacks.** Vectors off (``FORGE_MEMORY_VECTORS``), no embedder, or an
embedder that fails (``EmbeddingError``): full-text results, with a logged
warning; never an error. A query with no tokens (only stop words, emoji,
punctuation) gives ``[]`` without asking the embedder.

**Indexing.** The AfterRolling consumer (``memory.indexing``) indexes the new
slice (full text, then vectors, one embedder call for its summary and
messages), after the rolling's commit, at once or, during a sweep, in batches
of slices; ``update_memory_unit`` and
``restore_unit`` index on commit. A failing embedder leaves the slice with full
text only (a warning; ``reindex_memory`` embeds it later). ``roll_dialogs``
indexes any slice a dead process left out (:func:`index_pending`).

A query is never handed to the database as a query language: its tokens are
letters and digits only, each searched as one plain term, any of them matching.

**Modules.** :mod:`.query` (a query's terms, their expansion, idf and the salient ones);
:mod:`.fulltext` (step 1, from the held postings or either engine); :mod:`.passages`
(step 2, and a hit's messages); :mod:`.dense` (step 3: the embedder and the query's
vector); :mod:`.fusion` (step 4, and the shapes a search passes around); :mod:`.hybrid`
(:func:`search`); :mod:`.scope` (the searched memory in SQL); :mod:`.documents` and
:mod:`.index` (indexing); :mod:`.snippets`; :mod:`.tables`. A function reads a name
from the module it is defined in, so a test patches the name there
(``memory.search.fulltext.TERMS_CORES_MAX``, ``memory.search.hybrid._query_vector``);
patching ``memory.search.<name>`` replaces only this package's re-export, which is what
callers outside the package read (``memory.indexing``: ``search.index_docs``).
"""

from __future__ import annotations

from .dense import dense_minimum, dense_query, embedder_or_none, forget_failures, vectors_enabled
from .documents import Document, doc_of, document, load_docs, slice_created
from .fulltext import held_lexical, holding_all, lexical
from .fusion import Candidate, Found, Lexical, dense_weight, fuse, passage_weight
from .hybrid import search
from .index import (
    index_docs,
    index_fulltext,
    index_pending,
    index_slice,
    index_slices,
    index_vectors,
)
from .passages import best_message_matches, best_messages
from .query import (
    EXPANSION_MAX,
    LIMIT_MAX,
    QUERY_MAX,
    TERMS_MAX,
    TERMS_POOL,
    expansion,
    expansion_weight,
    informative,
    preferred,
    required,
    salient,
    terms,
    tokens,
    weight,
)
from .scope import Scope, candidates, core_token, tenant_token, with_units
from .snippets import snippet
from .tables import FTS_TABLE

__all__ = [
    "EXPANSION_MAX",
    "FTS_TABLE",
    "LIMIT_MAX",
    "QUERY_MAX",
    "TERMS_MAX",
    "TERMS_POOL",
    "Candidate",
    "Document",
    "Found",
    "Lexical",
    "Scope",
    "best_message_matches",
    "best_messages",
    "candidates",
    "core_token",
    "dense_minimum",
    "dense_query",
    "dense_weight",
    "doc_of",
    "document",
    "embedder_or_none",
    "expansion",
    "expansion_weight",
    "forget_failures",
    "fuse",
    "held_lexical",
    "holding_all",
    "index_docs",
    "index_fulltext",
    "index_pending",
    "index_slice",
    "index_slices",
    "index_vectors",
    "informative",
    "lexical",
    "load_docs",
    "passage_weight",
    "preferred",
    "required",
    "salient",
    "search",
    "slice_created",
    "snippet",
    "tenant_token",
    "terms",
    "tokens",
    "vectors_enabled",
    "weight",
    "with_units",
]
