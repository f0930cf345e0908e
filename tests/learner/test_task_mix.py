"""The training data are registry entries with weights (``[[data.tasks]]``): a user's own JSONL file trains with its
own verifier type, a mix draws in proportion to its weights, and bad data or config is one error naming the thing."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from pathlib import Path

import pytest

from conductor.pool import load_pool
from schemas.verify import IOTest, StdioTestsReference, TextReference
from services.learner.config import ConfigError, parse_config, with_data
from services.learner.episodes import first_round
from services.learner.recursion import RecursionBuffer
from services.learner.stream import EpisodeStream, held_out, problems, shares
from tasks import sim
from tasks.errors import DatasetError
from tasks.sim.codegen import STDIN_FORMAT

POOL = str(sim.pool_path())


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _config(tasks: str, data: str = "") -> object:
    return parse_config(f'[model]\nsource = "tiny"\n[data]\npool_file = "{POOL}"\n{data}\n{tasks}')


def _adder(n: int) -> dict:
    return {
        "uid": f"add-{n}",
        "prompt": f"Read two integers and print their sum. (#{n})",
        "tests": [{"input": f"{n} 1\n", "output": f"{n + 1}\n"}],
    }


def test_a_users_jsonl_tasks_train_with_their_own_verifier_type(tmp_path: Path) -> None:
    train = _write(tmp_path / "adders.jsonl", [_adder(n) for n in range(6)])
    test = _write(tmp_path / "adders-test.jsonl", [_adder(n) for n in range(100, 103)])
    config = _config(
        f'[[data.tasks]]\nname = "jsonl"\npath = "{train}"\ntest_path = "{test}"\nverifier = "stdio"\n'
        'fields = { id = "uid", question = "prompt" }\n'
    )
    found = problems(config, "train")
    assert [p.id for p in found] == [f"adders/add-{n}" for n in range(6)]
    first = found[0]
    assert first.domain == "code" and first.benchmark == "jsonl"
    assert first.reference == StdioTestsReference(tests=[IOTest(input="0 1\n", output="1\n")])
    assert (
        first.question == f"Read two integers and print their sum. (#0)\n\n{STDIN_FORMAT}"
    )  # its harness's format
    assert {p.id for p in held_out(config)} == {f"adders-test/add-{n}" for n in range(100, 103)}
    episode = first_round(first, ["sim-coder"])
    assert episode.reference == first.reference and episode.domain == "code"


def test_a_weighted_mix_draws_in_proportion(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.jsonl", [{"question": f"a{n}?", "answer": str(n)} for n in range(7)])
    b = _write(tmp_path / "b.jsonl", [{"question": f"b{n}?", "answer": str(n)} for n in range(5)])
    config = _config(
        f'[[data.tasks]]\nname = "jsonl"\npath = "{a}"\nverifier = "math"\nweight = 3\nheld_out = false\n'
        f'[[data.tasks]]\nname = "jsonl"\npath = "{b}"\nverifier = "math"\nweight = 1\nheld_out = false\n'
        "[recursion]\nfraction = 0\n"
    )
    mix = shares(config, "train")
    assert [(s.weight, len(s.problems)) for s in mix] == [(3.0, 7), (1.0, 5)]
    assert mix[0].problems[0].reference == TextReference(answer="0", kind="math")
    stream = EpisodeStream(mix, load_pool(sim.pool_path()), config, RecursionBuffer())
    drawn = Counter(ep.question[0] for ep in itertools.islice(stream.episodes(), 4000))
    assert abs(drawn["a"] / 4000 - 0.75) < 0.03  # 3 : 1, whatever the entries' sizes


def test_one_entry_draws_as_before_domain_by_domain() -> None:
    """A single entry is not drawn by weight at all: the stream (and a resumed run's) is the one it always was."""
    config = parse_config(
        '[model]\nsource = "tiny"\n[[data.tasks]]\nname = "sim"\ndomains = ["math", "mcq"]\n'
    )
    stream = EpisodeStream(shares(config, "train"), load_pool(sim.pool_path()), config, RecursionBuffer())
    assert [ep.domain for ep in itertools.islice(stream.episodes(), 12)] == ["math", "mcq"] * 6


def test_the_held_out_sample_of_the_sim_family_is_unchanged() -> None:
    """The same questions as before the registry: a run measured before and after the change compares."""
    config = parse_config(
        '[model]\nsource = "tiny"\n[data]\neval_questions = 32\n'
        '[[data.tasks]]\nname = "sim"\ndomains = ["math", "mcq"]\n'
    )
    pool = [p for p in sim.tasks("test") if p.domain in ("math", "mcq")]
    rng = random.Random("eval:0")
    expected = [p for d in ("math", "mcq") for p in rng.sample([p for p in pool if p.domain == d], 16)]
    assert held_out(config) == expected
    default = parse_config('[model]\nsource = "tiny"\n')
    assert problems(default, "train") == sim.tasks("train")  # every domain, as data.domains' old default


def test_a_malformed_record_names_its_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text('{"question": "q1", "answer": "1"}\n{"question": "q2"\n')
    config = _config(f'[[data.tasks]]\nname = "jsonl"\npath = "{path}"\nheld_out = false\n')
    with pytest.raises(DatasetError, match=rf"data\.tasks\[0\] \(jsonl\): jsonl: {path}:2: not JSON"):
        problems(config, "train")
    path.write_text('{"question": "q1", "answer": "1"}\n\n{"question": "q3", "solution": "3"}\n')
    with pytest.raises(DatasetError, match=rf"{path}:3: no answer under 'answer'"):
        problems(config, "train")


def test_held_out_questions_must_not_be_training_questions(tmp_path: Path) -> None:
    path = _write(tmp_path / "mine.jsonl", [{"question": f"q{n}", "answer": "1"} for n in range(3)])
    config = _config(f'[[data.tasks]]\nname = "jsonl"\npath = "{path}"\n')
    with pytest.raises(
        ConfigError, match=r"data\.tasks\[0\] \(jsonl\): 3 held-out questions are training .*test_path"
    ):
        held_out(config)


def test_a_benchmark_entry_trains_on_its_file_never_on_its_fixture(tmp_path: Path) -> None:
    config = _config('[[data.tasks]]\nname = "mmlu"\n')
    with pytest.raises(
        ConfigError, match=r"data\.tasks\[0\] \(mmlu\): set path = a local copy of its train split"
    ):
        problems(config, "train")
    mmlu = _write(
        tmp_path / "mmlu.jsonl",
        [{"question": "2+2?", "choices": ["3", "4", "5", "6"], "answer": 1, "subject": "math"}],
    )
    given = with_data(config, [f"mmlu={mmlu}", f"MMLU:test={mmlu}"])
    assert given.data.tasks[0].path == str(mmlu) and given.data.tasks[0].test_path == str(mmlu)
    [question] = problems(given, "train")
    assert question.reference == TextReference(answer="B", kind="mcq", choices=["3", "4", "5", "6"])
    with pytest.raises(ConfigError, match=r"--data gpqa_diamond: no \[\[data\.tasks\]\] entry is named so"):
        with_data(config, [f"gpqa_diamond={mmlu}"])


def test_bad_task_config_is_one_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"data\.tasks\[1\]: unknown task 'gsm8k'; known: sim, math500, "):
        parse_config(
            '[model]\nsource = "tiny"\n[[data.tasks]]\nname = "sim"\n[[data.tasks]]\nname = "gsm8k"\n'
        )
    with pytest.raises(ConfigError, match=r"data\.tasks\[0\]: aime25 has no 'train' split; it has: test"):
        _config('[[data.tasks]]\nname = "aime25"\npath = "x.jsonl"\n')
    with pytest.raises(
        ConfigError, match=r"data\.tasks\[0\]: unknown verifier type 'regex'; known: auto, math"
    ):
        _config('[[data.tasks]]\nname = "jsonl"\npath = "x.jsonl"\nverifier = "regex"\n')
    with pytest.raises(
        ConfigError, match=r"data\.pool_file: the sim pool's workers answer only sim questions"
    ):
        parse_config('[model]\nsource = "tiny"\n[[data.tasks]]\nname = "jsonl"\npath = "x.jsonl"\n')


def test_the_old_spelling_names_the_new_one() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config('[model]\nsource = "tiny"\n[data]\nfamily = "sim"\ndomains = ["math", "mcq"]\n')
    assert str(info.value).endswith(
        "instead of data.family and data.domains write:\n"
        '[[data.tasks]]\nname = "sim"\ndomains = ["math","mcq"]'
    )
