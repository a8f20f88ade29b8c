from __future__ import annotations

import json

import pytest


def _sample() -> dict:
    return {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {
                    "speaker": "Ann",
                    "dia_id": "D1:1",
                    "text": "I adopted a puppy named Rex last week!",
                },
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Congrats! What breed is he?"},
                {
                    "speaker": "Ann",
                    "dia_id": "D1:3",
                    "text": "A golden retriever.",
                    "blip_caption": "a photo of a dog",
                },
            ],
            "session_2_date_time": "10:00 am on 20 June, 2023",
            "session_2": [
                {"speaker": "Bob", "dia_id": "D2:1", "text": "I ran my first marathon in Boston."},
                {"speaker": "Ann", "dia_id": "D2:2", "text": "Amazing, how long did it take?"},
                {"speaker": "Bob", "dia_id": "D2:3", "text": "Four hours and ten minutes."},
            ],
            "session_3_date_time": "9:00 am on 1 July, 2023",
        },
        "qa": [
            {
                "question": "What breed is Ann's dog?",
                "answer": "golden retriever",
                "evidence": ["D1:3"],
                "category": 4,
            },
            {
                "question": "When did Bob run a marathon?",
                "answer": "June 2023",
                "evidence": ["D:2:1"],
                "category": 2,
            },
            {
                "question": "What pets and sports?",
                "answer": "puppy, marathon",
                "evidence": ["D1:1 D2:1"],
                "category": 1,
            },
            {
                "question": "Would Ann like dogs?",
                "answer": "Yes; she adopted one",
                "evidence": ["D1:01", "D9:9"],
                "category": 3,
            },
            {
                "question": "What is Bob's cat called?",
                "adversarial_answer": "Tom",
                "evidence": ["D2:1"],
                "category": 5,
            },
            {"question": "How many years?", "answer": 2022, "evidence": [], "category": 3},
        ],
        "observation": {
            "session_1_observation": {
                "Ann": [
                    ["Ann adopted a puppy named Rex.", "D1:1"],
                    ["Ann's dog is a golden retriever.", ["D1:3"]],
                ]
            },
            "session_2_observation": {"Bob": [["Bob ran the Boston marathon.", "D2:1"]]},
        },
        "session_summary": {},
        "event_summary": {},
    }


@pytest.fixture
def sample_path(tmp_path):
    path = tmp_path / "mini_locomo.json"
    path.write_text(json.dumps([_sample()]))
    return path
