"""What an evaluate/predict actor pool may ask of the Ray cluster (app/evaluation/scoring.py):
refused at once where it could never score, instead of waiting with no end."""

from __future__ import annotations

import pytest

from app.evaluation.scoring import cpus_per_actor_problem


def test_more_cpus_than_any_node_has_is_refused() -> None:
    said = cpus_per_actor_problem(3, [1, 2, 2], readers_apart=True)
    assert said == "no node of the Ray cluster has that many CPUs (the largest has 2)"


@pytest.mark.parametrize("cpus", [2, 1.5])
def test_an_actor_that_leaves_its_lone_node_no_cpu_for_its_readers_is_refused(
    cpus: float,
) -> None:
    """A local Ray on two cores: `--cpus-per-actor 2` (or 1.5) printed "scored 0 rows, none yet
    after N s" for as long as it was let run (a red-team pass)."""
    said = cpus_per_actor_problem(cpus, [2], readers_apart=True)
    assert said is not None and "scoring would never start: give at most 1" in said, said
    assert f"leave {2 - cpus:g} of the 2 CPUs of the only node it fits on" in said
    # A head without CPUs (a Kubernetes head) is no place for the readers either.
    assert cpus_per_actor_problem(cpus, [0, 2], readers_apart=True) == said


def test_readers_on_another_node_or_inside_the_actors_let_it_score() -> None:
    assert cpus_per_actor_problem(2, [2, 1], readers_apart=True) is None
    assert cpus_per_actor_problem(2, [4], readers_apart=True) is None
    assert cpus_per_actor_problem(1.5, [2.5], readers_apart=True) is None
    # 1 CPU and no GPU: Ray Data runs the reading inside the actors, so a lone CPU will do.
    assert cpus_per_actor_problem(1, [1], readers_apart=False) is None


def test_a_lone_node_of_one_cpu_says_to_join_a_larger_cluster() -> None:
    said = cpus_per_actor_problem(1, [1], readers_apart=True)
    assert said is not None and said.endswith("join a cluster with more CPUs"), said
