"""Sample payloads for ``send --sample``: package data in ``sidecar/samples/<preset>/``.

Each preset's folder holds the bodies and an ``index.yaml`` listing them in order (the first is
the default): ``type`` (the name ``--sample`` takes), ``file``, ``headers`` the provider sends
beside the body (``X-GitHub-Event: push``), and ``source``, the published fixture or document
the body is shaped after. JSON cannot carry that note, hence the index.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

import yaml

from sidecar.config.presets import load_preset, preset_names
from sidecar.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Sample:
    preset: str
    type: str
    file: str
    headers: Mapping[str, str]
    source: str

    def body(self) -> bytes:
        """The payload's bytes, exactly as shipped."""
        return (resources.files("sidecar") / "samples" / self.preset / self.file).read_bytes()


def samples_of(preset: str) -> tuple[Sample, ...]:
    """The preset's samples in index order; empty for a preset that has none. Only preset
    names reach the file system: no path tricks through ``preset``."""
    if preset not in preset_names():
        return ()
    return _index(preset)


@functools.cache
def _index(preset: str) -> tuple[Sample, ...]:
    entry = resources.files("sidecar") / "samples" / preset / "index.yaml"
    if not entry.is_file():
        return ()
    data = yaml.safe_load(entry.read_text("utf-8"))
    where = f"samples/{preset}/index.yaml"
    if not isinstance(data, dict) or not isinstance(data.get("samples"), list):
        raise ConfigError(where, "must be a mapping with a 'samples' list")
    found = []
    for i, item in enumerate(data["samples"]):
        if not isinstance(item, dict) or not all(
            isinstance(item.get(key), str) for key in ("type", "file", "source")
        ):
            raise ConfigError(f"{where}: samples[{i}]", "needs type, file and source (strings)")
        headers = item.get("headers", {})
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ConfigError(f"{where}: samples[{i}].headers", "must map names to strings")
        found.append(Sample(preset, item["type"], item["file"], dict(headers), item["source"]))
    return tuple(found)


def find_sample(preset: str, sample_type: str | None) -> Sample:
    """The sample named ``sample_type`` (the preset's first when None). ``ConfigError`` naming
    the available types when there is no such sample."""
    samples = samples_of(preset)
    if not samples:
        raise ConfigError("--sample", f"preset {preset!r} has no samples: pass --file")
    if sample_type is None:
        return samples[0]
    for sample in samples:
        if sample.type == sample_type:
            return sample
    known = ", ".join(sample.type for sample in samples)
    raise ConfigError("--sample", f"no sample {sample_type!r} for preset {preset!r}; "
                      f"available: {known}")


def sample_lines(preset: str) -> list[str]:
    """``--list-samples``: per sample, a line with its type (the default marked) and the headers
    it brings, then an indented line naming its source."""
    samples = samples_of(preset)
    if not samples:
        load_preset(preset)  # an unknown name: its error lists the known ones
        return [f"preset {preset!r} has no samples"]
    names = [sample.type + (" (default)" if i == 0 else "") for i, sample in enumerate(samples)]
    width = max(len(name) for name in names)
    lines = []
    for name, sample in zip(names, samples, strict=True):
        headers = ", ".join(f"{k}: {v}" for k, v in sample.headers.items())
        lines += [f"{name.ljust(width)}  {headers}".rstrip(), f"    source: {sample.source}"]
    return lines
