"""Shared plumbing under every stage: where results live and how they are written.

``paths`` (project, config, results, cache and data folders), ``safe_paths`` (the one rule that turns a
name into a path under results/), ``atomic`` (writes that never leave half a file), ``run_dir`` (where a
training run's folder lives, its tag and identity, checkpoint markers), ``run_folder`` (run.json's one
owner), ``provenance`` (git sha and package versions), ``redact`` (secrets kept out of every record and every printed or logged line), ``overrides`` (stage settings rendered in Hydra's override grammar), ``cli`` (one-line errors and option checks shared by the
entry points), ``names`` (the closest allowed name to a typo: "did you mean X?"), ``startup`` (a command's heavy imports with the garbage collector paused, then frozen).
Imports nothing else of the package.
"""
