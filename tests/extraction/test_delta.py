from __future__ import annotations

from datetime import datetime, timezone

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langmem_trpc.extraction.delta import advance_cursor, compute_delta, is_memorable, message_text
from langmem_trpc.extraction.job import JobStatus
from langmem_trpc.types import ExtractionCursor

NOW = datetime(2024, 1, 1, tzinfo=timezone.utc)


def texts(delta):
    return [message_text(m) for m in delta.messages]


def test_filter_keeps_user_and_assistant_text_only():
    tool_call = AIMessage("", tool_calls=[{"name": "x", "args": {}, "id": "c1"}])
    summary = HumanMessage("Summary so far", additional_kwargs={"lc_source": "summarization"})
    assert is_memorable(HumanMessage("hi"))
    assert is_memorable(AIMessage([{"type": "text", "text": "parts work"}]))
    assert not is_memorable(tool_call)
    assert not is_memorable(ToolMessage("result", tool_call_id="c1"))
    assert not is_memorable(AIMessage("   "))
    assert not is_memorable(SystemMessage("be nice"))
    assert not is_memorable(summary)


def test_no_cursor_reads_everything():
    msgs = [HumanMessage("a", id="1"), AIMessage("b", id="2")]
    delta = compute_delta(msgs, None)
    assert texts(delta) == ["a", "b"] and delta.anchor == "none"


def test_an_extension_of_the_covered_messages_reads_what_follows():
    msgs = [HumanMessage("a", id="1"), AIMessage("b", id="2"), HumanMessage("c", id="3")]
    cursor = advance_cursor("t", msgs[:2], NOW)
    delta = compute_delta(msgs, cursor)
    assert texts(delta) == ["c"] and delta.anchor == "extends"


def legacy(cursor: ExtractionCursor) -> ExtractionCursor:
    """The cursor as written before covered keys existed."""
    return cursor.model_copy(update={"message_keys": b""})


def test_a_cursor_without_keys_reads_after_its_last_id():
    msgs = [HumanMessage("a", id="1"), AIMessage("b", id="2"), HumanMessage("c", id="3")]
    delta = compute_delta(msgs, legacy(advance_cursor("t", msgs[:2], NOW)))
    assert texts(delta) == ["c"] and delta.anchor == "id"


def test_an_older_prefix_of_the_covered_messages_is_covered():
    msgs = [HumanMessage(f"m{i}", id=str(i)) for i in range(4)]
    cursor = advance_cursor("t", msgs, NOW)
    for end in range(4):
        delta = compute_delta(msgs[:end], cursor)
        assert delta.messages == () and delta.anchor == "covered" and delta.covered


def test_a_job_older_than_a_summarised_cursor_finds_nothing_new():
    old = [HumanMessage(f"m{i}", id=str(i)) for i in range(8)]
    summary = HumanMessage("sum", id="s", additional_kwargs={"lc_source": "summarization"})
    cursor = advance_cursor("t", [summary, *old[5:]], NOW)
    delta = compute_delta(old[:7], cursor)  # queued before the summary was made
    assert delta.messages == () and delta.start == 7 and delta.anchor == "rewritten"


def test_a_removed_message_is_a_rewrite_and_only_the_new_one_is_read():
    msgs = [HumanMessage(f"m{i}", id=str(i)) for i in range(3)]
    cursor = advance_cursor("t", msgs, NOW)
    rewritten = [msgs[0], msgs[1], HumanMessage("m3", id="3")]  # RemoveMessage("2"), then m3
    delta = compute_delta(rewritten, cursor)
    assert texts(delta) == ["m3"] and delta.anchor == "rewritten"


def test_a_trimmed_history_reads_only_after_the_last_covered_message():
    msgs = [HumanMessage(f"m{i}", id=str(i)) for i in range(6)]
    cursor = advance_cursor("t", msgs, NOW)
    delta = compute_delta([*msgs[3:], HumanMessage("m6", id="6")], cursor)
    assert texts(delta) == ["m6"] and delta.anchor == "rewritten"


def test_messages_without_ids_use_content_keys_or_the_digest_nearest_position():
    msgs = [
        HumanMessage("ok"),
        AIMessage("sure"),
        HumanMessage("ok"),
        AIMessage("sure"),
        HumanMessage("new"),
    ]
    cursor = advance_cursor("t", msgs[:4], NOW)
    assert cursor.last_message_id is None
    delta = compute_delta(msgs, cursor)
    assert texts(delta) == ["new"] and delta.anchor == "extends"
    delta = compute_delta(msgs, legacy(cursor))
    assert texts(delta) == ["new"] and delta.anchor == "digest"


def test_summarised_history_reads_after_the_summary():
    old = [HumanMessage(f"m{i}", id=str(i)) for i in range(6)]
    cursor = advance_cursor("t", old, NOW)
    rewritten = [
        HumanMessage("Here is a summary", id="s", additional_kwargs={"lc_source": "summarization"}),
        HumanMessage("tail new", id="7"),
    ]
    delta = compute_delta(rewritten, cursor)
    assert texts(delta) == ["tail new"] and delta.anchor == "summary"


def test_summary_keeping_the_anchor_still_uses_the_id():
    old = [HumanMessage(f"m{i}", id=str(i)) for i in range(6)]
    cursor = advance_cursor("t", old, NOW)
    rewritten = [
        HumanMessage("Here is a summary", id="s", additional_kwargs={"lc_source": "summarization"}),
        old[4],
        old[5],
        HumanMessage("after", id="9"),
    ]
    assert texts(compute_delta(rewritten, cursor)) == ["after"]


def test_lost_anchor_rereads_the_whole_list():
    cursor = ExtractionCursor(
        thread_id="t", last_message_id="gone", last_message_digest="nope", message_count=10
    )
    delta = compute_delta([HumanMessage("x", id="a"), HumanMessage("y", id="b")], cursor)
    assert texts(delta) == ["x", "y"] and delta.anchor == "lost"
    keyed = advance_cursor("t", [HumanMessage("gone", id="g")], NOW)
    delta = compute_delta([HumanMessage("x", id="a"), HumanMessage("y", id="b")], keyed)
    assert texts(delta) == ["x", "y"] and delta.anchor == "lost"


def test_trailing_tool_traffic_moves_the_cursor_without_a_job(service, user):
    from langmem_trpc import AutoMemoryWorker
    from langmem_trpc.extraction import VerbatimExtractor

    worker = AutoMemoryWorker(service, VerbatimExtractor())
    msgs = [HumanMessage("I like tea", id="h1")]
    worker.process(user, "t", msgs)
    msgs += [
        AIMessage("", id="a1", tool_calls=[{"name": "x", "args": {}, "id": "c"}]),
        ToolMessage("r", tool_call_id="c", id="t1"),
    ]
    report = worker.process(user, "t", msgs)
    assert report.status == JobStatus.NOTHING_NEW
    assert service.get_cursor(user, "t").last_message_id == "t1"


def test_a_rewrite_retires_the_dropped_keys_so_an_older_job_finds_them_covered():
    old = [HumanMessage(f"m{i}", id=str(i)) for i in range(4)]
    summary = HumanMessage("sum", id="s", additional_kwargs={"lc_source": "summarization"})
    first = advance_cursor("t", old, NOW)
    rewritten = advance_cursor("t", [summary, HumanMessage("m4", id="4")], NOW, first)
    assert len(rewritten.retired_keys) == 4 * len(first.message_keys) // 4
    delta = compute_delta(old[:3], rewritten)
    assert delta.messages == () and delta.anchor == "rewritten"
    extended = advance_cursor("t", [summary, HumanMessage("m4", id="4"), old[0]], NOW, rewritten)
    assert extended.retired_keys == rewritten.retired_keys
