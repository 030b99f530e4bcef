"""``python -m pspo_repro.explore``: figures and a toy testbed showing what each trust region does.

Every number comes from the method registry itself (``pspo_repro.methods``): surrogates are
``-per_token_loss / A`` and gradient weights ``d(-loss)/d logp`` by autograd, so a figure can never
disagree with the code that trains. Modules:

- ``probe``: call a registered method on hand-built tensors (ratio grids, (p, q) grids), with autograd.
- ``testbed``: tabular softmax policies (a bandit and a short token sequence) trained on one fixed batch.
- ``checks``: the paper's statements as PASS/FAIL lines.
- ``plots``, ``summary``: figures and the Markdown summary.
- ``__main__``: the Hydra entry point (``conf/explore.yaml``).
"""
