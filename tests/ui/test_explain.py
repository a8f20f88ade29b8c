"""The search playground switches off real fusion steps only."""

from __future__ import annotations

from langmem_trpc.types import FUSION_STEPS_OFF, FusionSettings
from langmem_trpc.ui._explain import SIGNALS


def test_every_signal_the_playground_switches_off_is_a_fusion_step_that_is_on():
    defaults = FusionSettings()
    for label, change in SIGNALS.items():
        for name, off in change.items():
            assert name in FusionSettings.model_fields, label
            assert getattr(defaults, name) != off, label  # switching it off changes something


def test_the_steps_off_are_fusion_settings_fields():
    assert set(FUSION_STEPS_OFF) <= set(FusionSettings.model_fields)
    assert FusionSettings(**FUSION_STEPS_OFF).decompose_weight == 0.0
