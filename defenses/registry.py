"""The defense registry: what a defense provides, and :data:`DEFENSES`, where each one registers itself.

A defense is one module that defines its config and its train function and, beside them,
calls ``DEFENSES.register(DefenseSpec(...))``. :data:`DEFENSES` imports every module under
``defenses`` on its first lookup (:class:`dpaudit.registry.Registry`), so the CLI, the runs,
``compare``'s grid, ``report`` and the contract suite see a new defense without an edit
anywhere else.

Torch-free: the types a train function takes and returns are named, not imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dpaudit import _validate as v
from dpaudit.parts import Artefact, PlotStyle
from dpaudit.registry import Registry
from dpaudit.results.record import RECORD_FILE, WEIGHTS_FILE

if TYPE_CHECKING:
    from torch import nn

    from dpaudit.replay import ReplayTrace
    from dpaudit.results.record import TrainedModel
    from dpaudit.train_request import TrainRequest
    from dpaudit.training import TrainWorkspace

__all__ = ["DEFENSES", "DefenseSpec", "ReplayFn", "SubmodelTrainFn", "TrainFn"]


class TrainFn(Protocol):
    """What every defense's ``train`` is: a :class:`dpaudit.train_request.TrainRequest` in, a record and its model out.

    The record (:class:`dpaudit.results.record.TrainedModel`) carries the model id, the
    membership ground truth, the config as it ran and the privacy claim; the module is in eval
    mode on the request's ``device``. The same request gives the same weights.
    """

    def __call__(self, request: TrainRequest[Any], /) -> tuple[TrainedModel, nn.Module]: ...


class SubmodelTrainFn(Protocol):
    """``train`` of a defense with sub-models (:attr:`DefenseSpec.submodels`): :class:`TrainFn` plus ``workspace``.

    ``workspace`` says where the sub-models train (an executor) and where they are cached
    (:class:`dpaudit.training.TrainWorkspace`); ``None`` keeps nothing and trains in-process.
    """

    def __call__(
        self, request: TrainRequest[Any], /, *, workspace: TrainWorkspace | None = None
    ) -> tuple[TrainedModel, nn.Module]: ...


class ReplayFn(Protocol):
    """A defense's neighbouring replay (:attr:`DefenseSpec.replay`): the same request as its ``train``, a trace out.

    The request's ``progress`` is ignored: a replay trains quietly.
    """

    def __call__(self, request: TrainRequest[Any], /) -> ReplayTrace: ...


@dataclass(frozen=True, kw_only=True)
class DefenseSpec:
    """A registered defense: everything the CLI, the runs and the reports need to know about it.

    Attributes:
        name: registry key (``--defense`` value, ``record.defense``).
        summary: one line for ``--help`` and reports (cite the paper).
        config_type: frozen dataclass of the defense's hyper-parameters.
        train: the :class:`TrainFn` (a :class:`SubmodelTrainFn` when ``submodels`` is set).
        claim_kind: the :class:`dpaudit.privacy.claims.PrivacyClaim` kind its records carry,
            or, for a defense whose kind depends on its configuration, a function
            ``claim_kind(config) -> str`` taking the config object or a stored record's config
            mapping (DSSGD: ``dssgd-svt`` with the DP upload, else ``nonprivate``, and its
            participants' local models are non-private); read it through :meth:`claim_kind_for`.
            A loaded record's claim is rebuilt from its config and metrics by the kind's
            rebuilder (:mod:`dpaudit.privacy.record_claims`), which every kind must register.
        audit_trainer: optional white-box adapter for audits: ``audit_trainer(config=...,
            model_name=..., device=...)`` returns an
            :class:`attacks.audit.trials.HookedTrainer`.
        certification: optional ``certification(config) -> CertificationSpec |
            SmoothingCertificationSpec`` for defenses ``certify`` can certify: a noise layer in
            the model (PixelDP, HGM) or Gaussian smoothing of its input (Cohen et al. 2019).
        certified_mechanism: for a noise-layer defense, the (Gaussian calibration, largest
            ε_r it may certify) every certification spec it stores must state; ``certify``
            refuses a record whose spec says otherwise.
        report_lines: optional ``report_lines(record) -> list[str]``: lines ``dpaudit train``
            prints after the common ones (DSSGD: its reference rows and engine).
        submodels: for a defense that trains sub-models on an executor and caches them in the
            run (PATE's teachers), the name of that cache (``RUN_DIR/records/NAME/``); ``train``
            then also takes ``workspace=`` (:class:`SubmodelTrainFn`).
        family: the family ``dpaudit compare`` draws one privacy–utility curve for (``None``:
            the defense is its own family); PixelDP, AGM and HGM share ``noise-layer``.
        derived_options: model options the defense derives itself and stores on the record
            (the noise layer of the certified defenses, DSSGD's input standardisation), which
            its model id does not hash (:func:`defenses._common.expected_model_id`).
        submodel_identity: for a defense with sub-models, ``submodel_identity(record) ->
            (model_id, directory_name) | None``: what a sub-model's record (a PATE teacher, a
            DSSGD participant) must be called, or ``None`` for a record that is not one.
        per_example_gradients: whether training computes a clipped gradient per example
            (DP-SGD and what trains through it): the time and memory estimates scale by that.
        resolve_defaults: optional ``resolve_defaults(config, *, num_members, model_name,
            model_options, bundle) -> (config, note | None)``: the config with the defaults it
            left unset derived from public facts (DP-SGD's lot size, learning rate, …), resolved
            before the model id is digested; ``note`` says what was derived.
        check_budget: optional ``check_budget(config, *, bundle, splits, model_name,
            model_options)`` raising ValueError when the privacy budget cannot be met, so the
            run is refused before anything is written.
        chance_hint: the flags to change first when a model of this defense trains to chance
            (the warning names them; ``None``: the generic training flags).
        replay: for a defense with a DP claim, a :class:`ReplayFn`, ``replay(request) ->
            dpaudit.replay.ReplayTrace``: runs the defense's own pipeline on the request's
            members with its seed and records every
            mechanism input (with its claimed sensitivity) and every value released outside the
            mechanisms. The contract suite replays it on D and D ± one record and requires
            :func:`dpaudit.replay.compare_traces` to hold; every defense whose claim is not
            ``nonprivate`` must provide it.
        order: its place in listings (``--defense`` choices, error messages): the baseline
            first, then DP training, the certified defenses, PATE and DSSGD; ascending.
        artefacts: the files (:class:`dpaudit.parts.Artefact`) its records hold beside
            ``record.json`` and the weights (PATE: ``pate.npz``, ``pate.json``, ``private/``;
            DSSGD: ``uploads.npz``). The trained-model page lists them; one marked ``required``
            decides whether ``report_kind`` shows a record.
        report_kind: the report kind (:data:`reports.kinds.REPORT_KINDS`) whose page shows its
            records instead of the trained-model page (PATE: ``pate``, DSSGD: ``dssgd``); read
            by the reports through :func:`dpaudit.parts.record_report_kind`.
        run_module: the application run (a module of ``dpaudit.app.runs``) of the verb that
            works on its records alone (``dpaudit pate``, ``dpaudit attack uploads``); that run
            refuses a record whose defense names another.
        style: its colour, marker and dash in every figure (:class:`dpaudit.parts.PlotStyle`);
            ``None``: a colour and marker chosen by a stable hash of its name.
    """

    name: str
    summary: str
    config_type: type
    train: TrainFn | SubmodelTrainFn
    claim_kind: str | Callable[[Any], str]
    audit_trainer: Callable[..., Any] | None = None
    certification: Callable[[Any], Any] | None = None
    certified_mechanism: tuple[str, float | None] | None = None
    submodels: str | None = None
    report_lines: Callable[[Any], list[str]] | None = None
    family: str | None = None
    derived_options: tuple[str, ...] = ()
    submodel_identity: Callable[[Any], tuple[str, str] | None] | None = None
    per_example_gradients: bool = False
    resolve_defaults: Callable[..., tuple[Any, str | None]] | None = None
    check_budget: Callable[..., None] | None = None
    chance_hint: str | None = None
    replay: ReplayFn | None = None
    order: int = 100
    artefacts: tuple[Artefact, ...] = ()
    report_kind: str | None = None
    run_module: str | None = None
    style: PlotStyle | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.artefacts, tuple) or not all(isinstance(a, Artefact) for a in self.artefacts):
            raise v.invalid_type("artefacts", f"artefacts must be a tuple of Artefact, got {self.artefacts!r}")
        names = [a.name.rstrip("/") for a in self.artefacts]
        if len(set(names)) != len(names):
            raise v.invalid("artefacts", f"artefacts must name each file once, got {names}")
        reserved = {RECORD_FILE, WEIGHTS_FILE}
        if reserved & set(names):
            raise v.invalid(
                "artefacts",
                f"artefacts must not name the record's own files ({', '.join(sorted(reserved))}), got {names}",
            )
        if self.report_kind is not None and (
            not isinstance(self.report_kind, str) or not self.report_kind.isidentifier()
        ):
            raise v.invalid(
                "report_kind", f"report_kind must name a report kind (a Python identifier), got {self.report_kind!r}"
            )
        if self.run_module is not None and (
            not isinstance(self.run_module, str) or not self.run_module.startswith("dpaudit.app.runs.")
        ):
            raise v.invalid("run_module", f"run_module must be a module of dpaudit.app.runs, got {self.run_module!r}")
        if self.style is not None and not isinstance(self.style, PlotStyle):
            raise v.invalid_type("style", f"style must be a PlotStyle, got {self.style!r}")

    def claim_kind_for(self, config: Any) -> str:
        """The claim kind a training with ``config`` returns, or a record with this stored config carries."""
        return self.claim_kind(config) if callable(self.claim_kind) else self.claim_kind


#: Every defense, listed by its ``order``; each module under ``defenses`` registers its own.
DEFENSES: Registry[DefenseSpec] = Registry(
    "defense", argument="--defense", discover=("defenses",), order=lambda spec: spec.order
)
