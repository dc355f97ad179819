"""The sample payloads shipped for ``send --sample``: every preset has some, every file is
listed in its index (and every listed file exists), each names an https source, and the
providers that send an event-type header beside the body give every sample its value."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from sidecar.cli.samples import samples_of
from sidecar.cli.signing_scheme import EVENT_TYPE_HEADERS
from sidecar.config.presets import preset_names


@pytest.mark.parametrize("preset", preset_names())
def test_the_index_lists_every_file_and_names_its_source(preset: str) -> None:
    samples = samples_of(preset)
    assert samples, f"preset {preset} has no sample"
    folder = resources.files("sidecar") / "samples" / preset
    shipped = {entry.name for entry in folder.iterdir()} - {"index.yaml"}
    assert sorted(sample.file for sample in samples) == sorted(shipped)
    assert len({sample.type for sample in samples}) == len(samples)
    for sample in samples:
        assert sample.source.startswith("https://"), sample
        if sample.file.endswith(".json"):
            json.loads(sample.body())
        event_type = EVENT_TYPE_HEADERS.get(preset)
        if event_type is not None:
            assert sample.headers.get(event_type[0]), (sample, event_type)


def test_an_unknown_preset_reaches_no_file() -> None:
    assert samples_of("../presets") == ()
    assert samples_of("nope") == ()
