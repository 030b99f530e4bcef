"""Stage 2, scoring a response: answer extraction and equivalence (``grading``), the numbers in model text
(``numbers``), the reward functions, the authors' reward bug for bug. Shared by training (rewards) and
evaluation (grading). Imports ``data`` and ``common``.
"""
