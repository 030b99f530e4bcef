"""Evaluation entry point: a temperature sweep per benchmark, one JSON result per (run, dataset, T).

    python -m pspo_repro.evaluate run=results/runs/tiny/pspo/seed0 eval=gsm8k
    python -m pspo_repro.evaluate model=tiny eval=all temperatures=[0.0,0.8] eval.limit=50

The model loads once for the whole sweep. Work proceeds in chunks of prompts; every finished chunk is
appended (fsync) to ``T{t}.partial.jsonl`` beside the final file, so a killed run resumes where it
stopped; the final JSON and the compressed completions are written atomically, then the partial file is
removed. Finished cells are skipped. The final files hold no wall-clock data, so they are byte-identical
whether or not a resume happened. Bad input ends with one ``error: ...`` line and nothing written.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pspo_repro.common.atomic import write_json
from pspo_repro.common.paths import CONF_DIR
from pspo_repro.common.provenance import git_sha, package_versions
from pspo_repro.common.redact import redact
from pspo_repro.common.safe_paths import (
    UnsafePathError,
)
from pspo_repro.common.startup import EVALUATION_STACK, import_frozen
from pspo_repro.data.datasets import load_benchmark
from pspo_repro.data.problems import DataError, Problem
from pspo_repro.data.user_sets import load_user_problems, looks_like_source
from pspo_repro.evaluation import cells, metrics
from pspo_repro.evaluation.settings import (  # the settings checks: their own module, read in one place
    EvalError,
    _precheck_argv,
    numerics_of,
    sources_of,
    user_set_of,
    validate,
)
from pspo_repro.evaluation.targets import Target, resolve_target
from pspo_repro.scoring import grading
from pspo_repro.scoring.authors_reward import authors_gsm8k_reward

log = logging.getLogger(__name__)

PASS_KS = metrics.PASS_KS
# chunk_size=null: prompts per submission by backend (vLLM batches a whole submission across temperatures).
CHUNK_SIZE = {"hf": 32, "vllm": 512}
# Test hook: called after each chunk is appended (fault-injection tests raise from it).
AFTER_CHUNK_HOOK: Callable[[int], None] | None = None


def top_k_of(cfg: Any) -> int | None:
    """``eval.top_k``: the top-k filter of sampled cells (None: none). The authors' evaluation sampled with
    transformers' default top-k of 50 (they pass no ``top_k``), which ``eval=paper`` sets."""
    top_k = cfg.eval.get("top_k")
    return None if top_k is None else int(top_k)


# ---------------------------------------------------------------- files and identity


def eval_dir(target: Target, dataset: str) -> Path:
    """The cell folder of ``target`` on ``dataset`` (``cells.cell_folder``: every component checked by
    ``safe_paths``' name rule, the folder proven to lie under ``results/eval``; UnsafePathError)."""
    return cells.cell_folder(target.model, target.method, target.seed, target.tag, dataset)


def _grade_one(text: str, problem: Problem) -> dict[str, Any]:
    """Both gradings of one completion and the authors' reward value (``reward``: the paper-comparable
    grade, on the gold string their code passes); a grading failure (a bad gold row) is recorded, never
    raised."""
    # The authors' reward is pure string and float work that never raises (their bare excepts).
    reward = authors_gsm8k_reward(text, problem.authors_gold or problem.answer)
    try:
        g = grading.grade(text, problem.answer, problem.answer_kind)
    except Exception as exc:  # one bad row must not abort a sweep: it counts as wrong and is reported
        first = str(exc).splitlines()[0] if str(exc) else ""
        return {"final_answer": None, "answer_key": None, "reward_correct": 0, "true_correct": 0,
                "reward": reward, "timed_out": 0, "grading_error": f"{type(exc).__name__}: {first}"}  # fmt: skip
    return {
        "final_answer": g.final_answer,
        "answer_key": g.answer_key,
        "reward_correct": int(g.reward_correct),
        "true_correct": int(g.true_correct),
        "reward": float(reward),
        "timed_out": int(g.timed_out),
    }


def grade_samples(problem: Problem, completions: list[Any]) -> dict[str, Any]:
    """One prompt's partial-shard record: its completions with both gradings, final-answer keys and the
    authors' reward value (the paper-comparable grade, on the gold string their code passes)."""
    samples = [
        {"text": c.text, "token_ids": list(c.token_ids), **_grade_one(c.text, problem)} for c in completions
    ]
    return {
        "id": problem.id,
        "gold": problem.answer,
        "authors_gold": problem.authors_gold,
        "samples": samples,
    }


# ---------------------------------------------------------------- partial shards


# ---------------------------------------------------------------- the sweep


@dataclass
class Cell:
    """One unfinished (dataset, temperature) cell: its file paths, settings header and finished prompts."""

    dataset: str
    temperature: float
    paths: dict[str, Path]
    header: dict[str, Any]
    done: dict[str, dict[str, Any]]


def _final_matches(path: Path, header: dict[str, Any]) -> bool:
    """``cells.final_matches`` with its refusal as the command's one-line EvalError."""
    try:
        return cells.final_matches(path, header)
    except cells.CellError as exc:
        raise EvalError(str(exc)) from None


def _header(
    target: Target, cfg: Any, dataset: str, problems: list[Problem], t: float, backend: str
) -> dict[str, Any]:
    """The settings header of one cell (``cells.cell_header``) from the evaluate config."""
    settings = {
        "split": str(cfg.eval.split),
        "limit": None if cfg.eval.limit is None else int(cfg.eval.limit),
        "top_p": float(cfg.top_p),
        "top_k": top_k_of(cfg),
        "max_new_tokens": int(cfg.max_new_tokens),
        "n_samples": int(cfg.n_samples),
        "sampling_seed": int(cfg.sampling_seed),
        "prompt_template": str(cfg.prompt_template),
        "backend": backend,
        # Only a cell read from a named source records it (cells of the default sources keep their keys).
        "source": sources_of(cfg).get(dataset) or _user_source(cfg, dataset),
        # Only a cell of other numerics than the backend's default records them (older cells stay valid).
        "numerics": numerics_of(cfg) if backend == "hf" else None,
    }
    identity = {"model": target.model, "method": target.method, "seed": target.seed, "tag": target.tag,
                "checkpoint": target.checkpoint}  # fmt: skip
    return cells.cell_header(identity, dataset, problems, t, settings)


def _user_source(cfg: Any, dataset: str) -> str | None:
    """The source of the user's own set when ``dataset`` is it (recorded in its cells), else None."""
    user = user_set_of(cfg)
    return user.source if user is not None and user.name == dataset else None


def evaluate(cfg: Any) -> list[dict[str, Any]]:
    """Run the sweep described by a composed ``evaluate`` config; returns every cell's result dict."""

    from pspo_repro.evaluation.backends import resolve_backend_name

    datasets, temps = validate(cfg)
    target = resolve_target(cfg)
    try:
        backend_name = resolve_backend_name(str(cfg.backend))
    except ValueError as exc:
        raise EvalError(str(exc)) from None
    sources = sources_of(cfg)
    user = user_set_of(cfg)
    problems_by_ds = {
        name: (
            load_user_problems(user, "eval")[: cfg.eval.limit]  # limit: checked by validate (>= 1 or null)
            if user is not None and name == user.name
            else load_benchmark(name, str(cfg.eval.split), cfg.eval.limit, sources.get(name))
        )
        for name in datasets
    }

    pending: list[Cell] = []
    for name, problems in problems_by_ds.items():
        try:
            folder = eval_dir(target, name)
        except UnsafePathError as exc:
            raise EvalError(str(exc)) from None
        for t in temps:
            paths = cells.cell_paths(folder, t)
            header = _header(target, cfg, name, problems, t, backend_name)
            if paths["json"].is_file() and _final_matches(paths["json"], header):
                log.info("done already: %s", paths["json"])
                continue
            pending.append(Cell(name, t, paths, header, {}))

    # The tokenizer loads before any lock file is made: a checkpoint whose tokenizer cannot load (or a hub id
    # offline) is a one-line error with nothing written.
    tokenizer = None
    if pending:
        import_frozen(EVALUATION_STACK)  # what the tokenizer and the model load, with the collector paused
        tokenizer = _load_tokenizer(target.checkpoint)
    datasets_pending = {c.dataset for c in pending}
    encoded = {
        n: encode_prompts(tokenizer, problems_by_ds[n], str(cfg.prompt_template)) for n in datasets_pending
    }
    check_context(cfg, target.checkpoint, backend_name, encoded)  # before any lock or model
    with contextlib.ExitStack() as locks:
        pending = _lock_cells(pending, locks)
        _run_cells(pending, problems_by_ds, cfg, target, backend_name, encoded)

    results = []
    for name in datasets:
        for t in temps:
            results.append(json.loads(cells.cell_paths(eval_dir(target, name), t)["json"].read_text()))
    print_table(results)
    return results


def encode_prompts(tokenizer: Any, problems: list[Problem], template: str) -> tuple[list[str], list[tuple]]:
    """Each problem's rendered prompt and its token ids (no special tokens added: the template has them)."""
    from pspo_repro.data.prompts import render_prompt

    prompts = [render_prompt(tokenizer, p.question, template) for p in problems]
    return prompts, [tuple(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in prompts]


def context_limit(checkpoint: str, backend_name: str, cfg: Any) -> tuple[int, str] | None:
    """The most tokens (prompt + completion) the model takes and what says so: the checkpoint's
    ``max_position_embeddings`` (read from its config.json, without loading it) and, for vLLM,
    ``vllm.max_model_len``; None when neither is known (a hub id: ``MAX_NEW_TOKENS`` bounds it)."""
    limits = []
    config = Path(checkpoint) / "config.json"
    try:
        n = json.loads(config.read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        n = None
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        limits.append((n, f"{checkpoint}'s max_position_embeddings {n}"))
    if backend_name == "vllm" and cfg.vllm.get("max_model_len") is not None:
        limits.append((int(cfg.vllm.max_model_len), f"vllm.max_model_len {int(cfg.vllm.max_model_len)}"))
    return min(limits) if limits else None


def check_context(cfg: Any, checkpoint: str, backend_name: str, encoded: dict[str, tuple]) -> None:
    """The longest prompt plus ``max_new_tokens`` must fit the model's context (EvalError naming both):
    past it generation fails after the model has loaded, or runs on positions it never learned."""
    limit = context_limit(checkpoint, backend_name, cfg)
    if limit is None or not encoded:
        return
    n, source = limit
    longest, name = max((max((len(ids) for ids in e[1]), default=0), ds) for ds, e in encoded.items())
    wanted = int(cfg.max_new_tokens)
    if longest + wanted > n:
        raise EvalError(
            f"max_new_tokens={wanted} does not fit: the longest {name} prompt is {longest} tokens and "
            f"{source}, so max_new_tokens can be at most {max(n - longest, 0)}"
        )


def _lock_cells(pending: list[Cell], stack: contextlib.ExitStack) -> list[Cell]:
    """Take each pending cell's lock (``fcntl.flock``, released when ``stack`` closes or the process dies).

    Two processes given the same cell (a requeued job racing its first attempt): the second waits for
    the first, then finds the final file and skips the cell, so no cell is generated twice and no
    partial shard gets two writers. Locks are taken in path order (no deadlock between sweeps).
    """
    for c in sorted(pending, key=lambda c: str(c.paths["lock"])):
        c.paths["lock"].parent.mkdir(parents=True, exist_ok=True)
        fh = stack.enter_context(open(c.paths["lock"], "a"))  # closed by the stack
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("%s is being evaluated by another process: waiting for it", c.paths["json"])
            fcntl.flock(fh, fcntl.LOCK_EX)
    left = []
    for c in pending:
        if c.paths["json"].is_file() and _final_matches(c.paths["json"], c.header):
            log.info("done by another process meanwhile: %s", c.paths["json"])
            continue
        left.append(c)
    return left


def _run_cells(pending, problems_by_ds, cfg, target, backend_name, encoded) -> None:
    """Generate, grade and write every pending cell (the model loads once, only if a cell is pending);
    ``encoded``: each pending dataset's prompts and their token ids (``encode_prompts``)."""
    from omegaconf import OmegaConf
    from tqdm.auto import tqdm

    from pspo_repro.evaluation.backends import Request, make_backend, request_seed

    if pending:
        backend = make_backend(
            backend_name,
            target.checkpoint,
            seed=int(cfg.sampling_seed),
            batch_size=int(cfg.batch_size),
            device=str(cfg.device),
            # the hf backend's own numerics over vllm.dtype, which it read before they existed
            **{
                **OmegaConf.to_container(cfg.vllm, resolve=True),
                **(numerics_of(cfg) if backend_name == "hf" else {}),
            },
        )
        log.info("evaluating %s (%s) with the %s backend", target.checkpoint, target.method, backend.name)
        chunk_no = 0
        for name, problems in problems_by_ds.items():
            ds_cells = [c for c in pending if c.dataset == name]
            if not ds_cells:
                continue
            wanted = {p.id for p in problems}
            for c in ds_cells:
                c.done = cells.read_partial(c.paths["partial"], c.header, wanted)
            prompts, prompt_ids = encoded[name]
            size = int(cfg.chunk_size) if cfg.chunk_size is not None else CHUNK_SIZE[backend_name]
            bar = tqdm(
                total=len(problems) * len(ds_cells), desc=f"{name} T={[c.temperature for c in ds_cells]}"
            )
            bar.update(sum(len(c.done) for c in ds_cells))
            for start in range(0, len(problems), size):
                todo = [
                    (c, i)
                    for c in ds_cells
                    for i in range(start, min(start + size, len(problems)))
                    if problems[i].id not in c.done
                ]
                if not todo:
                    continue
                # Every pending temperature of this chunk in one submission (vLLM batches across them).
                requests = [
                    Request(
                        prompts[i],
                        prompt_ids[i],
                        c.temperature,
                        cells.n_for(c.temperature, int(cfg.n_samples)),
                        request_seed(int(cfg.sampling_seed), c.temperature, problems[i].id),
                    )
                    for c, i in todo
                ]
                outputs = backend.generate(
                    requests, int(cfg.max_new_tokens), float(cfg.top_p), top_k=top_k_of(cfg)
                )
                for c in ds_cells:
                    recs = [
                        grade_samples(problems[i], out)
                        for (cc, i), out in zip(todo, outputs, strict=True)
                        if cc is c
                    ]
                    if recs:
                        cells.append_records(c.paths["partial"], c.header, recs)
                        c.done.update({r["id"]: r for r in recs})
                bar.update(len(todo))
                chunk_no += 1
                if AFTER_CHUNK_HOOK is not None:
                    AFTER_CHUNK_HOOK(chunk_no)
            bar.close()
            for c in ds_cells:
                _finish_cell(c, problems, cfg, target)


def _finish_cell(c: Cell, problems: list[Problem], cfg: Any, target: Target) -> None:
    """Write completions then the final JSON (its presence marks the cell done), then drop the shard."""
    from omegaconf import OmegaConf

    records = [c.done[p.id] for p in problems]
    cells.write_completions(c.paths["completions"], records)
    fields: dict[str, Any] = {
        "run_dir": target.run_dir,
        # The resolved config can hold a credential (an ${oc.env:...} interpolation): never store it.
        "config": redact(OmegaConf.to_container(cfg, resolve=True)),
        "versions": package_versions(),
        "git_sha": git_sha(),
    }
    if target.provisional:  # asked for by name (checkpoint=) although unfinished
        fields["provisional"] = target.provisional
    if target.foreign_checkpoint:  # allow_foreign_checkpoint=true: not a checkpoint of the filing run
        fields["foreign_checkpoint"] = target.foreign_checkpoint
    write_json(c.paths["json"], cells.final_record(c.header, records, **fields))
    c.paths["partial"].unlink(missing_ok=True)
    log.info("wrote %s", c.paths["json"])


def _load_tokenizer(checkpoint: str) -> Any:
    from transformers import AutoTokenizer

    from pspo_repro.common.hub import offline_unless_reachable
    from pspo_repro.training.models import hub_model_hint

    from_hub = not Path(checkpoint).expanduser().is_dir()
    if from_hub:
        offline_unless_reachable()  # no network: the local cache or a one-line error, not 50 s of retries
    try:
        return AutoTokenizer.from_pretrained(checkpoint)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0].rstrip(".") if str(exc).strip() else type(exc).__name__
        hint = f"; {hub_model_hint(checkpoint)}" if from_hub else ""
        raise EvalError(f"cannot load the tokenizer of {checkpoint}: {first}{hint}") from None


def print_table(results: list[dict[str, Any]]) -> None:
    """Both accuracies per dataset and temperature (plus the largest pass@k and majority vote)."""
    lines = [
        f"{'dataset':<11} {'T':>4} {'n':>3} {'reward_acc':>10} {'true_acc':>9} {'authors_acc':>11} {'pass@n':>7} {'maj':>6}"
    ]
    for r in results:
        m, n = r["metrics"], r["n_samples"]
        k = max(k for k in PASS_KS if k <= n)
        lines.append(
            f"{r['dataset']:<11} {r['temperature']:>4.1f} {n:>3} {m['reward_acc']:>10.4f} {m['true_acc']:>9.4f} "
            f"{m.get('authors_acc', float('nan')):>11.4f} "
            f"{m[f'reward_pass@{k}']:>7.4f} {m['reward_maj']:>6.4f}"
        )
    print("\n".join(lines), flush=True)


# ---------------------------------------------------------------- CLI


def _task(cfg: Any) -> None:
    """The Hydra task: the sweep, its bad input as one line (exit 2)."""
    from omegaconf.errors import OmegaConfBaseException

    from pspo_repro.common.cli import fail, first_line

    try:
        evaluate(cfg)
    except (EvalError, DataError) as exc:
        fail(str(exc))
    except OmegaConfBaseException as exc:  # an ${oc.env:UNSET} resolved only when read
        fail(f"bad config value: {first_line(exc)}")
    except OSError as exc:
        import errno

        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT):
            raise
        # A read-only or full results folder: one line naming what could not be written.
        fail(
            f"cannot write {exc.filename or 'the results folder'}: {exc.strerror or exc} (check PSPO_RESULTS_DIR)"
        )


def rewrite_overrides(argv: list[str]) -> list[str]:
    """``model=X`` -> ``model_ref=X``: ``conf/model/`` is the training model group, so Hydra would read
    ``model=`` as a group choice; the evaluator takes a preset name, a path or a hub id instead.
    ``model.path=P`` (the training override for local weights) -> ``model_path=P``."""
    out = []
    for a in argv:
        value = a.split("=", 1)[1] if a.startswith("eval=") else ""
        if value and not (CONF_DIR / "eval" / f"{value}.yaml").is_file() and looks_like_source(value):
            # eval=<file|folder|hub id>: the user's own set (conf/eval/user.yaml)
            if "'" in value or "," in value:  # Hydra would read a quote or a comma as syntax (a sweep)
                raise EvalError(f"eval={value}: a source's name may not hold a quote or a comma")
            out += ["eval=user", f"eval.source='{value}'"]
            continue
        if a.startswith("model="):
            a = "model_ref=" + a.split("=", 1)[1]
        elif a.startswith("model.path="):
            a = "model_path=" + a.split("=", 1)[1]
        out.append(a)
    return out


def compose_config(overrides: list[str]) -> Any:
    """The evaluate config for CLI-style overrides (for tests and scripts), without running Hydra's app."""
    from pspo_repro.common.cli import compose_config as compose_in

    return compose_in(CONF_DIR, "evaluate", rewrite_overrides(overrides))


def _checked_argv(argv: list[str]) -> list[str]:
    """An unknown ``eval=<name>`` refused before Hydra (its error spans lines), then ``rewrite_overrides``."""
    from pspo_repro.common.cli import UsageError

    try:
        _precheck_argv(argv)
        return rewrite_overrides(argv)
    except EvalError as exc:
        raise UsageError(str(exc)) from None


def main() -> int:
    """``python -m pspo_repro.evaluate [run=...|model=...] [eval=...] [key=value ...]``: ``cli.run_command``
    (bad input in one line before any model loads or cell is started), then Hydra."""
    from pspo_repro.common.cli import run_command

    return run_command("evaluate", _task, prepare=_checked_argv, output_folders="eval")
