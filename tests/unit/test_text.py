import pytest

from langmem_trpc.errors import ConfigurationError
from langmem_trpc.service.language import language
from langmem_trpc.service.text import (
    cjk_trigrams,
    normalize_text,
    primary_tokens,
    search_tokens,
    token_jaccard,
)


def test_latin_tokens_are_snowball_stemmed():
    assert primary_tokens("Hiked, hiking and hikes") == ["hike", "hike", "hike"]
    assert primary_tokens("Häuser und Katzen", language("german")) == ["haus", "und", "katz"]


def test_ascii_text_tokenises_as_the_general_path_does():
    """ASCII text takes a fast path (one stemmer call); a one-letter non-ASCII word sends
    the same text down the general path, which drops it: the tokens agree."""
    for text in ("The user runs Go 1.23 on a Mac", "Hiked, hiking; HIKES x " + "a" * 300):
        assert primary_tokens(text) == primary_tokens(text + " é")
        assert primary_tokens(text, stem=False) == primary_tokens(text + " é", stem=False)
    assert primary_tokens("Hiked, hiking", stem=False) == ["hiked", "hiking"]


def test_unknown_language_names_the_field():
    with pytest.raises(ConfigurationError, match="language"):
        language("klingon")


def test_latin_tokens_drop_stopwords_and_single_characters():
    assert primary_tokens("The user runs Go 1.23 on a Mac") == ["user", "run", "go", "23", "mac"]


def test_search_tokens_deduplicate_in_order():
    assert search_tokens("tea, more tea and coffee") == ["tea", "more", "coffe"]


def test_cjk_runs_become_bigrams_and_trigrams():
    assert primary_tokens("喜欢绿茶") == ["喜欢", "欢绿", "绿茶"]
    assert cjk_trigrams("喜欢绿茶") == ["喜欢绿", "欢绿茶"]


def test_mixed_scripts_split_at_script_boundaries():
    assert primary_tokens("用Python写代码") == ["python", "写代", "代码"]


def test_single_cjk_character_query_is_kept():
    assert primary_tokens("茶") == ["茶"]


def test_token_jaccard():
    assert token_jaccard("runs Go 1.23", "runs Go 1.23") == 1.0
    assert token_jaccard("", "anything") == 0.0
    assert 0.3 < token_jaccard("likes green tea", "likes black tea") < 0.7


def test_normalize_text_for_fingerprints():
    assert normalize_text("  Prefers   DARK mode. ") == "prefers dark mode"
    assert normalize_text("ｆｕｌｌ width！") == "full width"


def test_over_long_tokens_are_cut_to_the_index_limit():
    from langmem_trpc.service.text import MAX_TOKEN_CHARS

    blob = "ab" * 2_000
    assert primary_tokens(f"key {blob} end") == ["key", blob[:MAX_TOKEN_CHARS], "end"]
    wide = "ж" * 1_100  # 2 UTF-8 bytes each: over PostgreSQL's 2,046-byte lexeme limit
    (token,) = primary_tokens(wide)
    assert token == wide[:MAX_TOKEN_CHARS] and len(token.encode()) < 2_047
