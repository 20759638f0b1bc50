"""What every defense does after training: measure, describe and package the model as a record."""

from __future__ import annotations

import dataclasses
import time
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from dpaudit.data import ArrayDataset, DatasetBundle, Splits
from dpaudit.privacy.claims import PrivacyClaim
from dpaudit.progress import Progress
from dpaudit.provenance import provenance
from dpaudit.results.record import Membership, TrainedModel, make_model_id
from dpaudit.robustness.montecarlo import expected_score_accuracy
from dpaudit.robustness.noise import is_randomized
from dpaudit.train_request import TrainRequest
from dpaudit.training import TrainingDiverged, evaluate, predict_logits

#: Noise draws per test input behind a randomized model's ``test_accuracy`` (see build_record).
PREDICTION_DRAWS = 16


def config_dict(config: Any) -> dict[str, Any]:
    """A defense config dataclass as a plain dict (what the record stores and the model id hashes).

    Fields a config lists in its ``_omit_when_default`` class attribute are left out while
    they hold their default: options added after records were stored (the certified
    defenses' ``authors_*`` options) then change neither a default run's record nor its id,
    so existing run directories keep finding their models.
    """
    if not dataclasses.is_dataclass(config):
        return dict(config)
    out = dataclasses.asdict(config)  # type: ignore[arg-type]
    omit = getattr(config, "_omit_when_default", ())
    for f in dataclasses.fields(config):
        if f.name in omit and out[f.name] == f.default:
            del out[f.name]
    return out


def model_id_for(request: TrainRequest[Any], *, defense: str) -> str:
    """The stable id of the model ``defense`` trains for ``request`` (used to resume).

    It hashes the config and the model options as asked, the split seed and the number of members.
    """
    splits = request.splits
    full = {
        "config": config_dict(request.config),
        "model_options": request.options(),
        "split_seed": splits.seed,
        "num_members": int(len(splits.members)),
    }
    return make_model_id(
        defense=defense, dataset=request.bundle.name, model_name=request.model_name, seed=request.seed, config=full
    )


#: Examples per progress update of :func:`_evaluate_counted`: a multiple of the 1,024-example
#: batches of :func:`dpaudit.training.predict_logits`, so the batches (and a noise layer's draws,
#: taken batch by batch in order) are exactly those of one call over the whole set.
_EVALUATION_CHUNK = 8 * 1024


@torch.no_grad()
def _evaluate_counted(
    model: nn.Module, features: torch.Tensor, labels: torch.Tensor, *, device: torch.device, bar: Progress
) -> dict[str, float]:
    """:func:`dpaudit.training.evaluate`, counting the examples done on ``bar`` (the same numbers, bit for bit)."""
    if len(features) <= _EVALUATION_CHUNK:
        res = evaluate(model, features, labels, device=device)
        bar.update(len(features))
        return res
    logits = []
    for start in range(0, len(features), _EVALUATION_CHUNK):
        chunk = features[start : start + _EVALUATION_CHUNK]
        logits.append(predict_logits(model, chunk, device=device))
        bar.update(len(chunk))
    out = torch.cat(logits)
    # As evaluate computes them from one call's logits.
    loss = nn.functional.cross_entropy(out, labels.cpu()).item()
    acc = (out.argmax(1) == labels.cpu()).float().mean().item()
    return {"accuracy": acc, "loss": loss}


def build_record(
    request: TrainRequest[Any],
    *,
    defense: str,
    model: nn.Module,
    claim: PrivacyClaim,
    started: float,
    built_options: Mapping[str, object] | None = None,
    extra_metrics: Mapping[str, object] | None = None,
    canaries: Any = (),
    owners: Any = (),
) -> TrainedModel:
    """Evaluates ``model`` on the request's members, non-members and test, and wraps everything as a record.

    The record's id is computed from the request as asked (its config, its model options), so a
    rerun of the same request finds it again. ``built_options`` (default: the request's) are the
    options the network was built with, stored so that loading rebuilds it: a defense that
    derives options from the data (DSSGD's input standardisation) passes them here. The
    request's ``progress`` shows the expected-score evaluation of a randomized model on stderr.

    Raises:
        TrainingDiverged: a parameter or buffer of ``model`` is NaN or infinite; such a model
            must not become a record (the trainers stop at a non-finite loss already; this
            catches divergence that left the loss finite, e.g. in a noise layer's rescaling).
    """
    bundle, splits, config, seed = request.bundle, request.splits, request.config, request.seed
    device = torch.device(request.device)
    model_options = request.options() if built_options is None else dict(built_options)
    check_finite_parameters(model, defense=defense, config=config)
    everything = bundle.all()
    members = everything.subset(splits.members)
    non_members = everything.subset(splits.non_members)
    metrics: dict[str, object] = {}
    parts = (("train", members), ("non_member", non_members), ("test", bundle.test))
    # On MNIST-sized splits this pass takes tens of seconds on a CPU: it reports progress.
    with Progress(
        sum(len(part.labels) for _, part in parts),
        f"evaluate {defense} {request.model_name} on members, non-members and test",
        enabled=request.progress,
    ) as bar:
        for name, part in parts:
            res = _evaluate_counted(model, part.features, part.labels, device=device, bar=bar)
            metrics[f"{name}_accuracy"] = res["accuracy"]
            metrics[f"{name}_loss"] = res["loss"]
    if is_randomized(model) and len(bundle.test):
        # A noise-layer model predicts the argmax of its expected scores (PixelDP, Lecuyer et al.
        # 2019 §3.3; HGM, Phan et al. 2019 Eq. 10), estimated from draws: that is its test
        # accuracy. One draw's argmax (kept beside it) is a noisier classifier than the one
        # released, and is what the train / non-member accuracies still measure.
        metrics["test_accuracy_single_draw"] = metrics["test_accuracy"]
        metrics["test_accuracy"] = expected_score_accuracy(
            model,
            bundle.test.features,
            bundle.test.labels,
            num_draws=PREDICTION_DRAWS,
            seed=seed,
            stream="record-test-accuracy",
            device=device,
            progress=request.progress,
        )
        metrics["test_accuracy_draws"] = PREDICTION_DRAWS
    metrics["train_seconds"] = time.monotonic() - started
    if len(bundle.test) and "test_accuracy" not in (extra_metrics or {}):
        # The counts behind the test accuracy, for its Clopper–Pearson interval on the pages: a share of
        # float32 means over n 0/1 outcomes rounds back to its count exactly.
        n = len(bundle.test.labels)
        metrics["test_examples"] = n
        metrics["test_correct"] = round(float(metrics["test_accuracy"]) * n)  # type: ignore[arg-type]
    metrics.update(extra_metrics or {})
    return TrainedModel(
        model_id=model_id_for(request, defense=defense),
        defense=defense,
        model_name=request.model_name,
        model_options=model_options,
        dataset=bundle.name,
        input_shape=bundle.input_shape,
        num_classes=bundle.num_classes,
        config={**config_dict(config), "split_seed": splits.seed},
        claim=claim,
        membership=Membership(
            members=splits.members,
            non_members=splits.non_members,
            population=splits.population,
            canaries=canaries,
            owners=np.asarray(owners, dtype=np.int64),
        ),
        seed=seed,
        metrics=metrics,
        provenance=provenance(device=str(device)),
    )


@torch.no_grad()
def check_finite_parameters(model: nn.Module, *, defense: str, config: Any) -> None:
    """Raises :class:`TrainingDiverged` naming the first parameter or buffer that is not finite."""
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            lr = getattr(config, "learning_rate", None)
            advice = f"; lower --learning-rate (now {lr:g})" if isinstance(lr, (int, float)) else ""
            raise TrainingDiverged(
                f"training diverged: the {defense} model's {name} holds NaN or infinite values after training{advice}"
            )


def bundle_for_members(dataset: ArrayDataset) -> tuple[DatasetBundle, Splits]:
    """A bundle whose train split is ``dataset`` (all members) and a one-sample dummy test split."""
    top = int(dataset.ids.max()) + 1 if len(dataset) else 0
    name = dataset.name.split("/")[0] or "audit"  # record ids may not contain '/'
    test = ArrayDataset(
        name=f"{name}/test",
        features=dataset.features[:1].clone(),
        labels=dataset.labels[:1].clone(),
        ids=np.array([top]),
        num_classes=dataset.num_classes,
    )
    bundle = DatasetBundle(
        name=name,
        train=dataset,
        test=test,
        num_classes=dataset.num_classes,
        input_shape=dataset.input_shape,
        description="audit training set",
    )
    splits = Splits(
        dataset=name,
        seed=0,
        members=dataset.ids.numpy(),
        non_members=np.zeros(0, dtype=np.int64),
        population=np.zeros(0, dtype=np.int64),
        test=np.array([top]),
    )
    return bundle, splits


#: Per process: a bundle's copies with a shortened test split, by limit (see :func:`evaluation_bundle`);
#: they go when the bundle does.
_EVALUATION_BUNDLES: weakref.WeakKeyDictionary[DatasetBundle, dict[int, DatasetBundle]] = weakref.WeakKeyDictionary()


def evaluation_bundle(bundle: DatasetBundle, limit: int | None) -> DatasetBundle:
    """``bundle`` with its test split cut to the first ``limit`` examples, made once per process.

    Kept because the copy's concatenated train+test view (what the trainer looks ids up in) costs
    a copy of the training set, which a worker training many teachers should pay once.
    """
    if limit is None or len(bundle.test) <= limit:
        return bundle
    copies = _EVALUATION_BUNDLES.setdefault(bundle, {})
    if limit not in copies:
        test_ids = np.sort(np.asarray(bundle.test.ids, dtype=np.int64))[:limit]
        copies.clear()  # one copy per bundle: a changed limit replaces it
        copies[limit] = dataclasses.replace(bundle, test=bundle.test.subset(test_ids))
    return copies[limit]


def expected_model_id(record: TrainedModel, *, derived_options: tuple[str, ...] = ()) -> str:
    """The id :func:`model_id_for` gives the training a stored record describes.

    The id hashes the config as the defense ran it (the stored config less ``split_seed``, which
    the id holds beside it, and less the keys a defense stores after computing the id), the
    model options as requested (less those the defense derived itself, ``derived_options``),
    the split seed and the number of members; a record whose id differs from this was edited.
    """
    stored = dict(record.config)
    config = {k: x for k, x in stored.items() if k not in _STORED_AFTER_ID}
    options = {k: x for k, x in record.model_options.items() if k not in derived_options}
    full = {
        "config": config,
        "model_options": options,
        "split_seed": stored.get("split_seed"),
        "num_members": int(len(record.membership.members)),
    }
    return make_model_id(
        defense=record.defense, dataset=record.dataset, model_name=record.model_name, seed=record.seed, config=full
    )


#: Config keys a record stores that its model id does not hash inside the config: the split seed
#: (hashed beside it) and what the certified defenses add after training (their certification
#: spec and the names of the authors' quirks, both functions of the config).
_STORED_AFTER_ID = ("split_seed", "certification", "authors_quirks")
