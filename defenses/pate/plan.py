"""PATE's defaults from public facts, and how a run spends ``target_epsilon``.

:func:`plan_pate` resolves every value of a :class:`~defenses.pate.config.PATEConfig` left unset
from the number of private members, the size of the public pool, the number of classes and the
budget: never from the private data or the votes. The rules, with their sources:

* **Teachers** n = ⌊members / 20⌋, between 1 and 250. Papernot et al. (2018, "Scalable Private
  Learning with PATE", §5) use 250 teachers on MNIST, SVHN and Adult; (2017, "Semi-supervised
  Knowledge Transfer…", §4.1, Figure 3 and §4.3) show the trade-off: more teachers give larger
  vote counts for the same noise (stronger privacy) but smaller partitions and less accurate
  teachers. Twenty examples per teacher (two per class of a 10-class task) is where the digits
  ensemble still votes its plurality correctly (93 % with 40 teachers of 18 examples, 86 % with
  160 teachers of 4); 250 caps it at the papers' count.
* **Teacher epochs** 20, or enough epochs for 200 SGD steps when a partition is small (a
  teacher of 18 examples takes one step per epoch; 20 steps leave it at 44 % on digits, 200 at
  63 %). Teachers train without noise, so this costs no privacy.
* **Confident-GNMax** scales the 2018 MNIST setting (§5: 250 teachers, T = 200, σ1 = 150,
  σ2 = 40) with the teacher count: T = 0.8 n, σ2 = 0.16 n, σ1 = 3.75 σ2. §4.1 explains the
  shape: the threshold T keeps only queries with a strong consensus, and σ2 well below the
  consensus margin keeps the noisy argmax correct; ratios of n keep both true whatever n is.
* **Queries** without a budget: 640 (the 2018 MNIST student's), at most the public pool.
* **Budget** (``target_epsilon``), met by the data-independent bound with every query charged
  as answered (:mod:`dpaudit.privacy.pate.budget`), so the plan holds whatever the votes and the
  run never stops early. As DP-SGD's :func:`defenses.dpsgd.plan.plan_dpsgd`:

  - neither ``sigma`` nor ``queries``: σ2 = 0.16 n as above, and the student asks as many
    queries as the budget allows at that σ2 (at most 640 and the public pool). If that is fewer
    than two per class, it asks two per class and σ2 is calibrated for them instead;
  - ``queries`` without ``sigma``: σ2 (with σ1 = 3.75 σ2, or the given σ1) is calibrated so the
    queries spend exactly the target;
  - ``sigma`` without ``queries``: the number of queries is the most the budget allows;
  - both: the run asks exactly ``queries`` if the budget allows them, and is refused (naming the
    number it allows) otherwise.

  The aggregator defaults to GNMax under a budget: the plan pays for every query as if it
  were answered, so Confident-GNMax's threshold would only drop answers already paid for
  (measured at ε = 2: MNIST student 0.74 with GNMax against 0.65, Adult 0.83 against 0.82).
  The record then claims the data-independent bound by default: the data-dependent ε is itself
  private (2018, §4.2) and cannot be what a published budget is checked against.

The plan's ``notes`` say, before training, what was derived and why (``train_pate`` prints them).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from dpaudit import _validate as v
from dpaudit.privacy.pate.budget import calibrate_sigma, max_queries, worst_case_epsilon

__all__ = ["PATEPlan", "plan_pate", "DEFAULT_TEACHER_EPOCHS", "EXAMPLES_PER_TEACHER", "MAX_TEACHERS"]

#: Private examples per teacher of the default teacher count (see the module docstring).
EXAMPLES_PER_TEACHER = 20
#: The papers' teacher count (2018, §5), the default's ceiling.
MAX_TEACHERS = 250
#: Teacher epochs, raised on a small partition to reach ``MIN_TEACHER_STEPS`` SGD steps.
DEFAULT_TEACHER_EPOCHS = 20
MIN_TEACHER_STEPS = 200
#: The 2018 MNIST setting as fractions of its 250 teachers: T = 200, σ2 = 40, σ1 = 150 = 3.75 σ2.
THRESHOLD_FRACTION = 0.8
SIGMA_FRACTION = 0.16
THRESHOLD_SIGMA_RATIO = 3.75
#: The 2018 MNIST student's queries.
MAX_DEFAULT_QUERIES = 640
#: Fewest labels per class a budget-derived query count gives the student.
MIN_QUERIES_PER_CLASS = 2


@dataclass(frozen=True)
class PATEPlan:
    """A PATE config with every derived value set, and what was derived.

    Attributes:
        config: the resolved config (``resolved()`` is true); the record keeps the config it was
            asked for, so its id does not change with these rules' inputs.
        notes: one line per derived value or budget decision, said before training.
        epsilon_planned: the worst-case data-independent ε of the planned queries (``None`` for
            LNMax, whose budget is not planned).
    """

    config: Any
    notes: tuple[str, ...]
    epsilon_planned: float | None


def _g(x: float) -> str:
    return f"{x:.4g}"


def _teachers_and_epochs(config: Any, *, members: int, notes: list[str]) -> tuple[int, int]:
    """The number of teachers and their epochs: as given, or derived from the private members (said in ``notes``)."""
    n = config.teachers
    if n is None:
        n = max(1, min(MAX_TEACHERS, members // EXAMPLES_PER_TEACHER))
        notes.append(
            f"teachers = {n} (one per {EXAMPLES_PER_TEACHER} of the {members} private members, at most {MAX_TEACHERS})"
        )
    elif n > members:
        raise v.invalid(
            "teachers",
            f"teachers={n} exceeds the {members} private members of the split (one example at least per teacher)",
        )
    epochs = config.epochs
    if epochs is None:
        steps_per_epoch = math.ceil((members // n) / config.batch_size)
        epochs = max(DEFAULT_TEACHER_EPOCHS, math.ceil(MIN_TEACHER_STEPS / max(1, steps_per_epoch)))
        if epochs != DEFAULT_TEACHER_EPOCHS:
            notes.append(
                f"teacher epochs = {epochs} ({MIN_TEACHER_STEPS} SGD steps on partitions of {members // n} examples)"
            )
    return n, epochs


def _resolved_values(
    config: Any, *, teachers: int, epochs: int, queries: int, sigma: float | None, notes: list[str]
) -> dict[str, float]:
    """The numeric config fields the run sets, by name (for ``dataclasses.replace``); Confident-GNMax's threshold and
    its σ derived when unset (said in ``notes``)."""
    n = teachers
    values: dict[str, float] = {"teachers": n, "epochs": epochs, "queries": queries}
    if config.aggregator != "lnmax":
        assert sigma is not None  # set or derived above for every aggregator with a GNMax step
        values["sigma"] = float(sigma)
    if config.aggregator == "confident-gnmax":
        s1 = config.threshold_sigma if config.threshold_sigma is not None else THRESHOLD_SIGMA_RATIO * values["sigma"]
        t = config.threshold if config.threshold is not None else THRESHOLD_FRACTION * n
        if config.threshold_sigma is None or config.threshold is None:
            notes.append(
                f"threshold T = {_g(t)} ({THRESHOLD_FRACTION:g} x teachers), "
                f"threshold_sigma = {_g(s1)} ({THRESHOLD_SIGMA_RATIO:g} x sigma), as T = "
                "200, sigma_1 = 150 of 2018's MNIST"
            )
        values.update(threshold=float(t), threshold_sigma=float(s1))
    return values


def plan_pate(config: Any, *, num_members: int, num_public: int, num_classes: int) -> PATEPlan:
    """Resolves a :class:`~defenses.pate.config.PATEConfig` for a run (see the module docstring).

    Args:
        config: the config as asked.
        num_members: private members (the teachers' data).
        num_public: public examples the student may query.
        num_classes: classes of the task.

    Raises:
        ValueError: the budget cannot be met (a single query exceeds it, or the given ``sigma``
            and ``queries`` exceed it: the message names the queries it allows), or explicit
            teachers or queries exceed the data.
    """
    members = v.integer("num_members", num_members, minimum=1)
    pool = v.integer("num_public", num_public, minimum=1)
    classes = v.integer("num_classes", num_classes, minimum=2)
    notes: list[str] = []
    n, epochs = _teachers_and_epochs(config, members=members, notes=notes)
    if config.queries is not None and config.queries > pool:
        raise v.invalid(
            "queries",
            f"queries={config.queries} exceeds the {pool} public examples (public_fraction={config.public_fraction:g})",
        )
    agg = config.aggregator
    confident = agg == "confident-gnmax"
    sigma, queries, target, delta = config.sigma, config.queries, config.target_epsilon, config.delta
    s1_given = config.threshold_sigma if confident else None
    ratio = THRESHOLD_SIGMA_RATIO if confident and s1_given is None else None
    planned = None
    if target is None or agg == "lnmax":
        if agg != "lnmax" and sigma is None:
            sigma = SIGMA_FRACTION * n
            notes.append(
                f"sigma = {_g(sigma)} ({SIGMA_FRACTION:g} x {n} teachers, as 40 of 250 in Papernot et al. 2018)"
            )
        if queries is None:
            queries = min(MAX_DEFAULT_QUERIES, pool)
            notes.append(f"queries = {queries} (at most {MAX_DEFAULT_QUERIES}, of {pool} public examples)")
    else:
        cap = min(MAX_DEFAULT_QUERIES, pool)

        def s1_of(s2: float) -> float | None:
            return s1_given if not confident or s1_given is not None else THRESHOLD_SIGMA_RATIO * s2

        def calibrate(q: int) -> float:
            return calibrate_sigma(
                target_epsilon=target, delta=delta, num_queries=q, threshold_ratio=ratio, threshold_sigma=s1_given
            )

        where = f"target_epsilon = {target:g} (delta = {delta:g}, data-independent, every query charged as answered)"
        if sigma is None and queries is None:
            sigma = SIGMA_FRACTION * n
            queries = max_queries(
                target_epsilon=target, delta=delta, sigma=sigma, threshold_sigma=s1_of(sigma), limit=cap
            )
            floor = min(pool, MIN_QUERIES_PER_CLASS * classes)
            if queries < floor:
                queries = floor
                sigma = calibrate(queries)
                notes.append(
                    f"sigma = {_g(sigma)} calibrated so that {queries} queries "
                    f"({MIN_QUERIES_PER_CLASS} per class) spend {where}; --queries sets the "
                    "number"
                )
            else:
                notes.append(
                    f"sigma = {_g(sigma)} ({SIGMA_FRACTION:g} x {n} teachers) and {queries} "
                    f"queries, the most (of at most {cap}) within {where}"
                )
        elif sigma is None:
            sigma = calibrate(queries)
            notes.append(
                f"sigma = {_g(sigma)} calibrated so that {queries} queries spend {where}; --queries sets the number"
            )
        else:
            allowed = max_queries(
                target_epsilon=target, delta=delta, sigma=sigma, threshold_sigma=s1_of(sigma), limit=pool
            )
            if allowed == 0:
                raise v.invalid(
                    "target_epsilon",
                    f"target_epsilon={target!r} is exceeded by a single query at "
                    f"sigma={sigma!r}; raise sigma or leave it unset to calibrate it",
                )
            if queries is None:
                queries = min(allowed, cap)
                notes.append(
                    f"sigma = {_g(sigma)} allows {allowed} queries within {where}; the "
                    f"student asks {queries} (leave --sigma unset and pass --queries to "
                    "calibrate sigma instead)"
                )
            elif queries > allowed:
                # Answering fewer than asked would silently train a different run than the one asked for.
                raise v.invalid(
                    "queries",
                    f"queries={queries} exceeds the {allowed} queries that sigma={sigma!r} "
                    f"allows within {where}; lower queries to at most {allowed}, raise "
                    "sigma, or leave sigma unset to calibrate it",
                )
            else:
                notes.append(f"sigma = {_g(sigma)} and {queries} queries stay within {where}")
    values = _resolved_values(config, teachers=n, epochs=epochs, queries=queries, sigma=sigma, notes=notes)
    resolved = dataclasses.replace(config, **values)
    if agg != "lnmax":
        planned = worst_case_epsilon(
            num_queries=int(queries), sigma=float(sigma), threshold_sigma=values.get("threshold_sigma"), delta=delta
        )
        if target is not None and planned > target * (1 + 1e-9):
            raise RuntimeError(f"internal error: the PATE plan spends epsilon={planned!r} > target_epsilon={target!r}")
    return PATEPlan(config=resolved, notes=tuple(notes), epsilon_planned=planned)
