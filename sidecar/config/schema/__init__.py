"""The JSON Schema of the YAML configuration, the reference tables of ``docs/configuration.md``
and the config part of the Helm chart's values schema, all generated from the key declarations
on the model's fields (``sidecar.config.model``).

The schema serves editors (completion and checking through ``# yaml-language-server:
$schema=…``) and CI; the loader stays the authority at start-up. What a JSON Schema cannot
express is checked by the loader only (``sidecar.config.loader.LOADER_ONLY_RULES``).

- ``document``: the JSON Schema, from the declarations;
- ``values``: the JSON Schema of the value types (durations, sizes, addresses…);
- ``nested``: the JSON Schema of the signature, event id and handshake blocks;
- ``reference``: the Markdown tables;
- ``chart``: the config part of the Helm chart's values schema (the rest is the chart's own);
- ``__main__``: the command that writes all three.

Regenerate the committed files after changing a declaration::

    python -m sidecar.config.schema --write
"""

from sidecar.config.schema.document import SCHEMA_FILE, build_schema, schema_text
from sidecar.config.schema.reference import REFERENCE_DOC, reference_markdown

__all__ = ["REFERENCE_DOC", "SCHEMA_FILE", "build_schema", "reference_markdown", "schema_text"]
