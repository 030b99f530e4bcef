"""Stage 6, orchestration: every CPU pipeline (``cpu_pipeline``: the mini-reproduction, the study, the
leaderboard and each rung of the ladder) from its stages (``stages``), its grid (``grid``), its job runner
(``jobs``), its stage markers (``markers``) and its settings checks (``settings``); a pipeline's comparison
with its committed copy (``committed_copy``); the model-size ladder (``ladder``: one CPU pipeline per rung);
the Slurm launcher behind Hydra's ``hydra/launcher=slurm`` (``launch``); warm-started jobs (``warm_start``).
Runs the stages as subprocesses; may import any stage.
"""
