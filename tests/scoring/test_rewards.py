"""Rewards: TRL's signature, the authors' values, the registry's errors, and use off the main thread."""

from __future__ import annotations

import threading

import pytest

from pspo_repro.scoring.rewards import get_reward, list_rewards


def _conv(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def test_registry():
    assert {"gsm8k_numeric", "math_verify", "format"} <= set(list_rewards())
    with pytest.raises(ValueError, match=r"unknown reward 'nope'; valid rewards: .*gsm8k_numeric"):
        get_reward("nope")
    assert get_reward("gsm8k_numeric").__name__ == "gsm8k_numeric"  # TRL logs rewards/<name>/mean


def test_gsm8k_numeric_values():
    fn = get_reward("gsm8k_numeric")
    completions = [_conv("3 + 4 = 7\n#### 72 apples"), _conv("so 72"), _conv("#### 71 apples"), _conv("none")]
    out = fn(prompts=[None] * 4, completions=completions, answer=["72"] * 4, answer_kind=["numeric"] * 4)
    assert out == [1.0, 1.0, 0.05, 0.0]


def test_math_verify_and_format_with_trl_keywords():
    mv, fmt = get_reward("math_verify"), get_reward("format")
    comps = ["The answer is $\\boxed{\\frac{1}{2}}$", _conv("#### 0.5"), _conv("1/3")]
    kw = dict(
        answer=["\\frac{1}{2}", "\\frac12", "\\frac{1}{2}"], answer_kind=["latex"] * 3, trainer_state=None
    )
    assert mv(prompts=[None] * 3, completions=comps, **kw) == [1.0, 1.0, 0.0]
    assert fmt(prompts=[None] * 3, completions=comps, **kw) == [0.0, 1.0, 0.0]


def test_rewards_work_off_the_main_thread():
    """math-verify's signal timeouts raise off the main thread; grading must bound time another way."""
    mv = get_reward("math_verify")
    results: list = []

    def target():
        try:
            results.append(
                mv(
                    prompts=[None, None],
                    completions=[_conv("$\\boxed{2\\sqrt{2}}$"), _conv("$\\boxed{\\sqrt{8}}$")],
                    answer=["\\sqrt{8}", "2\\sqrt{2}"],
                    answer_kind=["latex", "latex"],
                )
            )
        except Exception as exc:  # noqa: BLE001 - reported below
            results.append(exc)

    worker = threading.Thread(target=target)
    worker.start()
    worker.join(30)
    assert results == [[1.0, 1.0]]
