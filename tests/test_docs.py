"""The docs stay true to the code: every setting in deploy.md's table, every command in the
README's, every file architecture.md names on disk."""

from __future__ import annotations

import re

from retrieval.cli import COMMANDS
from retrieval.settings import Settings
from tests.helpers import ROOT


def _env_name(field: str) -> str:
    alias = Settings.model_fields[field].validation_alias
    choices = getattr(alias, "choices", None)
    return str(choices[0]) if choices else f"RETRIEVAL_{field.upper()}"


def test_every_setting_is_in_the_deploy_table():
    table = (ROOT / "docs" / "deploy.md").read_text().split("## Environment variables")[1]
    missing = [_env_name(f) for f in Settings.model_fields if f"`{_env_name(f)}`" not in table]
    assert not missing, missing


def test_every_command_is_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    missing = [c.name for c in COMMANDS if f"`retrieval {c.name}" not in readme]
    assert not missing, missing


def test_every_file_the_architecture_names_is_there():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:retrieval|db|clients|deploy|tests)/[\w/.]+?\.(?:py|yaml))`", doc))
    named |= {
        f"retrieval/{p}"
        for p in re.findall(
            r"`((?:analysis|embedding|search|rank|ingest|api|cli)/[\w/]+\.py)`", doc
        )
    }
    assert len(named) > 30
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, missing


async def test_a_writes_stage_seconds_are_the_keys_api_md_lists(client, ns):
    text = (ROOT / "docs" / "api.md").read_text()
    listed = re.search(r"\(`stage_seconds`: ((?:`\w+`, )+`\w+`)", text)
    assert listed, "api.md lists the write's stages"
    keys = re.findall(r"`(\w+)`", listed.group(1))
    body = {"namespace": ns, "memories": [{"id": "a", "content": "ジムで筋トレをした"}]}
    r = await client.post("/v1/memories", json=body)
    assert r.status_code == 200, r.text
    assert set(r.json()["stage_seconds"]) == set(keys)  # analyse and embed end in either order


def test_the_docs_thresholds_are_the_served_ones():
    """Every threshold the docs state is the one the shipped calibration serves (two figures:
    `high` and `answered`), rounded as written."""
    from retrieval.rank.calibration import Calibration

    cal = Calibration.load()
    api = (ROOT / "docs" / "api.md").read_text()
    said = {
        "high": re.findall(r"`high` threshold, (0\.\d+) today", api),
        "answers": re.findall(r"`answered`\s+threshold, (0\.\d+) today", api)
        + re.findall(r'"threshold": (0\.\d+)', api),
    }
    conf = (ROOT / "docs" / "confidence.md").read_text()
    m = re.search(
        r"Thresholds: `high` from a confidence of (0\.\d+), `answered` from (0\.\d+)", conf
    )
    assert m, "docs/confidence.md states no thresholds"
    said["high"].append(m.group(1))
    said["answers"].append(m.group(2))
    for name, figures in said.items():
        served = getattr(cal, name)
        assert len(figures) >= 2, (name, figures)
        for f in figures:
            digits = len(f.split(".")[1])
            assert float(f) == round(served, digits), (name, f, served)
