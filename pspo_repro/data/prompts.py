"""Prompt templates shared by training and evaluation (one module, so they cannot drift apart).

The paper's prompts are chat messages: the authors' system prompt, then the problem as the user turn,
rendered with the model's chat template and ``add_generation_prompt=True``.
"""

from __future__ import annotations

from typing import Any

# Exact text from the authors' released code (GitHub MCDwyer/GR-PSPO).
PAPER_SYSTEM_PROMPT = (
    "You are a careful math solver. Think through the solution and show the steps. Use English only. "
    "End the response with the final answer only in the format: '#### <final numeric answer only>'"
)

TEMPLATES: dict[str, str | None] = {
    "paper": PAPER_SYSTEM_PROMPT,
    "none": None,  # no system turn: the user message alone
}


def build_messages(question: str, template: str = "paper") -> list[dict[str, str]]:
    """The chat messages for one problem under a named template (``paper`` or ``none``)."""
    if template not in TEMPLATES:
        raise ValueError(f"unknown prompt template {template!r}; allowed: {sorted(TEMPLATES)}")
    system = TEMPLATES[template]
    messages = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": question})
    return messages


def render_prompt(tokenizer: Any, question: str, template: str = "paper") -> str:
    """The prompt string exactly as TRL renders a conversational prompt (chat template + generation prompt)."""
    return tokenizer.apply_chat_template(
        build_messages(question, template), tokenize=False, add_generation_prompt=True
    )
