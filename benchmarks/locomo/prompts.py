"""The official answer instruction and question wording, shared by every QA arm."""

from __future__ import annotations

import random

from .loader import Question

__all__ = ["ANSWER_INSTRUCTION", "question_text"]

ANSWER_INSTRUCTION = (
    "Based on the above context, write an answer in the form of a short phrase for the following question. "
    "Answer with exact words from the context whenever possible. If the context does not say, answer "
    '"Not mentioned in the conversation".'
)


def question_text(q: Question, rng: random.Random) -> str:
    """Cat 2 gets the date hint, cat 5 the "Not mentioned" multiple choice (official wording)."""
    if q.category == 2:
        return q.question + " Use DATE of CONVERSATION to answer with an approximate date."
    if q.category == 5 and q.adversarial_answer:
        options = ["Not mentioned in the conversation", str(q.adversarial_answer)]
        rng.shuffle(options)
        return f"{q.question} Select the correct answer: (a) {options[0]} (b) {options[1]}."
    return q.question
