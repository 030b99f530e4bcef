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
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pspo_repro.common.atomic import write_json
from pspo_repro.common.paths import CONF_DIR, results_dir
from pspo_repro.common.provenance import git_sha, package_versions
from pspo_repro.common.redact import redact
from pspo_repro.common.safe_paths import (
    UnsafePathError,
    check_name,
    check_seed,
    ensure_under,
)
from pspo_repro.common.startup import EVALUATION_STACK, import_frozen
from pspo_repro.data.datasets import load_benchmark
from pspo_repro.data.problems import DataError, Problem
from pspo_repro.evaluation import cells, metrics
from pspo_repro.evaluation.settings import (  # the settings checks: their own module, read in one place
    EvalError,
    _precheck_argv,
    sources_of,
    validate,
)
from pspo_repro.scoring import grading
from pspo_repro.scoring.authors_reward import authors_gsm8k_reward

log = logging.getLogger(__name__)

PASS_KS = metrics.PASS_KS
# chunk_size=null: prompts per submission by backend (vLLM batches a whole submission across temperatures).
CHUNK_SIZE = {"hf": 32, "vllm": 512}
# Test hook: called after each chunk is appended (fault-injection tests raise from it).
AFTER_CHUNK_HOOK: Callable[[int], None] | None = None


@dataclass(frozen=True)
class Target:
    """What is evaluated and under which identity the results are stored."""

    model: str
    method: str
    seed: int
    tag: str
    run_dir: str | None
    checkpoint: str  # a local folder or a hub id
    # With allow_foreign_checkpoint=true: the resolved checkpoint that lies outside the run folder (after
    # symlinks); its cells carry it as ``foreign_checkpoint`` and aggregation lists them.
    foreign_checkpoint: str | None = None


# ---------------------------------------------------------------- input resolution


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))


def _check_checkpoint(folder: Path) -> None:
    if not folder.is_dir():
        raise EvalError(f"checkpoint not found: {folder}")
    if not (folder / "config.json").is_file():
        raise EvalError(f"checkpoint {folder} has no config.json (not a saved model)")
    if not _has_tokenizer(folder):
        raise EvalError(f"checkpoint {folder} has no tokenizer files (tokenizer.json/tokenizer_config.json)")
    # Weights are read as safetensors only: a pickle (pytorch_model.bin) can run code when loaded.
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        raise EvalError(f"checkpoint {folder} has no *.safetensors weights (pickled weights are not loaded)")
    from pspo_repro.common.run_dir import _safetensors_problem

    for shard in shards:
        if why := _safetensors_problem(shard):
            raise EvalError(f"checkpoint {folder}: {why}")


def _check_finished(info: dict[str, Any], info_path: Path, folder: Path, by_name: bool) -> None:
    """An unfinished run or a checkpoint without its completion marker is refused (its best checkpoint can
    still change, or its save was cut short), unless the checkpoint was named with ``checkpoint=``: then
    one warning line, and the cells record why they are provisional."""
    from pspo_repro.common.run_dir import COMPLETE_MARKER

    problems = []
    if info.get("status") != "finished":
        problems.append(
            f"the run is {info.get('status', 'of unknown status')!r}, not 'finished' ({info_path})"
        )
    if not (folder / COMPLETE_MARKER).is_file():
        problems.append(f"{folder} has no {COMPLETE_MARKER} (its save may have been cut short)")
    if not problems:
        return
    if not by_name:
        raise EvalError(
            f"{'; '.join(problems)}: refusing to write final-looking results; wait for the run to finish, "
            f"or name a checkpoint with checkpoint=<folder> to evaluate it anyway"
        )
    PROVISIONAL[str(folder.resolve())] = "; ".join(problems)
    print(f"warning: evaluating {folder} as asked by name, although {'; '.join(problems)}", file=sys.stderr)


# Checkpoints evaluated although unfinished (named with checkpoint=): resolved path -> why (in their cells).
PROVISIONAL: dict[str, str] = {}


def resolve_target(cfg: Any) -> Target:
    """The model/checkpoint to evaluate and its result identity, from ``run=`` or ``model=``."""
    if cfg.run and cfg.model_ref:
        raise EvalError("give run=<run folder> or model=<name|path|hub id>, not both")
    local = cfg.get("model_path")
    if local and not cfg.model_ref:  # with run= it would be ignored
        raise EvalError("model_path= needs model=<preset>: the folder holds that preset's weights")
    if cfg.run:
        return _run_target(cfg)
    return _model_target(cfg, local)


def _run_target(cfg: Any) -> Target:
    """Step for ``run=``: the run's best checkpoint (or ``checkpoint=``), filed under the run's identity."""
    run_dir = _find_run_dir(cfg.run)
    info_path = run_dir / "run.json"
    info = _read_run_info(info_path)
    ckpt = cfg.checkpoint or info.get("best_checkpoint")
    if not ckpt:
        raise EvalError(f"{info_path} has no best_checkpoint; pass checkpoint=<folder>")
    if not isinstance(ckpt, str):
        raise EvalError(f"{info_path}: best_checkpoint must be a folder name, got {ckpt!r}")
    folder = Path(str(ckpt)).expanduser()
    folder = folder if folder.is_absolute() else run_dir / folder
    # Results are filed under the run's identity: only a checkpoint of that run may carry it, unless the user
    # opts in (allow_foreign_checkpoint=true), and then the cells say so.
    source = "checkpoint=" if cfg.checkpoint else f"best_checkpoint in {info_path}:"
    foreign = _foreign_checkpoint(run_dir, folder, source)
    if foreign and not cfg.get("allow_foreign_checkpoint", False):
        raise EvalError(
            f"{foreign}; evaluate another model as model=<folder>, or pass allow_foreign_checkpoint=true to "
            "file it under this run, its cells marked foreign_checkpoint"
        )
    _check_checkpoint(folder)
    try:  # run.json is a file on disk: its names are untrusted like any other (safe_paths)
        target = Target(
            check_name(f"model in {info_path}", info["model"]),
            check_name(f"method in {info_path}", info["method"]),
            check_seed(f"seed in {info_path}", info["seed"]),
            check_name(f"tag in {info_path}", info["tag"]) if info.get("tag") else "",
            str(run_dir),
            str(folder.resolve()),
            str(folder.resolve()) if foreign else None,
        )
    except UnsafePathError as exc:
        raise EvalError(str(exc)) from None
    from pspo_repro.common.run_dir import identity_problem

    if why := identity_problem(run_dir, info, info_path):  # run.json names the run its folder is
        raise EvalError(why)
    _check_finished(info, info_path, folder, by_name=bool(cfg.checkpoint))
    if foreign:
        print(f"warning: evaluating a foreign checkpoint as asked (allow_foreign_checkpoint=true): {foreign}; "
              "its cells are marked foreign_checkpoint", file=sys.stderr)  # fmt: skip
    return target


def _foreign_checkpoint(run_dir: Path, folder: Path, source: str) -> str | None:
    """Why ``folder`` is not one of ``run_dir``'s own checkpoints (None when it is): it lies outside the run
    folder as written, or after following symlinks (the folder itself, or any file in it, such as a
    ``model.safetensors`` linked from another run)."""
    try:
        ensure_under(run_dir, folder, source)
    except UnsafePathError as exc:
        return f"{exc}, the run folder"
    home = run_dir.resolve()
    real = folder.resolve()
    if real == home or not real.is_relative_to(home):
        return f"{source} {folder} resolves to {real}, outside the run folder {home} (a symlink)"
    for p in sorted(folder.rglob("*")) if folder.is_dir() else []:
        target = p.resolve()
        if not target.is_relative_to(home):
            return f"{source} {folder}: {p.relative_to(folder)} resolves to {target}, outside the run folder {home}"
    return None


def _find_run_dir(run: Any) -> Path:
    """The run folder ``run=`` names: a path, else a folder under ``<results>/runs``."""
    run_dir = Path(str(run)).expanduser()
    if not run_dir.is_dir() and (results_dir() / "runs" / str(run)).is_dir():
        run_dir = results_dir() / "runs" / str(run)
    if not run_dir.is_dir():
        raise EvalError(f"run folder not found: {run} (also tried {results_dir() / 'runs' / str(run)})")
    return run_dir


def _read_run_info(info_path: Path) -> dict[str, Any]:
    """The run's ``run.json``, read as untrusted input: a JSON object with model, method and seed."""
    if not info_path.is_file():
        raise EvalError(f"{info_path} not found: not a training run folder")
    try:
        info = json.loads(info_path.read_bytes().decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise EvalError(f"{info_path}: malformed JSON ({exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise EvalError(f"{info_path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    if not isinstance(info, dict):
        raise EvalError(f"{info_path}: expected a JSON object, got {type(info).__name__}")
    missing = [k for k in ("model", "method", "seed") if info.get(k) is None]
    if missing:
        raise EvalError(f"{info_path}: missing field(s) {', '.join(missing)}")
    return info


def _model_target(cfg: Any, local: Any) -> Target:
    """``model=``: a model preset, the tiny model, a local folder or a hub id, as a baseline."""
    if not cfg.model_ref:
        raise EvalError("nothing to evaluate: give run=<run folder> or model=<name|path|hub id>")
    if cfg.checkpoint:
        raise EvalError("checkpoint= selects a checkpoint of a run; use it with run=, or pass model=<path>")
    name = str(cfg.model_ref)
    preset = CONF_DIR / "model" / f"{name}.yaml"
    if local and not ("/" not in name and preset.is_file()):
        presets = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))
        raise EvalError(
            f"model_path= gives a preset's weights and needs model=<preset> ({', '.join(presets)}), "
            f"got model={name}"
        )
    if "/" not in name and preset.is_file():
        return _preset_target(name, preset, local)
    if name == "tiny":
        from pspo_repro.training.tiny_model import tiny_model_path

        return Target("tiny", "baseline", 0, "", None, str(tiny_model_path()))
    path = Path(name).expanduser()
    if path.exists():
        _check_checkpoint(path)
        try:
            label = check_name(f"model={name} (its folder name names the results)", path.resolve().name)
        except UnsafePathError as exc:
            raise EvalError(str(exc)) from None
        return Target(label, "baseline", 0, "", None, str(path.resolve()))
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise EvalError(f"model path not found: {name}")
    try:
        label = check_name(f"model={name}", name.split("/")[-1])
    except UnsafePathError as exc:
        raise EvalError(str(exc)) from None
    return Target(label, "baseline", 0, "", None, name)  # a hub id


def _preset_target(name: str, preset: Path, local: Any) -> Target:
    """``model=<preset>``: its weights from ``model_path=``, its ``path`` or its ``hub_id``."""
    # A training model preset (conf/model/<name>.yaml): the same name as its training runs, so the
    # baseline row lines up with them in tables.
    from omegaconf import OmegaConf

    spec = OmegaConf.load(preset)
    # model_path= (the preset's weights from a local folder, offline) before the preset's own path; both
    # are stored under the preset's name.
    weights = local or spec.get("path")
    if weights:
        path = Path(str(weights)).expanduser()
        _check_checkpoint(path)
        return Target(str(spec.name), "baseline", 0, "", None, str(path.resolve()))
    if spec.get("hub_id"):
        return Target(str(spec.name), "baseline", 0, "", None, str(spec.hub_id))
    if name == "tiny":
        from pspo_repro.training.tiny_model import tiny_model_path

        return Target("tiny", "baseline", 0, "", None, str(tiny_model_path()))
    raise EvalError(f"{preset} names neither path nor hub_id")


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
        "source": sources_of(cfg).get(dataset),
    }
    identity = {"model": target.model, "method": target.method, "seed": target.seed, "tag": target.tag,
                "checkpoint": target.checkpoint}  # fmt: skip
    return cells.cell_header(identity, dataset, problems, t, settings)


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
    problems_by_ds = {
        name: load_benchmark(name, str(cfg.eval.split), cfg.eval.limit, sources.get(name))
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
            **OmegaConf.to_container(cfg.vllm, resolve=True),
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
    if target.checkpoint in PROVISIONAL:  # asked for by name (checkpoint=) although unfinished
        fields["provisional"] = PROVISIONAL[target.checkpoint]
    if target.foreign_checkpoint:  # allow_foreign_checkpoint=true: not a checkpoint of the filing run
        fields["foreign_checkpoint"] = target.foreign_checkpoint
    write_json(c.paths["json"], cells.final_record(c.header, records, **fields))
    c.paths["partial"].unlink(missing_ok=True)
    log.info("wrote %s", c.paths["json"])


def _load_tokenizer(checkpoint: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(checkpoint)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EvalError(f"cannot load the tokenizer of {checkpoint}: {first}") from None


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


def _hydra_main() -> None:
    import hydra

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="evaluate")
    def _run(cfg: Any) -> None:
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

    _run()


def rewrite_overrides(argv: list[str]) -> list[str]:
    """``model=X`` -> ``model_ref=X``: ``conf/model/`` is the training model group, so Hydra would read
    ``model=`` as a group choice; the evaluator takes a preset name, a path or a hub id instead.
    ``model.path=P`` (the training override for local weights) -> ``model_path=P``."""
    out = []
    for a in argv:
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


def main() -> None:
    """``python -m pspo_repro.evaluate [run=...|model=...] [eval=...] [key=value ...]``."""
    from pspo_repro.common.cli import fail, precheck_overrides

    try:
        _precheck_argv(sys.argv[1:])
    except EvalError as exc:
        fail(str(exc))
    from pspo_repro.common.paths import absolutize_args

    sys.argv = [sys.argv[0], *absolutize_args(rewrite_overrides(sys.argv[1:]))]
    precheck_overrides(CONF_DIR, "evaluate", sys.argv[1:])  # a typo in a key: one line, not Hydra's five
    from pspo_repro.common.output_dirs import env_folders_problem

    if why := env_folders_problem("eval"):  # before any model loads or cell is started
        fail(why)
    _hydra_main()
