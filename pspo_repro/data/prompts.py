"""Prompt templates shared by training and evaluation (one module, so they cannot drift apart).

The paper's prompts are chat messages: the authors' system prompt, then the problem as the user turn,
rendered with the model's chat template and ``add_generation_prompt=True``.
"""

from __future__ import annotations

from typing import Any

from pspo_repro.common.names import did_you_mean

# Exact text from the authors' released code (GitHub MCDwyer/GR-PSPO).
PAPER_SYSTEM_PROMPT = (
    "You are a careful math solver. Think through the solution and show the steps. Use English only. "
    "End the response with the final answer only in the format: '#### <final numeric answer only>'"
)

TEMPLATES: dict[str, str | None] = {
    "paper": PAPER_SYSTEM_PROMPT,
    "none": None,  # no system turn: the user message alone
}


# The non-math knowledge sets (MMLU, BoolQ) ask for their answer in the paper's '####' format, so a model RL-trained
# to end with '#### <answer>' is measured in the format it was trained on; the label is what grading reads.
CHOICE_LETTERS = "ABCDEFGHIJ"


def multiple_choice_question(question: str, choices: list[str]) -> str:
    """The user message of a multiple-choice question: the question, its lettered choices, the answer format."""
    lines = [f"{CHOICE_LETTERS[i]}. {c.strip()}" for i, c in enumerate(choices)]
    return (
        f"{question.strip()}\n\n"
        + "\n".join(lines)
        + "\n\nAnswer with the letter of the correct choice. End the "
        "response with the final answer only in the format: '#### <letter>'"
    )


def yes_no_question(passage: str, question: str) -> str:
    """The user message of a yes/no reading question: the passage, the question, the answer format."""
    q = question.strip()  # BoolQ's questions are lower case and unpunctuated
    q = q[:1].upper() + q[1:] + ("" if q.endswith("?") else "?")
    return (
        f"{passage.strip()}\n\nQuestion: {q}\n\nAnswer yes or no. End the response with the final answer only in "
        "the format: '#### <yes or no>'"
    )


def build_messages(question: str, template: str = "paper") -> list[dict[str, str]]:
    """The chat messages for one problem under a named template (``paper`` or ``none``)."""
    if template not in TEMPLATES:
        raise ValueError(
            f"unknown prompt template {template!r}; {did_you_mean(template, TEMPLATES)}allowed: {sorted(TEMPLATES)}"
        )
    system = TEMPLATES[template]
    messages = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": question})
    return messages


def render_prompt(tokenizer: Any, question: str, template: str = "paper") -> str:
    """The prompt string exactly as TRL renders a conversational prompt (chat template + generation prompt)."""
    return tokenizer.apply_chat_template(
        build_messages(question, template), tokenize=False, add_generation_prompt=True
    )
