from datetime import datetime, timedelta, timezone

import pytest

from langmem_trpc.service.search import (
    CorpusStats,
    KeywordDoc,
    Legs,
    QueryTerms,
    deduplicate,
    keyword_score,
    merge_kind_fallback,
    passes_time,
    rrf_fuse,
)
from langmem_trpc.types import Entry, FusionSettings, Kind, Memory, SearchOptions

from .search_driver import execute_search

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def entry(key: str, text: str, kind: Kind = Kind.FACT, minutes: int = 0) -> Entry:
    at = T0 + timedelta(minutes=minutes)
    return Entry(
        id=key,
        app_name="a",
        user_id="u",
        memory=Memory(text=text, kind=kind),
        created_at=at,
        updated_at=at,
    )


def score(query: str, text: str, corpus: list[str]) -> float:
    docs = [KeywordDoc.build(t, []) for t in corpus]
    return keyword_score(
        QueryTerms.build(query), KeywordDoc.build(text, []), CorpusStats.from_docs(docs)
    )


CORPUS = [
    "Production runs Go 1.23",
    "Enjoys hiking in the Alps",
    "Has two cats named Tom and Jerry",
    "Works as a nurse in Lyon",
]


def test_keyword_score_is_absolute_and_bounded():
    full = score("production go", CORPUS[0], CORPUS)
    partial = score("production rust", CORPUS[0], CORPUS)
    assert 0 < partial < full <= 1.0
    assert score("volcano", CORPUS[0], CORPUS) == 0.0


def test_keyword_score_does_not_depend_on_the_best_hit():
    # the same document scores the same whether or not a better hit exists
    alone = score("hiking alps", CORPUS[1], CORPUS)
    assert alone == score("hiking alps", CORPUS[1], CORPUS)
    assert alone > 0.6


def test_keyword_score_finds_inflected_forms():
    """Snowball stemming: "hike" finds "Hiked", "cat" finds "cats"."""
    corpus = [*CORPUS, "Hiked the ridge at dawn"]
    assert score("hike", corpus[-1], corpus) > 0
    assert score("hiking", corpus[-1], corpus) == score("hike", corpus[-1], corpus)
    assert score("cat", CORPUS[2], CORPUS) > 0


def test_keyword_score_is_bm25_ordered():
    """Repeats saturate, longer memories weigh a match less, rarer terms weigh more."""
    corpus = ["tea", "tea tea tea", "tea with milk and sugar every day", "coffee", "coffee beans"]
    once, thrice, long = (score("tea", t, corpus) for t in corpus[:3])
    assert thrice > once > long > 0


def test_relevance_is_the_idf_share_and_strictly_increasing():
    from langmem_trpc.service.bm25 import RELEVANCE_KNEE, relevance

    assert relevance(0.5, 1.0) == 0.5
    assert relevance(RELEVANCE_KNEE, 1.0) == pytest.approx(RELEVANCE_KNEE)
    above = [relevance(x, 1.0) for x in (0.95, 1.0, 1.5, 2.2)]
    assert above == sorted(above) and len(set(above)) == 4 and above[-1] < 1.0


def test_symbol_queries_fall_back_to_a_literal_match():
    docs = ["Writes C# at work", "Writes Python"]
    assert score("C#", docs[0], docs) == pytest.approx(0.35)
    assert score("C#", docs[1], docs) == 0.0


def test_rrf_matches_the_formula():
    fused = rrf_fuse([["a", "b"], ["b", "c"]], k=60)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["c"] == pytest.approx(1 / 62)


def test_deduplicate_keeps_the_better_ranked_copy():
    items = [
        entry("1", "adopted a golden retriever named Max"),
        entry("2", "works night shifts"),
        entry("3", "adopted a golden retriever named Max!"),
    ]
    assert [e.id for e in deduplicate(items)] == ["1", "2"]


def test_merge_kind_fallback_orders_wanted_kind_first():
    primary = [entry("e1", "x", Kind.EPISODE)]
    fallback = [entry("f1", "y"), entry("e1", "x", Kind.EPISODE), entry("e2", "z", Kind.EPISODE)]
    assert [e.id for e in merge_kind_fallback(primary, fallback, Kind.EPISODE)] == [
        "e1",
        "e2",
        "f1",
    ]


def test_passes_time_lets_undated_entries_through():
    assert passes_time(None, T0, T0)
    assert passes_time(T0, T0, T0)
    assert not passes_time(T0, T0 + timedelta(seconds=1), None)
    assert not passes_time(T0, None, T0 - timedelta(seconds=1))


def test_hybrid_orders_by_rrf_and_reports_absolute_score():
    a, b, c = entry("a", "alpha"), entry("b", "beta"), entry("c", "gamma")
    legs = Legs(vector=[(a, 0.9), (b, 0.5)], keyword=[(b, 0.8), (c, 0.4)])
    hits = execute_search(plain_rrf(query="q", hybrid=True), lambda kind, pool: legs)
    assert [h.id for h in hits] == ["b", "a", "c"]
    assert hits[0].score == 0.8 and hits[0].rrf_score == pytest.approx(1 / 62 + 1 / 61)


def test_non_hybrid_uses_the_vector_leg_with_threshold():
    a, b = entry("a", "alpha"), entry("b", "beta")
    legs = Legs(vector=[(a, 0.9), (b, 0.2)], keyword=[(b, 0.8)])
    hits = execute_search(SearchOptions(query="q", hybrid=False), lambda kind, pool: legs)
    assert [(h.id, h.score) for h in hits] == [("a", 0.9)]


def test_empty_query_never_fetches():
    def fetch(kind, pool):
        raise AssertionError("fetch must not run")

    assert execute_search(SearchOptions(query="  "), fetch) == []


def test_fusion_settings_are_per_call():
    """Two calls with different FusionSettings rank differently; neither changes the other."""
    from langmem_trpc.types import FusionSettings

    a = entry("a", "alpha").model_copy(
        update={"memory": Memory(text="alpha", participants=["Caroline"])}
    )
    b = entry("b", "beta").model_copy(update={"memory": Memory(text="beta", participants=["Mel"])})
    legs = Legs(vector=[(b, 0.9), (a, 0.5)], keyword=[])
    query = "what did caroline say"
    boosted = execute_search(SearchOptions(query=query), lambda kind, pool: legs)
    plain = execute_search(
        SearchOptions(query=query, fusion=FusionSettings(participant_boost=0.0)),
        lambda kind, pool: legs,
    )
    again = execute_search(SearchOptions(query=query), lambda kind, pool: legs)
    assert [h.id for h in boosted] == ["a", "b"] == [h.id for h in again]
    assert [h.id for h in plain] == ["b", "a"]


def test_fusion_min_pool_sets_the_candidate_pool():
    from langmem_trpc.types import FusionSettings

    pools: list[int] = []

    def fetch(kind, pool):
        pools.append(pool)
        return Legs(vector=[], keyword=[])

    execute_search(SearchOptions(query="q", fusion=FusionSettings(min_pool=30)), fetch)
    execute_search(SearchOptions(query="q", max_results=20), fetch)
    assert pools == [30, 100]


def test_the_pool_does_not_grow_with_max_results_and_deeper_tiers_only_append():
    """A page is a slice of one order: the first tier's pool is `min_pool` for any
    max_results; a 4x deeper tier is fetched only when the first ranked too few and
    a leg came back full, and its new hits follow the first tier's."""
    from langmem_trpc.types import FusionSettings

    entries = [entry(f"e{i:03d}", f"note {i}") for i in range(300)]
    pools: list[int] = []

    def fetch(kind, pool):
        pools.append(pool)
        # the keyword leg's best `pool`, scores falling from 0.9: deeper pools hold more
        return Legs(
            vector=None, keyword=[(e, 0.9 - i / 1000) for i, e in enumerate(entries[:pool])]
        )

    fusion = FusionSettings(min_pool=20)
    for size in (5, 20, 50):
        execute_search(SearchOptions(query="note", max_results=size, fusion=fusion), fetch)
    assert pools == [20, 20, 20, 80]
    short = execute_search(SearchOptions(query="note", max_results=20, fusion=fusion), fetch)
    long = execute_search(SearchOptions(query="note", max_results=150, fusion=fusion), fetch)
    assert [e.id for e in long[:20]] == [e.id for e in short]
    assert len(long) == 150 and len({e.id for e in long}) == 150


def test_question_words_weigh_little_in_the_keyword_score():
    """ "what did" matching must not outweigh the content words of a question."""
    from langmem_trpc.types import FusionSettings

    corpus = ["What did you do today?", "Caroline researched adoption agencies", "hello there"]
    function_only = score("What did Caroline research?", corpus[0], corpus)
    content = score("What did Caroline research?", corpus[1], corpus)
    assert content > function_only
    weights = dict(QueryTerms.build("What did Caroline research").weighted)
    assert weights["what"] < 0.5 and weights["carolin"] == 1.0
    off = dict(QueryTerms.build("What did Caroline research", question_word_weight=1.0).weighted)
    assert off["what"] == 1.0
    options = SearchOptions(query="What did", fusion=FusionSettings(question_word_weight=0.3))
    assert dict(QueryTerms.of(options).weighted)["what"] == 0.3


def test_switching_question_words_off_changes_the_ranking():
    """question_word_weight 1.0 (off): a memory of only "what did" words outranks
    the one holding the question's content words; at the default 0.1 it does not
    even pass the keyword floor."""
    from langmem_trpc import InMemoryMemoryService, UserKey
    from langmem_trpc.types import FusionSettings

    service = InMemoryMemoryService()
    user = UserKey("app", "u")
    for text in [
        "What did you do, and what did you see?",
        "Caroline researched adoption agencies",
        "hello there",
        "we went hiking",
        "dinner was nice",
    ]:
        service.add(user, text)

    def texts(weight: float) -> list[str]:
        options = SearchOptions(hybrid=False, fusion=FusionSettings(question_word_weight=weight))
        return [h.text for h in service.search(user, "What did Caroline research?", options)]

    assert texts(0.1) == ["Caroline researched adoption agencies"]
    assert texts(1.0)[0] == "What did you do, and what did you see?"
    service.close()


def test_score_fusion_orders_by_scores_and_keeps_plain_rrf():
    """fusion_method="scores": a hit strong in one leg beats one weak in both;
    rrf_score stays the RRF sum. "rrf" (k 60) orders by ranks: the hit both legs
    return wins."""
    a, b = entry("a", "alpha"), entry("b", "beta")
    legs = Legs(vector=[(b, 0.30)], keyword=[(a, 0.95), (b, 0.20)])
    equal = FusionSettings(vector_weight=1.0)
    hits = execute_search(
        SearchOptions(query="q", fusion_method="scores", fusion=equal), lambda kind, pool: legs
    )
    assert [h.id for h in hits] == ["a", "b"]
    assert hits[1].rrf_score == pytest.approx(1 / 61 + 1 / 62)
    plain = execute_search(plain_rrf(query="q"), lambda k, p: legs)
    assert [h.id for h in plain] == ["b", "a"]
    assert {h.id: h.rrf_score for h in plain} == {h.id: h.rrf_score for h in hits}


def test_rrf_ranks_ignore_float_noise_in_leg_scores():
    """Cosines of identical vectors differ by ~1e-7 between an ANN index and an exact
    scan (and can exceed 1.0): such hits share an RRF rank, and the newer one wins the
    tie (before, the noise alone decided the rank and the older copies came first)."""
    old1, old2 = entry("old1", "pending fact 4"), entry("old2", "pending fact 5")
    new = entry("new", "pending fact 2", minutes=5)
    legs = Legs(
        vector=[(old1, 1.0000001), (old2, 1.0000001), (new, 0.9999999)],
        keyword=[(old1, 0.5), (old2, 0.5), (new, 0.5)],
    )
    hits = execute_search(plain_rrf(query="q", max_results=1), lambda kind, pool: legs)
    assert [h.id for h in hits] == ["new"]
    assert hits[0].rrf_score == pytest.approx(2 / 61)


def test_rrf_ranks_each_leg_by_its_reported_score():
    """A leg that arrives out of score order (PostgreSQL's keyword rows come in ts_rank
    order) is ranked by its scores: equal scores share rank 1, and the newest of the
    tied copies wins (before, a copy listed after a weaker hit got a worse rank)."""
    old = [entry(f"old{i}", f"pending fact {i}") for i in range(3)]
    weak, new = entry("weak", "pending fact one"), entry("new", "pending fact 2", minutes=5)
    legs = Legs(
        vector=[*((e, 1.0) for e in old), (new, 1.0), (weak, 0.7)],
        keyword=[*((e, 0.97) for e in old), (weak, 0.75), (new, 0.97)],
    )
    hits = execute_search(plain_rrf(query="q", max_results=1), lambda kind, pool: legs)
    assert [h.id for h in hits] == ["new"]
    assert hits[0].rrf_score == pytest.approx(2 / 61)


def test_default_fusion_is_the_weighted_score_mean():
    """SearchOptions() orders hybrid hits by the mean of the legs' scores, the vector
    leg's half weighted 0.75 (chosen on LoCoMo's dev half, docs/bench-locomo.md round 7);
    rrf_score is the RRF sum with the same weights, k 60."""
    a, b = entry("a", "alpha"), entry("b", "beta")
    legs = Legs(vector=[(b, 0.30)], keyword=[(a, 0.95), (b, 0.20)])
    options = SearchOptions()
    assert options.fusion_method == "scores" and options.fusion.vector_weight == 0.75
    assert options.rrf_k == 60
    default = execute_search(SearchOptions(query="q"), lambda k, p: legs)
    assert [h.id for h in default] == ["a", "b"]  # 0.95 / 2 > (0.75 x 0.30 + 0.20) / 2
    assert default[1].rrf_score == pytest.approx(0.75 / 61 + 1 / 62)


def plain_rrf(**options: object) -> SearchOptions:
    """The reference system's fusion: RRF, k 60, equal legs."""
    return SearchOptions(
        fusion_method="rrf",
        fusion=FusionSettings(vector_weight=1.0),
        **options,  # type: ignore[arg-type]
    )


def test_rrf_k_changes_the_order():
    """RRF's k matters: a hit ranked 1st and 10th beats one ranked 4th in both legs
    at k=1 (1/2 + 1/11 > 2/5) and loses to it at k=60 (1/61 + 1/70 < 2/64)."""
    first, both = entry("first", "x"), entry("both", "y")
    fill = [entry(f"f{i}", f"f{i}") for i in range(16)]
    vector = [first, *fill[:2], both, *fill[2:8]]
    keyword = [*fill[8:11], both, *fill[11:16], first]
    legs = Legs(
        vector=[(e, 1 - i / 20) for i, e in enumerate(vector)],
        keyword=[(e, 1 - i / 20) for i, e in enumerate(keyword)],
    )

    def ids(k: int) -> list[str]:
        options = SearchOptions(query="q", rrf_k=k, fusion_method="rrf", fusion=_no_steps())
        return [h.id for h in execute_search(options, lambda kind, pool: legs)]

    assert ids(1).index("first") < ids(1).index("both")
    assert ids(60).index("both") < ids(60).index("first")


def _no_steps():
    from langmem_trpc.types import FusionSettings

    return FusionSettings(participant_boost=0, context_weight=0, time_boost=0, when_boost=0)


def test_session_context_lifts_turns_of_the_best_session():
    """context_weight: a hit shares in the best score of its session (same event time)."""
    from langmem_trpc.types import FusionSettings

    def at(key: str, day: int) -> Entry:
        when = datetime(2023, 5, day, tzinfo=timezone.utc)
        return entry(key, key).model_copy(update={"memory": Memory(text=key, event_time=when)})

    top, mate, other = at("top", 1), at("mate", 1), at("other", 2)
    legs = Legs(vector=[(top, 0.9), (other, 0.8), (mate, 0.7)], keyword=[])
    on = execute_search(
        SearchOptions(query="q", fusion=FusionSettings(context_weight=3.0)),
        lambda kind, pool: legs,
    )
    off = execute_search(
        SearchOptions(query="q", fusion=FusionSettings(context_weight=0.0)),
        lambda kind, pool: legs,
    )
    assert [h.id for h in on].index("mate") < [h.id for h in on].index("other")
    assert [h.id for h in off] == ["top", "other", "mate"]


def test_query_periods_reads_absolute_dates_only():
    from langmem_trpc.service.periods import Period, query_periods

    assert query_periods("What did she paint in July 2023?") == [Period(2023, 7, None)]
    assert query_periods("What did he say on 3 June, 2023?") == [Period(2023, 6, 3)]
    assert query_periods("on October 13, 2023") == [Period(2023, 10, 13)]
    assert query_periods("camping in June") == [Period(None, 6, None)]
    assert query_periods("trips in 2022") == [Period(2022, None, None)]
    assert query_periods("what may he do last year") == []


def test_time_preference_is_soft():
    """A candidate in the named month ranks first; the others stay (no filter)."""
    from langmem_trpc.types import FusionSettings

    def dated(key: str, when: datetime) -> Entry:
        base = entry(key, key)
        return base.model_copy(update={"memory": Memory(text=key, event_time=when)})

    may = dated("may", datetime(2023, 5, 20, tzinfo=timezone.utc))
    june = dated("june", datetime(2023, 6, 2, tzinfo=timezone.utc))
    legs = Legs(vector=[(june, 0.6), (may, 0.5)], keyword=[])
    query = "what did she paint in May 2023"
    hits = execute_search(SearchOptions(query=query), lambda kind, pool: legs)
    assert [h.id for h in hits] == ["may", "june"]
    off = execute_search(
        SearchOptions(query=query, fusion=FusionSettings(time_boost=0.0)), lambda kind, pool: legs
    )
    assert [h.id for h in off] == ["june", "may"]


def test_when_questions_prefer_hits_that_say_a_time():
    """A "when did" question lifts the turn that dates the event; other questions are untouched."""
    from langmem_trpc.types import FusionSettings

    rex = entry("rex", "Rex loves the beach and chasing balls")
    dated = entry("dated", "I adopted him last week from the shelter")
    legs = Legs(vector=[(rex, 0.6), (dated, 0.5)], keyword=[])

    def ids(query: str, **knobs: float) -> list[str]:
        options = SearchOptions(query=query, fusion=FusionSettings(**knobs))
        return [h.id for h in execute_search(options, lambda kind, pool: legs)]

    assert ids("When did Ann adopt Rex?") == ["dated", "rex"]
    assert ids("What year did Ann adopt Rex?") == ["dated", "rex"]
    assert ids("When did Ann adopt Rex?", when_boost=0.0) == ["rex", "dated"]
    assert ids("What does Rex love?") == ["rex", "dated"]


def test_decomposition_votes_for_each_content_word():
    """With decompose_weight, a hit matching one sub-query word gains on one matching none."""
    from langmem_trpc.types import FusionSettings

    a, b, c = entry("a", "pottery class"), entry("b", "weather today"), entry("c", "camping trip")
    legs = Legs(vector=[(b, 0.5), (c, 0.49), (a, 0.48)], keyword=[])
    options = SearchOptions(
        query="pottery and camping", fusion=FusionSettings(decompose_weight=1.0)
    )
    hits = execute_search(options, lambda kind, pool: legs)
    assert hits[-1].id == "b"


@pytest.mark.parametrize("max_results", [1, 3, 5, 50])
def test_ranking_a_prefix_equals_ranking_everything(max_results: int):
    """Only hits at or above the cut are ranked; ties at the cut fall to the full tie-break."""
    legs = Legs(
        vector=[
            (entry(f"v{i}", f"text {i}", minutes=i % 4), 0.9 - 0.1 * (i // 3)) for i in range(9)
        ],
        keyword=[(entry(f"k{i}", f"word {i}", minutes=-i), 0.5) for i in range(6)],
    )
    for hybrid in (True, False):
        options = SearchOptions(query="text word", hybrid=hybrid, order_by_event_time=True)
        everything = execute_search(
            options.model_copy(update={"max_results": 1000}), lambda *_: legs
        )
        limited = execute_search(
            options.model_copy(update={"max_results": max_results}), lambda *_: legs
        )
        assert [(e.id, e.score, e.rrf_score) for e in limited] == [
            (e.id, e.score, e.rrf_score) for e in everything[:max_results]
        ]


def test_relevance_reads_as_reconcile_thresholds_expect():
    """Reconcile's 0.30 / 0.60 / 0.90 on keyword relevance: the same text scores above
    0.90, a memory holding about half of the query's idf mass near 0.5, no overlap 0."""
    corpus = [
        "Production runs Go 1.23",
        "Enjoys hiking in the Alps",
        "Has two cats named Tom and Jerry",
        "Works as a nurse in Lyon",
    ]
    assert score("Production runs Go 1.23", corpus[0], corpus) >= 0.90
    half = score("hiking nurse", corpus[1], corpus)
    assert 0.30 <= half < 0.60
    assert score("volcano eruption", corpus[2], corpus) == 0.0


def test_the_when_and_time_cues_come_from_the_given_language():
    """`execute_search(..., language)`: a German `Language` with its own cues lifts the
    dated hit for "Wann ...?" and the hit in "Mai 2023"; plain German (no cues) and
    English (no German words) leave the vector order."""
    import re

    from langmem_trpc.service.language import ENGLISH, Language, language

    german = Language(
        name="german",
        month_names=tuple(
            "januar februar märz april mai juni juli august september oktober november dezember".split()
        ),
        time_words=frozenset({"gestern", "mai", "juni"}),
        when_question=re.compile(r"^\s*wann\b", re.I),
    )
    rex = entry("rex", "Rex liebt den Strand")
    dated = entry("dated", "Ich habe ihn gestern adoptiert")
    when_legs = Legs(vector=[(rex, 0.6), (dated, 0.5)], keyword=[])
    may = entry("may", "may").model_copy(
        update={"memory": Memory(text="mai", event_time=datetime(2023, 5, 20, tzinfo=timezone.utc))}
    )
    june = entry("june", "june").model_copy(
        update={"memory": Memory(text="juni", event_time=datetime(2023, 6, 2, tzinfo=timezone.utc))}
    )
    time_legs = Legs(vector=[(june, 0.6), (may, 0.5)], keyword=[])

    def ids(legs: Legs, query: str, lang: Language) -> list[str]:
        return [h.id for h in execute_search(SearchOptions(query=query), lambda k, p: legs, lang)]

    assert ids(when_legs, "Wann hat Ann Rex adoptiert?", german) == ["dated", "rex"]
    assert ids(when_legs, "Wann hat Ann Rex adoptiert?", language("german")) == ["rex", "dated"]
    assert ids(when_legs, "Wann hat Ann Rex adoptiert?", ENGLISH) == ["rex", "dated"]
    assert ids(time_legs, "Was malte sie im Mai 2023?", german) == ["may", "june"]
    assert ids(time_legs, "Was malte sie im Mai 2023?", ENGLISH) == ["june", "may"]


def _decomposed_by_full_tokenisation(fused, best, query, weight, k):
    """The reference: every candidate fully tokenised (`KeywordDoc.build`), each
    sub-query scored over all of them, as decomposition was first written."""
    from langmem_trpc.service.documents import keys_of
    from langmem_trpc.service.language import ENGLISH
    from langmem_trpc.service.search import _sub_queries, named_participants

    docs = {key: KeywordDoc.build(e.memory.text, keys_of(e.memory)) for key, (e, _) in best.items()}
    stats = CorpusStats.from_docs(docs.values())
    out = dict(fused)
    subs = _sub_queries(query, named_participants(query, [e for e, _ in best.values()]), ENGLISH)
    for sub in subs:
        scored = [(key, keyword_score(sub, doc, stats)) for key, doc in docs.items()]
        ranked = sorted((h for h in scored if h[1] > 0), key=lambda h: -h[1])
        for rank, (key, s) in enumerate(ranked, start=1):
            out[key] += weight / len(subs) * (s / 2 if k is None else 1 / (k + rank))
    return out


@pytest.mark.parametrize("k", [60, None])
@pytest.mark.parametrize(
    "query",
    [
        "pottery and camping",  # clauses
        "Did Caroline paint sunsets at the lake?",  # content words
        "猫咪 喜欢 鱼",  # CJK words
        "hello",  # no sub-query
    ],
)
def test_decomposition_equals_scoring_fully_tokenised_candidates(query, k):
    """Decomposition tokenises each candidate once, counting only the sub-queries' terms;
    its votes equal those of the fully tokenised pool, to the last bit."""
    from langmem_trpc.service.language import ENGLISH
    from langmem_trpc.service.search import _decomposed
    from langmem_trpc.types import FusionSettings

    texts = [
        ("Caroline painted sunsets by the lake, sunsets again", ["painting", "Caroline"]),
        ("pottery class on Tuesday", []),
        ("camping trip with the kids; camping gear", ["outdoors"]),
        ("我的猫咪很喜欢吃鱼", ["猫咪"]),
        ("Lake Tahoe camping and pottery", ["trip"]),
        ("Melanie runs marathons", []),
    ]
    best = {}
    for i, (text, topics) in enumerate(texts):
        e = entry(f"e{i}", text).model_copy(
            update={"memory": Memory(text=text, topics=topics, participants=["Caroline"])}
        )
        best[e.id] = (e, 0.5 - i / 100)
    fused = {key: 0.01 * i for i, key in enumerate(best)}
    tuning = FusionSettings(decompose_weight=1.0)
    got = _decomposed(fused, best, query, tuning, k, ENGLISH)
    assert got == _decomposed_by_full_tokenisation(fused, best, query, 1.0, k)
    if query != "hello":
        assert got != fused  # the sub-queries voted


@pytest.mark.parametrize("method", ["rrf", "scores"])
def test_vector_weight_weighs_the_vector_leg_in_the_fusion(method):
    """`FusionSettings.vector_weight`: below 1 the keyword leg's best hit leads, above 1 the
    vector leg's; rrf_score carries the weighted sum."""
    from langmem_trpc.types import FusionSettings

    a, b = entry("a", "vector hit"), entry("b", "keyword hit")
    legs = Legs(vector=[(a, 0.8)], keyword=[(b, 0.8)])

    def ranked(weight: float) -> list[tuple[str, float | None]]:
        options = SearchOptions(
            query="hit", fusion_method=method, fusion=FusionSettings(vector_weight=weight)
        )
        return [(h.id, h.rrf_score) for h in execute_search(options, lambda *_: legs)]

    assert [key for key, _ in ranked(0.5)] == ["b", "a"]
    assert [key for key, _ in ranked(2.0)] == ["a", "b"]
    assert dict(ranked(0.5))["a"] == pytest.approx(0.5 / 61)


def test_rrf_ranks_share_exactly_when_scores_agree_to_six_decimals():
    """The tie check skips rounding for neighbours far apart; the ranks equal those of
    rounding every clipped score (a reference written out here)."""
    import random

    from langmem_trpc.service.search import RANK_TIE_DIGITS, _rrf_with_ties

    rng = random.Random(3)
    base = [1.2, 1.0, 0.9999996, 0.99999949, 0.5, 0.5, 0.5000004, 0.4999996, 0.3, -0.1]
    for trial in range(50):
        scores = sorted(base + [rng.random() for _ in range(20)], reverse=True)
        if trial % 2:
            scores += [scores[-1] - 1e-7 * i for i in range(1, 4)]
        leg = [(entry(f"e{i}", "t"), s) for i, s in enumerate(scores)]
        expected: dict[str, float] = {}
        rank, previous = 0, None
        for position, (e, raw) in enumerate(leg, start=1):
            rounded = round(max(0.0, min(raw, 1.0)), RANK_TIE_DIGITS)
            if rounded != previous:
                rank, previous = position, rounded
            expected[e.id] = 1.0 / (60 + rank)
        assert _rrf_with_ties([leg], 60) == expected


def test_the_plan_names_every_fetch_up_front():
    """`plan_search` is a plain value: the kind fallback's unfiltered fetch is planned
    with the kind's, and a blank query plans none."""
    from langmem_trpc.service.search import SearchPlan, plan_search

    fallback = SearchOptions(query="q", kind=Kind.EPISODE, kind_fallback=True, max_results=5)
    assert plan_search(fallback) == SearchPlan((Kind.EPISODE, None), 100, None)
    assert plan_search(SearchOptions(query="q", kind=Kind.FACT)) == SearchPlan(
        (Kind.FACT,), 100, 10
    )
    assert plan_search(SearchOptions(query="q", deduplicate=True)).limit is None
    assert plan_search(SearchOptions(query=" ")).kinds == ()


def test_rank_is_a_pure_function_of_the_plan_and_the_fetched_legs():
    """Ranking the same fetched legs twice gives the same hits, and the fallback's legs
    are merged after the wanted kind's when it ranks fewer than 3."""
    from langmem_trpc.service.search import plan_search, rank_search

    ep, f1, f2 = entry("e", "alpha", Kind.EPISODE), entry("f1", "alpha"), entry("f2", "alpha")
    options = SearchOptions(query="alpha", kind=Kind.EPISODE, kind_fallback=True, hybrid=False)
    plan = plan_search(options)
    fetched = {
        Kind.EPISODE: Legs(vector=[(ep, 0.5)], keyword=[]),
        None: Legs(vector=[(f1, 0.9), (ep, 0.5), (f2, 0.4)], keyword=[]),
    }
    first = rank_search(plan, fetched, options)
    assert [h.id for h in first] == ["e", "f1", "f2"]
    assert rank_search(plan, fetched, options) == first


def test_a_keyword_scorer_equals_keyword_score_and_stats_keep_no_memo():
    from dataclasses import fields

    from langmem_trpc.service.bm25 import KeywordScorer

    docs = [KeywordDoc.build(t, []) for t in CORPUS]
    stats = CorpusStats.from_docs(docs)
    terms = QueryTerms.build("what runs Go in production")
    scorer = KeywordScorer.of(terms, stats)
    assert [scorer.score(d) for d in docs] == [keyword_score(terms, d, stats) for d in docs]
    assert [f.name for f in fields(CorpusStats)] == [
        "n_docs",
        "df",
        "avg_content_len",
        "avg_topic_len",
    ]
    assert stats.__dict__.keys() == {"n_docs", "df", "avg_content_len", "avg_topic_len"}


def test_time_mentions_are_bounded_and_belong_to_their_owner():
    from langmem_trpc.service.periods import TimeMentions, says_time

    first, second = TimeMentions(max_texts=2), TimeMentions(max_texts=2)
    texts = ["We met yesterday", "I like tea", "Back in 2021", "On Sunday"]
    assert [first(t) for t in texts] == [says_time(t) for t in texts] == [True, False, True, True]
    assert len(first) == 2 and len(second) == 0
    first.clear()
    assert len(first) == 0


# Round 11 (docs/bench-locomo.md): capped and reply-only neighbours, implied times.


def _turn(key: str, text: str, minute: int, people: tuple[str, ...] = ()) -> Entry:
    at = T0 + timedelta(minutes=minute)
    memory = Memory(text=text, kind=Kind.EPISODE, event_time=T0, participants=list(people))
    return Entry(id=key, app_name="a", user_id="u", memory=memory, created_at=at, updated_at=at)


def _order(legs: Legs, query: str = "pottery", **fusion: object) -> list[str]:
    tuning = FusionSettings(context_weight=0.0, **fusion)  # type: ignore[arg-type]
    options = SearchOptions(query=query, fusion=tuning)
    return [e.id for e in execute_search(options, lambda kind, pool: legs)]


def test_a_capped_neighbour_never_overtakes_the_reply_it_borrows_from():
    """Uncapped, a turn with 0.25 x its reply's score overtakes the reply (0.244 > 0.225);
    capped, it stops just below the reply and still passes the unrelated hit."""
    said = _turn("said", "I finally went yesterday", 0)
    reply = _turn("reply", "Oh, the pottery class? How was it?", 1)
    other = _turn("other", "I like pottery too", 2).model_copy(
        update={"memory": Memory(text="I like pottery too", event_time=T0 + timedelta(days=7))}
    )
    legs = Legs([(reply, 0.60), (other, 0.52), (said, 0.50)], [])
    assert _order(legs, neighbour_weight=0.25) == ["said", "reply", "other"]
    assert _order(legs, neighbour_weight=0.25, neighbour_capped=True) == [
        "reply",
        "said",
        "other",
    ]
    assert _order(legs, neighbour_weight=0.5, neighbour_capped=True)[:2] == ["reply", "said"]


def test_reply_only_neighbours_need_other_participants():
    """A memory after a hit counts as its reply only when both name participants and the
    sets differ: the same speaker twice, or memories without participants, gain nothing."""

    def legs(first: tuple[str, ...], second: tuple[str, ...]) -> Legs:
        said = _turn("said", "I finally went yesterday", 0, first)
        reply = _turn("reply", "Oh, the pottery class? How was it?", 1, second)
        other = _turn("other", "I like pottery too", 2, ("Cy",)).model_copy(
            update={"memory": Memory(text="I like pottery too", event_time=T0 + timedelta(days=7))}
        )
        return Legs([(reply, 0.60), (other, 0.52), (said, 0.50)], [])

    on = {"neighbour_weight": 0.25, "neighbour_replies_only": True}
    assert _order(legs(("Ann",), ("Bob",)), **on) == ["said", "reply", "other"]
    assert _order(legs(("Ann",), ("ann",)), **on) == ["reply", "other", "said"]
    assert _order(legs((), ()), **on) == ["reply", "other", "said"]
    assert _order(legs((), ()), neighbour_weight=0.25) == ["said", "reply", "other"]


def test_implied_spans_count_back_from_when_a_text_was_said():
    from langmem_trpc.service.periods import Period, implied_spans, overlaps

    said = datetime(2023, 4, 18, tzinfo=timezone.utc)
    (month,) = implied_spans("We went to a convention last month.", said)
    assert (month[0].date(), month[1].date()) == (
        datetime(2023, 3, 1).date(),
        datetime(2023, 3, 31).date(),
    )
    (weekends,) = implied_spans("we went camping two weekends ago", said)
    assert weekends[0] <= said - timedelta(days=14) <= weekends[1]
    january = datetime(2023, 1, 10, tzinfo=timezone.utc)
    (december,) = implied_spans("I moved last month", january)
    assert overlaps(Period(2022, 12, None), december)
    assert not overlaps(Period(2023, 1, None), december)
    (night,) = implied_spans("Watched it last night!", datetime(2022, 5, 2, tzinfo=timezone.utc))
    assert overlaps(Period(2022, 5, 1), night)
    assert implied_spans("We talk about conventions", said) == []
    assert overlaps(Period(2020, None, None), implied_spans("3 years ago", said)[0])


def test_implied_time_prefers_a_memory_telling_of_the_named_period():
    """Said on 18 April, "a convention last month" tells of March: "in March 2023" finds it
    with the implied-time step; the time step alone (event times) cannot."""
    april = datetime(2023, 4, 18, tzinfo=timezone.utc)

    def said(key: str, text: str) -> Entry:
        base = entry(key, text)
        return base.model_copy(update={"memory": Memory(text=text, event_time=april)})

    told = said("told", "My colleagues and I went to a convention together last month")
    talk = said("talk", "Conventions are great for meeting colleagues")
    legs = Legs([(talk, 0.6), (told, 0.5)], [])
    query = "What did John attend with his colleagues in March 2023?"
    assert _order(legs, query) == ["talk", "told"]
    assert _order(legs, query, implied_time_boost=1.0) == ["told", "talk"]
    assert _order(legs, "What did John attend?", implied_time_boost=1.0) == ["talk", "told"]


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize(
    "fusion",
    [
        {},
        {"neighbour_weight": 0.25, "neighbour_capped": True},
        {"neighbour_weight": 0.5, "neighbour_capped": True},
        {"neighbour_weight": 0.25, "neighbour_replies_only": True},
        {"implied_time_boost": 1.0},
        {"time_boost": 100.0},
        {"session_diversity": 0.25},
        {"mask_names": False},
        {"period_fetch": True},
    ],
)
def test_exact_match_guard_trip_to_kyoto(tmp_path, backend, fusion):
    """The exact lookup among near-identical memories written in a row ("Trip 0/1/2 to
    Kyoto", one event time, same participants; ties go to the newest) returns the asked
    trip first under the default and every round-11 and round-12 step (also when the
    query names a participant and the period), while round 10's uncapped
    neighbours lift trip 1 (written just before) above it."""
    from langmem_trpc import InMemoryMemoryService, SQLiteMemoryService, UserKey
    from langmem_trpc.testing import HashingEmbeddings

    embeddings = HashingEmbeddings()
    svc = (
        InMemoryMemoryService(embeddings)
        if backend == "memory"
        else SQLiteMemoryService(tmp_path / "m.db", embeddings)
    )
    user = UserKey("app", "alice")
    when = datetime(2024, 5, 1, 12, 30, tzinfo=timezone.utc)
    memories = [
        Memory(
            text=f"Trip {i} to Kyoto 京都の旅",
            topics=["travel", "japan"],
            kind=Kind.EPISODE,
            event_time=when,
            participants=["Ana", "Bo"],
            location="Kyoto",
            metadata={"n": i},
        )
        for i in range(3)
    ]
    svc.add_many(user, memories)
    tuning = FusionSettings(**fusion)  # type: ignore[arg-type]
    options = SearchOptions(hybrid=True, max_results=1, fusion=tuning)
    assert svc.search(user, "Trip 2 Kyoto", options)[0].memory.metadata["n"] == 2
    named = "Ana's trip 2 to Kyoto in May 2024"  # masked for the vector leg; a dated period
    assert svc.search(user, named, options)[0].memory.metadata["n"] == 2
    uncapped = SearchOptions(hybrid=True, max_results=1, fusion={"neighbour_weight": 0.25})
    assert svc.search(user, "Trip 2 Kyoto", uncapped)[0].memory.metadata["n"] == 1
    svc.close()


def test_session_diversity_makes_room_for_another_sessions_hit():
    """A session's second hit, scaled by 1 / (1 + w), falls below another session's best:
    the top two cover two sessions (multi-hop evidence lies in several)."""

    def at(key: str, day: int, minute: int) -> Entry:
        when = T0 + timedelta(days=day)
        memory = Memory(text=key, kind=Kind.EPISODE, event_time=when)
        stamp = T0 + timedelta(minutes=minute)
        return Entry(
            id=key, app_name="a", user_id="u", memory=memory, created_at=stamp, updated_at=stamp
        )

    first, second, other = at("first", 0, 0), at("second", 0, 1), at("other", 1, 2)
    undated = entry("undated", "undated", minutes=3)
    legs = Legs([(first, 0.9), (second, 0.85), (other, 0.8), (undated, 0.79)], [])
    assert _order(legs) == ["first", "second", "other", "undated"]
    assert _order(legs, session_diversity=0.25) == ["first", "other", "undated", "second"]
