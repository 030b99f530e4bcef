"""Model completions and checkpoint files are untrusted: nothing here may run them as code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.scoring import grading
from pspo_repro.scoring.rewards import get_reward, list_rewards

PACKAGE = PROJECT_ROOT / "pspo_repro"
CONF = PACKAGE.parent / "conf"


def _payloads(marker: Path) -> list[str]:
    """Completions that create ``marker`` if anything evaluates them (eval, sympify, parse_expr...)."""
    code = f"__import__('os').system('touch {marker}')"
    code2 = f"__import__('pathlib').Path('{marker}').touch()"
    return [
        code,
        code2,
        f"The answer is {code}",
        f"\\boxed{{{code}}}",
        f"\\boxed{{{code2}}}",
        f"#### {code}",
        f"#### {code2}",
        f"${code}$",
        f"$${code2}$$",
        f"\\({code}\\)",
        f"so x = 7\n#### 7 + {code}",
        f"\\boxed{{\\frac{{{code}}}{{2}}}}",
        f"#### (lambda: {code2})()",
    ]


@pytest.mark.parametrize("gold, kind", [("5", "numeric"), ("\\frac{1}{2}", "latex"), ("x^2+1", "latex")])
def test_no_grader_or_reward_executes_a_completion(tmp_path, gold, kind):
    marker = tmp_path / "pwned"
    for text in _payloads(marker):
        assert grading.reward_correct(text, gold, kind) is False
        assert grading.true_correct(text, gold, kind) is False
        grading.final_answer_key(text, kind)
        grading.extract_final_answer(text)
        grading.answer_candidates(text)
        if kind == "numeric":
            assert grading.gsm8k_numeric_reward(text, gold) in (0.0, 0.05)  # never the 1.0 of a right answer
        for name in list_rewards():
            conversational = [[{"role": "assistant", "content": text}]]
            for completions in ([text], conversational):
                score = get_reward(name)(
                    prompts=["q"],
                    completions=completions,
                    answer=[gold],
                    answer_kind=[kind],
                    completion_ids=[[1]],
                )
                if name in ("math_verify", "gsm8k_numeric"):
                    assert score[0] < 0.5, (name, text)  # graded wrong, not executed
        assert not marker.exists(), f"executed: {text!r}"


def _huge_numbers() -> list[str]:
    """Numbers no float or int() takes: 400 digits (float overflow), 5000 digits (int()'s 4300 limit)."""
    big, huge = "9" * 400, "1" * 5000
    return [
        f"#### {big}",
        f"#### {huge}",
        f"The answer is {big}",
        f"\\boxed{{{huge}}}",
        f"\\boxed{{\\frac{{{huge}}}{{3}}}}",
        f"${big}.5$",
        f"#### -{big}/7",
    ]


@pytest.mark.parametrize("gold, kind", [("18", "numeric"), ("\\frac{1}{3}", "latex")])
def test_huge_numbers_in_a_completion_grade_wrong_without_raising(gold, kind):
    for text in _huge_numbers():
        assert grading.reward_correct(text, gold, kind) is False, text
        assert grading.true_correct(text, gold, kind) is False, text
        grading.final_answer_key(text, kind)
        if kind == "numeric":
            assert grading.gsm8k_numeric_reward(text, gold) in (0.0, 0.05), text
        for name in ("math_verify", "gsm8k_numeric"):
            assert get_reward(name)(prompts=["q"], completions=[text], answer=[gold], answer_kind=[kind]) in (
                [0.0],
                [0.05],
            ), (name, text)


# Code paths that would evaluate text: allowed only where a comment documents why they are safe.
_FORBIDDEN = re.compile(r"(?<![\w.])(eval|exec)\(|sympify|parse_expr|ExprExtractionConfig")
# (file, substring of the line) pairs: documentation strings that name the forbidden calls.
_ALLOWED = [
    ("grading.py", "no eval/sympify/parse_expr"),
    ("grading.py", "ExprExtractionConfig"),
    # the docstring and a comment describing the authors' dead sympy branch (nothing calls sympy there)
    ("authors_reward.py", "transformations=...)``, a keyword sympify does not take"),
    ("authors_reward.py", "# Their sympify(..., transformations=...) raises TypeError"),
]


def _code_lines(path: Path):
    yield from enumerate(path.read_text().splitlines(), 1)


def test_package_has_no_eval_exec_or_sympy_parsing():
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for i, line in _code_lines(path):
            if _FORBIDDEN.search(line) and not any(path.name == f and s in line for f, s in _ALLOWED):
                hits.append(f"{path.relative_to(PACKAGE.parent)}:{i}: {line.strip()}")
    assert not hits, "code that evaluates text:\n" + "\n".join(hits)


def test_torch_load_only_with_weights_only_true():
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for i, line in _code_lines(path):
            if (
                re.search(r"torch\.load\(|pickle\.loads?\(|dill\.|joblib\.load", line)
                and "weights_only=True" not in line
            ):
                hits.append(f"{path.relative_to(PACKAGE.parent)}:{i}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_model_loads_are_safetensors_and_no_remote_code_by_default():
    """Every from_pretrained of a model either asks for safetensors or is a tokenizer/config load, and
    trust_remote_code is passed only from a model config."""
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        for m in re.finditer(r"""["']?trust_remote_code["']?\s*[=:]\s*([^,)}\n]+)""", text):
            assert "model_cfg" in m.group(1), f"{path.name}: trust_remote_code={m.group(1)}"
    loads = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "scripts").glob("*.py")]):
        text = path.read_text()
        for m in re.finditer(r"AutoModelForCausalLM\.from_pretrained\(", text):
            depth, end = 1, m.end()
            while depth:  # to the call's closing parenthesis
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                end += 1
            call = text[m.end() : end - 1]
            loads.append(f"{path.name}: {call.strip()}")
            assert "use_safetensors=True" in call, f"{path.name}: from_pretrained({call.strip()}"
    assert len(loads) >= 4, loads  # hf backend, models.load_model, sft (2)


@pytest.mark.parametrize("preset", sorted(p.stem for p in (CONF / "model").glob("*.yaml")))
def test_default_model_configs_do_not_trust_remote_code(preset):
    cfg = OmegaConf.load(CONF / "model" / f"{preset}.yaml")
    assert cfg.get("trust_remote_code", False) is False, preset


def test_evaluator_refuses_pickled_or_truncated_weights(tmp_path, tiny_model_dir):
    import shutil

    from pspo_repro.evaluation.targets import EvalError, _check_checkpoint

    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, ckpt)
    _check_checkpoint(ckpt)  # the real one is fine
    w = ckpt / "model.safetensors"
    w.write_bytes(w.read_bytes()[:1000])
    with pytest.raises(EvalError, match="truncated"):
        _check_checkpoint(ckpt)
    w.unlink()
    (ckpt / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(EvalError, match="no \\*.safetensors"):
        _check_checkpoint(ckpt)
