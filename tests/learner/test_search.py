"""The search-based cold start (services/learner/search.py): candidates, the fixed completion shape, selection by
shrunk means and cost, the fresh-draw pool, and one tiny run through the real rollout path."""

from __future__ import annotations

import tomllib
from pathlib import Path

import msgspec
import pytest

from conductor.pool import load_pool
from conductor.workflow import parse_completion
from schemas.verify import TextReference
from services.learner import search, telemetry
from services.learner.config import ConfigError, LearnerConfig, check
from services.learner.episodes import Episode
from services.learner.recipes import PRESETS, load_recipe
from services.learner.stream import fresh_draw_pool
from tasks import sim

POOL = load_pool(sim.pool_path())
VIEW = POOL.names()  # sim-frontier, sim-math, sim-knowledge, sim-coder, sim-small
RECIPE = load_recipe("smollm2-views3")  # the default's recipe: stages route, views, views2, views3


def _stage(name: str) -> LearnerConfig:
    return RECIPE.stages[RECIPE.stage(name)].config


def _relay_stage(**search_changes: object) -> LearnerConfig:
    """Stage 2d (`smollm2-views4`, an experiment that left presets/: docs/policies.md, "Experiments"): the views2
    stage's search by view with the relay grammar, 24 draws a candidate, the tolerance of stage 2c, and room for
    five-step completions; ``search_changes`` make stage 2e (`smollm2-views5`) of it."""
    views2 = _stage("views2")
    found = views2.cold_start.search
    assert found is not None
    relay = msgspec.structs.replace(
        found, **({"grammar": "relay", "draws": 24, "tolerance": 0.017} | search_changes)
    )
    after = str(RECIPE.stages[RECIPE.stage("views2")].out / "adapter")  # it started from stage 2b's policy
    config = msgspec.structs.replace(
        views2,
        model=msgspec.structs.replace(views2.model, adapter=after, seed=3),
        cold_start=msgspec.structs.replace(views2.cold_start, search=relay),
        grpo=msgspec.structs.replace(views2.grpo, max_completion_tokens=320),
    )
    check(config)
    return config


def _episode(domain: str, question: str = "q") -> Episode:
    return Episode(question=question, reference=TextReference(answer="1"), domain=domain, pool=VIEW)


def test_every_candidate_renders_to_a_workflow_that_parses_back():
    cands = search.candidates(len(VIEW))
    assert len(cands) == 5 + 25 + 5
    for cand in cands:
        for domain in ("math", "mcq", "code"):
            text = search.completion(cand, domain, POOL.subset(VIEW))
            wf = parse_completion(text, n_workers=len(VIEW), max_steps=5).workflow
            assert wf.model_id == list(cand.ordinals)
            assert wf.access_list[0] == [] and all(a == "all" for a in wf.access_list[1:])
            assert all("Check the answer above" in t for t in wf.subtasks[1:])  # checks worded as checks


def test_the_relay_grammar_adds_chains_where_another_worker_checks_between_the_solvers_calls():
    short, relay = search.candidates(len(VIEW)), search.candidates(len(VIEW), "relay")
    assert relay[: len(short)] == short  # the short grammar's order is kept: saved tallies still line up
    added = relay[len(short) :]
    assert len(added) == 3 * 5 * 4 and len(set(added)) == len(added)
    assert (
        search.Candidate("relay4", (0, 4, 4, 0)) in added
        and search.Candidate("relay5", (0, 4, 0, 4, 0)) in added
    )
    assert all(c.ordinals[0] == c.ordinals[-1] != c.ordinals[1] for c in added)
    view = POOL.subset(["sim-frontier", "sim-coder", "sim-small"])
    for cand in search.candidates(3, "relay"):
        for domain in ("math", "mcq"):
            text = search.completion(cand, domain, view, "fit_first")
            wf = parse_completion(text, n_workers=3, max_steps=5).workflow
            assert wf.model_id == list(cand.ordinals)
            assert wf.access_list[0] == [] and all(a == "all" for a in wf.access_list[1:])
    text = search.completion(search.Candidate("relay4", (0, 2, 2, 0)), "mcq", view, "fit_first")
    assert (
        "Model 2 (small fast model) then checks the answer, then Model 2, then Model 0 check it in turn."
        in text
    )
    with pytest.raises(ValueError, match="grammar 'long'"):
        search.candidates(3, "long")


def test_a_relay_label_beats_the_solvers_own_checks_when_the_tolerance_allows_it():
    """Frontier, small, small, frontier: about the accuracy of the frontier model checking itself twice at the
    price of checking once (stage 2d, `smollm2-views4`: docs/policies.md, "Experiments"). Searched with the relay
    grammar, choose reads the relay's tallies (their order is the grammar's), and picks it."""
    n, k = 1000, 3
    view = ["sim-frontier", "sim-coder", "sim-small"]
    tallies = {(0, 0): (0.905 * n, 4.0, n), (0, 0, 0): (0.928 * n, 6.0, n), (0, 2, 2, 0): (0.927 * n, 4.1, n)}
    cands = search.candidates(k, "relay")
    row = [search.Tally(*tallies.get(c.ordinals, (0.0, 0.0, 0))) for c in cands]
    ep = Episode(question="q", reference=TextReference(answer="1"), domain="mcq", pool=view)
    picks = search.choose([search.Searched(ep, row, "relay")], prior=0.0, cost_weight=0.0, tolerance=0.017)
    assert picks[0][1] == search.Candidate("relay4", (0, 2, 2, 0))


def test_the_reasoning_names_why_the_worker_fits():
    text = search.completion(search.Candidate("solve_check", (1, 1)), "math", POOL.subset(VIEW))
    assert text.startswith(
        "This is a math problem. Model 1 (open-weight reasoning model tuned for mathematics)"
    )
    assert "Model 1 then checks the answer" in text


def _searched(domain: str, per_candidate: dict[tuple[int, ...], tuple[float, float, int]]) -> search.Searched:
    """A question's tallies: (ordinals) -> (reward sum, cost sum, draws); candidates not named got nothing."""
    tallies = []
    for cand in search.candidates(len(VIEW)):
        r, c, n = per_candidate.get(cand.ordinals, (0.0, 0.0, 0))
        tallies.append(search.Tally(reward=r, cost=c, n=n))
    return search.Searched(_episode(domain), tallies)


def test_a_lucky_draw_on_one_question_does_not_beat_the_domains_best():
    """The small model got 4/4 on one question; over the domain it is right half the time. The specialist is 0.95
    over the domain and 3.5/4 here. Without shrinkage the small model would win this question."""
    lucky = _searched("math", {(4,): (4.0, 0.0001, 4), (1,): (3.5, 0.0004, 4)})
    others = [_searched("math", {(4,): (2.6, 0.0001, 4), (1,): (3.9, 0.0004, 4)}) for _ in range(20)]
    picks = search.choose([lucky, *others], prior=32.0, cost_weight=60.0)
    assert picks[0][1].ordinals == (1,)
    raw = search.choose([lucky, *others], prior=0.0, cost_weight=0.0)
    assert raw[0][1].ordinals == (4,)  # what selecting on one question's draws would do


def test_the_cost_term_prefers_the_cheaper_of_two_near_equals():
    q = {(1,): (3.8, 0.0008, 4), (1, 1): (3.82, 0.0016, 4), (1, 1, 1): (3.9, 0.0026, 4)}
    picks = search.choose([_searched("math", q)], prior=8.0, cost_weight=60.0)
    assert picks[0][1].ordinals == (1,)
    picks = search.choose([_searched("math", q)], prior=8.0, cost_weight=0.0)
    assert picks[0][1].ordinals == (1, 1, 1)


def test_figures_report_topologies_steps_and_the_specialists_share():
    specialists = telemetry.specialists(POOL)
    assert specialists == {"math": "sim-math", "mcq": "sim-knowledge", "code": "sim-coder"}
    picks = [
        (_episode("math"), search.Candidate("solve_check", (1, 1))),
        (_episode("math"), search.Candidate("single", (0,))),
        (_episode("mcq"), search.Candidate("solve_check", (0, 2))),
    ]
    no_knowledge = Episode(
        question="q", reference=TextReference(answer="1"), domain="mcq", pool=["sim-frontier", "sim-small"]
    )
    picks.append(
        (no_knowledge, search.Candidate("single", (0,)))
    )  # not counted: its view lacks the specialist
    fig = search.figures(picks, specialists)
    assert fig["topologies"] == {"solve_check": 2, "single": 2}
    assert fig["mean_steps"] == pytest.approx(6 / 4, abs=1e-3)
    assert fig["specialist_share"] == {"math": 0.5, "mcq": 1.0}


def test_the_fresh_draw_pool_varies_every_sim_worker(tmp_path):
    path = fresh_draw_pool(sim.pool_path(), tmp_path)
    raw = tomllib.loads(path.read_text())
    assert all(w["sim"]["vary_by_task"] is True for w in raw["workers"])
    assert all(Path(w["sim"]["dataset"]).is_absolute() for w in raw["workers"])
    assert load_pool(path).names() == VIEW


def test_a_missing_pool_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        fresh_draw_pool(tmp_path / "nope.toml", tmp_path)


def test_the_route_stage_is_a_search_only_run():
    config = _stage("route")
    assert config.cold_start.search and not config.cold_start.synthetic and config.grpo.steps == 0
    assert (
        config.data.fresh_draws
        and not config.data.shuffle_view
        and config.data.k_min == config.data.k_max == 5
    )
    assert msgspec.structs.asdict(config.output)["adapter_rank"] == 8


def test_fit_first_reasoning_writes_the_description_before_the_number():
    view = POOL.subset(["sim-frontier", "sim-knowledge", "sim-small"])  # the mcq specialist is Model 1 here
    text = search.completion(search.Candidate("solve_check", (1, 1)), "mcq", view, "fit_first")
    assert text.startswith(
        "This is a multiple-choice question. The mid-size instruction model with broad factual "
        "knowledge is Model 1; it fits it best"
    )
    assert parse_completion(text, n_workers=3, max_steps=5).workflow.model_id == [1, 1]


def test_the_views_stage_starts_from_the_route_stages_adapter_on_restricted_views():
    """Stage 2 of the default's recipe (once the preset `smollm2-views`, from the shipped `smollm2-route`) starts from
    stage 1's exported adapter: the recipe reproduces the policy from the base model, never from a shipped one."""
    config = _stage("views")
    assert Path(config.model.adapter) == RECIPE.stages[RECIPE.stage("route")].out / "adapter"
    assert config.output.adapter_base == config.model.path  # exported against the original base
    assert config.data.k_max < len(VIEW) and 0 < config.data.full_view_fraction < 1
    assert config.cold_start.search.reasoning == "fit_first"


def test_with_a_tolerance_the_cheapest_near_best_candidate_wins_whatever_it_costs():
    """A view whose only strong worker is dear: a linear $ term picks the weak cheap one; the tolerance rule picks
    the strong one, and among near-equals the cheaper."""
    dear, cheap_weak, cheap_near = (0, 0), (3, 3), (0, 4)  # frontier twice; coder twice; frontier then small
    two = {dear: (3.8, 0.024, 4), cheap_weak: (2.8, 0.0008, 4)}  # 95% at $0.006; 70% at $0.0002
    found = [_searched("math", two)]
    assert search.choose(found, prior=0.0, cost_weight=60.0)[0][1].ordinals == cheap_weak
    assert search.choose(found, prior=0.0, cost_weight=0.0, tolerance=0.02)[0][1].ordinals == dear
    found = [_searched("math", {**two, cheap_near: (3.76, 0.0092, 4)})]  # 94% at $0.0023
    assert search.choose(found, prior=0.0, cost_weight=0.0, tolerance=0.02)[0][1].ordinals == cheap_near
    assert search.choose(found, prior=0.0, cost_weight=0.0, tolerance=0.001)[0][1].ordinals == dear


def test_chosen_by_view_one_domain_on_one_view_gets_one_label_whatever_its_draws():
    """Per question, a tolerance turns each question's luck into a cheap label; by view, the domain means decide."""
    three, two = (0, 0, 0), (0, 0)  # the frontier model solving and checking twice; checking once
    found = [
        _searched("math", {three: (7.0, 0.054, 8), two: (6.0, 0.032, 8)}),  # 88% vs 75% on this question ...
        _searched("math", {three: (6.5, 0.054, 8), two: (6.5, 0.032, 8)}),  # ... 81% each on this one
        _searched("math", {three: (7.0, 0.054, 8), two: (6.0, 0.032, 8)}),
    ]
    per_question = search.choose(found, prior=0.0, cost_weight=0.0, tolerance=0.02)
    assert [c.ordinals for _, c in per_question] == [three, two, three]
    by_view = search.choose(found, prior=0.0, cost_weight=0.0, tolerance=0.02, by="view")
    assert [c.ordinals for _, c in by_view] == [three, three, three]
    with pytest.raises(ValueError, match="by 'pool'"):
        search.choose(found, prior=0.0, cost_weight=0.0, by="pool")


def test_the_held_out_specialist_share_counts_the_views_that_show_the_specialist():
    from schemas.rollout import RolloutResult
    from schemas.solve import StepRecord
    from services.learner.rewards import Scored

    def scored(pool: list[str], worker: str) -> Scored:
        step = StepRecord(index=0, model_id=pool.index(worker), worker=worker, subtask="Solve it.", access=[])
        result = RolloutResult(id="r", reward=1.0, parsed=True, steps=[step])
        ep = Episode(question="q", reference=TextReference(answer="1"), domain="mcq", pool=pool)
        return Scored(episode=ep, completion="", result=result, reward=1.0, step=0, policy_version="")

    shown = [scored(VIEW, "sim-knowledge"), scored(VIEW, "sim-frontier")]
    absent = [scored(["sim-frontier", "sim-small"], "sim-frontier")] * 3  # the frontier model is right here
    figures = telemetry.routing(shown + absent, telemetry.specialists(POOL))
    assert figures["specialist_share"] == {"mcq": {"any_step": 0.5, "first_step": 0.5}}
    assert figures["topologies"] == {"[]": 5}


def test_the_stage_2c_tolerance_sits_between_the_two_gaps_it_must_tell_apart():
    """Measured through the rollout path (docs/history/issue-18.md, stage 2c): a third call adds 0.0115 reward for
    the full pool's specialist and 0.0225 for the frontier model on a view without a specialist. The preset's
    tolerance keeps the specialist's two steps and the frontier's three, each with a margin of at least 0.005
    reward."""
    found = _stage("views3").cold_start.search
    assert found is not None
    tol = found.tolerance
    n = 1000
    full = _searched("math", {(1, 1): (0.968 * n, 0.38, n), (1, 1, 1): (0.9795 * n, 0.66, n)})
    bare = _searched("mcq", {(0, 0): (0.90 * n, 4.0, n), (0, 0, 0): (0.9225 * n, 6.4, n)})
    picks = search.choose([full, bare], prior=0.0, cost_weight=0.0, tolerance=tol, by="view")
    assert [c.ordinals for _, c in picks] == [(1, 1), (0, 0, 0)]
    assert 0.0115 + 0.005 <= tol <= 0.0225 - 0.005


def test_the_stage_2d_config_searches_relays_and_leaves_room_for_five_steps():
    config = _relay_stage()
    assert config.cold_start.search.grammar == "relay"
    assert config.cold_start.search.choice == "view" and config.cold_start.search.tolerance == 0.017
    assert config.cold_start.search.reasoning == "fit_first" and config.data.k_max < len(
        VIEW
    )  # views2's views
    assert config.grpo.max_completion_tokens >= 300  # a five-step relay completion is about 260 tokens


def test_an_unknown_search_grammar_is_a_config_error_naming_it(tmp_path):
    text = (PRESETS / "smollm2-views3.toml").read_text()
    text += '\n[[stage]]\nname = "relay"\n[stage.cold_start.search]\ngrammar = "longest"\n'
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(ConfigError, match=r"stage relay: .*cold_start\.search\.grammar"):
        load_recipe(str(tmp_path / "bad.toml"), runs=tmp_path)


def test_a_log_price_keeps_the_specialists_short_chain_and_buys_a_relay_where_no_specialist_is():
    """Stage 2e's rule (`smollm2-views5`: docs/policies.md, "Experiments") on the sim answer model's figures (a
    Monte Carlo of providers/sim.py; $ as served): on the full pool the math model's third call (+0.0086 reward for
    1.7x the $) is not bought, a cheap check between its calls is; on frontier, coder, small the relay frontier,
    small, small, frontier beats the frontier model checking once and five calls."""
    c = _relay_stage(cost_weight=0.03, cost_form="log", tolerance=0.0).cold_start.search
    assert c is not None
    n = 1000
    full = {(1, 1): (0.9718, 0.00026), (1, 4, 1): (0.9748, 0.00028), (1, 1, 1): (0.9804, 0.00045)}
    bare = {(0, 0): (0.9055, 0.0041), (0, 2, 0): (0.9185, 0.0043), (0, 2, 2, 0): (0.928, 0.0045)}
    bare |= {(0, 2, 0, 2, 0): (0.9345, 0.0068)}

    def searched(domain, view, figures):
        row = [
            search.Tally(*((r * n, d * n, n) if (r, d) != (0, 0) else (0.0, 0.0, 0)))
            for r, d in (figures.get(cand.ordinals, (0, 0)) for cand in search.candidates(len(view), "relay"))
        ]
        ep = Episode(question="q", reference=TextReference(answer="1"), domain=domain, pool=view)
        return search.Searched(ep, row, "relay")

    found = [searched("math", VIEW, full), searched("mcq", ["sim-frontier", "sim-coder", "sim-small"], bare)]
    picks = search.choose(
        found,
        prior=0.0,
        cost_weight=c.cost_weight,
        tolerance=c.tolerance,
        by=c.choice,
        cost_form=c.cost_form,
    )
    assert [cand.ordinals for _, cand in picks] == [(1, 4, 1), (0, 2, 2, 0)]
    linear = search.choose(found, prior=0.0, cost_weight=c.cost_weight, by="view")
    assert [cand.ordinals for _, cand in linear] == [
        (1, 1, 1),
        (0, 2, 0, 2, 0),
    ]  # 0.03 x $ is no price at all
