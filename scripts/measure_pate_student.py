"""Measures the PATE student's accuracy (supervised and semi-supervised) on MNIST and Adult.

The aggregator's answers are simulated: a seeded random choice of public examples receives its
true label, except for a small fraction flipped to a random wrong class (Confident-GNMax answers
are not perfect). Settings follow Papernot et al. (2018, §5): MNIST with 286 answered queries
out of the first 9,000 test images (the last 1,000 evaluate; reported student accuracy 98.5 %),
Adult with 524 answered queries out of the first 90 % of the test split (the last 10 %
evaluate; reported 83.7 %).

Usage::

    .venv/bin/python scripts/measure_pate_student.py [--dataset mnist|adult|both]
        [--mode supervised|semi|both] [--seed 0] [--threads 2] [--data-root DIR]
        [--defaults-only] [--set epochs=200 --set confidence=0.9 ...]

Prints one line per run: dataset, mode, accuracy on the evaluation images, seconds, and the
student's training metrics. MNIST runs the :class:`StudentConfig` defaults; Adult changes
only the epochs (see ``SETTINGS``; ``--defaults-only`` measures the plain defaults there too).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit.api import StudentConfig, build_model, derive_seed, evaluate, load_dataset, numpy_rng, train_student

#: dataset → (zoo model, public fraction of the test split, answered queries, 2018 accuracy,
#: StudentConfig fields changed from the defaults). The defaults are tuned for MNIST images;
#: 524 rows of Adult's 104 features overfit the MLP after a few passes, so Adult trains for 10.
SETTINGS: dict[str, tuple[str, float, int, float, dict[str, object]]] = {
    "mnist": ("hgm-cnn", 0.9, 286, 0.985, {}),
    "adult": ("tabular-mlp", 0.9, 524, 0.837, {"epochs": 10}),
}
#: Fraction of simulated answers given a wrong label.
FLIP_FRACTION = 0.015


def _parse_override(text: str) -> tuple[str, object]:
    key, _, raw = text.partition("=")
    fields = {f.name: f for f in dataclasses.fields(StudentConfig)}
    if key not in fields:
        raise argparse.ArgumentTypeError(f"--set: unknown StudentConfig field {key!r} (known: {', '.join(fields)})")
    default = getattr(StudentConfig(), key)
    value: object
    if isinstance(default, bool):
        value = raw.lower() in ("1", "true", "yes")
    else:
        value = type(default)(raw)
    return key, value


def simulate_answers(labels: np.ndarray, *, count: int, num_classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``count`` answered queries and their labels, ~1.5 % flipped to a wrong class."""
    rng = numpy_rng(seed, "student-measure", "answers")
    chosen = np.sort(rng.choice(len(labels), size=count, replace=False))
    answers = labels[chosen].copy()
    flips = rng.choice(count, size=max(1, round(FLIP_FRACTION * count)), replace=False)
    answers[flips] = (answers[flips] + rng.integers(1, num_classes, size=flips.size)) % num_classes
    return chosen, answers


def measure(
    dataset: str,
    *,
    semi: bool,
    seed: int,
    data_root: str | None,
    overrides: dict[str, object],
    progress: bool,
    defaults_only: bool = False,
) -> dict[str, float]:
    model_name, public_fraction, count, _, tuned = SETTINGS[dataset]
    bundle = load_dataset(dataset, data_root=data_root)
    test = bundle.test
    order = np.argsort(test.ids.numpy(), kind="stable")  # "the first images" by sample id
    n_public = int(round(public_fraction * len(order)))
    public, held_out = order[:n_public], order[n_public:]
    x_pub, y_pub = test.features[public], test.labels[public].numpy()
    chosen, answers = simulate_answers(y_pub, count=count, num_classes=bundle.num_classes, seed=seed)
    if defaults_only:
        tuned = {}
    rest = np.setdiff1d(np.arange(n_public), chosen)
    config = dataclasses.replace(StudentConfig(semi_supervised=semi), **{**tuned, **overrides})  # type: ignore[arg-type]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "student-measure", "init"))
        model = build_model(model_name, input_shape=bundle.input_shape, num_classes=bundle.num_classes)
    started = time.perf_counter()
    metrics = train_student(
        model,
        labeled_features=x_pub[chosen],
        labels=torch.from_numpy(answers),
        unlabeled_features=x_pub[rest],
        config=config,
        seed=seed,
        progress=progress,
    )
    seconds = time.perf_counter() - started
    result = evaluate(model, test.features[held_out], test.labels[held_out])
    wrong = int((answers != y_pub[chosen]).sum())
    return {
        "accuracy": result["accuracy"],
        "seconds": seconds,
        "labels": float(count),
        "wrong_labels": float(wrong),
        "evaluated": float(len(held_out)),
        **metrics,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=("mnist", "adult", "both"), default="both")
    parser.add_argument("--mode", choices=("supervised", "semi", "both"), default="both")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (docs/results/pate.md's numbers: 2)")
    parser.add_argument("--data-root", default=None, help="offline data root (default: $DPAUDIT_DATA_ROOT)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        type=_parse_override,
        default=[],
        metavar="FIELD=VALUE",
        help="override a StudentConfig default",
    )
    parser.add_argument("--defaults-only", action="store_true", help="ignore the per-dataset settings in SETTINGS")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    overrides = dict(args.overrides)
    datasets = ("mnist", "adult") if args.dataset == "both" else (args.dataset,)
    modes = (False, True) if args.mode == "both" else (args.mode == "semi",)
    for dataset in datasets:
        for semi in modes:
            m = measure(
                dataset,
                semi=semi,
                seed=args.seed,
                data_root=args.data_root,
                overrides=overrides,
                progress=not args.quiet,
                defaults_only=args.defaults_only,
            )
            paper = SETTINGS[dataset][3]
            print(
                f"{dataset:5s} {'semi-supervised' if semi else 'supervised':15s} accuracy {m['accuracy']:.4f} "
                f"(paper {paper:.3f}) seconds {m['seconds']:.1f}  labels "
                f"{int(m['labels'])} ({int(m['wrong_labels'])} wrong) "
                f"eval {int(m['evaluated'])}  steps {int(m['steps'])} unlabeled_passes {m['unlabeled_passes']:.1f} "
                f"mask_rate {m['mask_rate']:.3f} sup_loss {m['supervised_loss']:.4f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
