"""A conformance suite for watermark schemes and sketches, importable by third-party plugin tests.

sketchwm's own tests run it on every registered scheme (``tests/test_schemes_conformance.py``); a
plugin's tests call the same functions on its components::

    from sketchwm.testing.schemes import check_scheme, check_sketch, plugin_registry
    import my_pkg.my_sketch

    def test_my_sketch_conforms():
        check_sketch(my_pkg.my_sketch.DenseGaussianSketch)

    def test_global_sketch_with_my_sketch_conforms():
        reg = plugin_registry(my_pkg.my_sketch)        # built-ins + the plugin, installed or not
        check_scheme("global-sketch", {"prior": {"source": "uniform"},
                                       "sketch": {"name": "dense-gaussian", "params": {"D": 256}}}, registry=reg)

Everything runs on the tiny random BERT of :mod:`sketchwm.testing` (vocabulary 120, CPU): 8 prompts,
64 generated tokens, 32 steps; a scheme's full check takes seconds. Each ``check_*`` raises
``AssertionError`` with the numbers that failed. Properties (seeded; tolerances at each assertion):

* round trip — watermarked texts get small p-values (median below ``median_p``) and most exceed the
  95% quantile of 32 unwatermarked texts' scores; statistics have shape (B,) float64; where the
  score separates them (ROC-AUC >= 0.9), the decision rule without calibration (τ_α, else p <= α)
  flags at least one (an analytic threshold that makes TPR 0 is wrong for the scheme);
* the null — p-values of unwatermarked texts are not stochastically smaller than U(0, 1)
  (one-sided Kolmogorov-Smirnov, level 0.1%), and the analytic threshold, if any, flags <= 10%;
* other key — text watermarked with one key is not detected with another (median p > 0.05);
* reproducibility — the same seed and key give identical texts;
* errors — ids outside the vocabulary raise ``InputError``, an unknown param ``ConfigError``;
* configs — ``Params`` round-trip through JSON.

For a sketch (:func:`check_sketch`): shapes and dtypes of ``project``/``token_scores``, linearity,
the adjoint identity ⟨Φᵀx, r⟩ = ⟨x, Φr⟩ that the tilt of eq. 6-7 relies on, permutation invariance
of the sketch of ids, the same tables for the same key and different ones for another key, and
``Params`` through JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..errors import ConfigError, InputError
from ..keys import WatermarkKey

__all__ = [
    "SAMPLER", "PROMPTS", "KEY", "OTHER_KEY", "SchemeUnderTest", "SCHEME_CHECKS", "check_scheme", "check_sketch",
    "plugin_registry", "check_round_trip", "check_null", "check_other_key", "check_reproducible", "check_errors",
    "check_params_json",
]

#: Sampler of the suite: 64 tokens, one block, 32 steps, random remasking.
SAMPLER = {"gen_length": 64, "block_length": 64, "steps": 32, "temperature": 1.0, "remasking": "random"}
PROMPTS = ["the water", "a man said", "people like to", "one day", "time", "many new words", "the first", "we can"]
KEY = WatermarkKey(b"conformance-suite-secret-key-0001")
OTHER_KEY = WatermarkKey(b"conformance-suite-secret-key-0002")


def plugin_registry(*modules: Any) -> Any:
    """A :class:`sketchwm.registry.Registry` of the installed plugins plus ``modules`` (hook modules of
    a plugin under test, registered directly: no installation needed)."""
    from ..registry import Registry, get_plugin_manager

    return Registry(get_plugin_manager(extra_plugins=modules))


_NULL_IDS: dict[int, torch.Tensor] = {}


def _all_valid(ids: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(ids, dtype=torch.bool)


@dataclass
class SchemeUnderTest:
    """A scheme name with its test params, backend and registry; caches the null texts' scores.

    Args:
        name: registered scheme name.
        params: scheme params for the tiny model (e.g. a uniform prior for ``global-sketch``).
        backend: a DLM backend (default: :func:`sketchwm.testing.tiny_backend`).
        registry: where ``name`` (and the components it names) are registered (default: installed).
        median_p: bound on the median p-value of watermarked 64-token texts.
    """

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    backend: Any = None
    registry: Any = None
    median_p: float = 1e-3
    _null: Any = None

    def __post_init__(self) -> None:
        if self.backend is None:
            from .tiny import tiny_backend

            self.backend = tiny_backend(seed=0)
        if self.registry is None:
            from ..registry import get_registry

            self.registry = get_registry()

    def make(self, key: WatermarkKey = KEY, **overrides: Any) -> Any:
        """The keyed scheme over the backend's vocabulary (``overrides`` update the params)."""
        from ..context import BuildContext

        return self.registry.build("scheme", self.name, {**self.params, **overrides},
                                   BuildContext(key=key, vocab_size=self.backend.vocab_size))

    def generate(self, scheme: Any, prompts: list[str], seed: int, **sampler: Any) -> Any:
        from ..engine import MaskedDiffusionSampler

        return MaskedDiffusionSampler(self.backend, {**SAMPLER, **sampler}, scheme).generate(
            prompts, torch.Generator().manual_seed(seed))

    def null_ids(self) -> torch.Tensor:
        """32 unwatermarked texts of the backend (no key at all), (32, 64) int64; cached per backend."""
        k = id(self.backend)
        if k not in _NULL_IDS:
            _NULL_IDS[k] = self.generate(None, PROMPTS * 4, 123).ids
        return _NULL_IDS[k]

    def null_scores(self) -> Any:
        """The scheme's ``SchemeScores`` of :meth:`null_ids` (computed once)."""
        if self._null is None:
            ids = self.null_ids()
            self._null = self.make().score_ids(ids, _all_valid(ids))
        return self._null


def check_round_trip(sut: SchemeUnderTest) -> None:
    """Watermarked texts: (B,) float64 statistics, p in [0, 1], median p < ``median_p``, >= 75% above the
    null's 95% quantile, the analytic threshold (if any) flags <= 10% of the null texts, and the
    uncalibrated decision rule flags some watermarked text where the ROC-AUC is >= 0.9."""
    scheme = sut.make()
    out = sut.generate(scheme, PROMPTS, 1)
    assert out.ids.shape == (len(PROMPTS), SAMPLER["gen_length"])
    s = scheme.score_ids(out.ids, _all_valid(out.ids))
    B = len(PROMPTS)
    for f in (s.score, s.z, s.p_value):
        assert f.shape == (B,) and f.dtype == torch.float64, (f.shape, f.dtype)
    assert s.n_scored.shape == (B,) and s.n_scored.dtype == torch.int64
    assert bool(((s.p_value >= 0) & (s.p_value <= 1)).all()), s.p_value
    assert isinstance(s.p_value_method, str) and s.p_value_method
    assert float(s.p_value.median()) < sut.median_p, f"median watermarked p-value {float(s.p_value.median()):.3g}"
    null = sut.null_scores()
    tau = float(torch.quantile(null.score, 0.95))
    assert float((s.score > tau).double().mean()) >= 0.75, (s.score, tau)
    try:
        thr = scheme.analytic_threshold(0.01, SAMPLER["gen_length"])
    except NotImplementedError:
        thr = None
    if thr is not None:
        assert float((null.score >= thr).double().mean()) <= 0.1, (null.score, thr)
    # the one rule without a calibration (τ_α, else p <= α) must detect texts that the score separates:
    # a threshold that rejects every watermarked text where the ROC-AUC is high is wrong for this scheme
    from ..stats import decide

    auc = float(((s.score[:, None] > null.score[None, :]).double()
                 + 0.5 * (s.score[:, None] == null.score[None, :]).double()).mean())
    tpr = float(decide(s.score, s.p_value, 0.01, None if thr is None else torch.full((B,), float(thr))).double().mean())
    assert not (auc >= 0.9 and tpr == 0.0), (
        f"the analytic decision rule flags no watermarked text (TPR 0 at alpha 1%) though the score separates them "
        f"from unwatermarked ones (ROC-AUC {auc:.3f}): threshold {thr}, scores {s.score.tolist()}")


def check_null(sut: SchemeUnderTest) -> None:
    """Unwatermarked texts: the 32 p-values are in [0, 1], not stochastically smaller than U(0, 1)
    (one-sided KS, level 0.1%), and none below 1e-4."""
    import numpy as np
    from scipy import stats

    s = sut.null_scores()
    p = s.p_value.numpy()
    assert np.all((p >= 0) & (p <= 1))
    assert stats.kstest(p, "uniform", alternative="greater").pvalue > 1e-3, np.sort(p)
    assert float(s.p_value.min()) > 1e-4, np.sort(p)


def check_other_key(sut: SchemeUnderTest) -> None:
    """Text watermarked with one key is not detected with another (median p > 0.05)."""
    out = sut.generate(sut.make(), PROMPTS, 2, gen_length=32, block_length=32, steps=16)
    s = sut.make(OTHER_KEY).score_ids(out.ids, _all_valid(out.ids))
    assert float(s.p_value.median()) > 0.05, s.p_value


def check_reproducible(sut: SchemeUnderTest) -> None:
    """The same seed and key give identical texts."""
    runs = [sut.generate(sut.make(), PROMPTS[:2], 5, gen_length=16, block_length=16, steps=8).ids for _ in range(2)]
    assert torch.equal(runs[0], runs[1])


def check_errors(sut: SchemeUnderTest) -> None:
    """Ids outside [0, V) raise InputError; an unknown param raises ConfigError."""
    scheme = sut.make()
    V = sut.backend.vocab_size
    ids = torch.randint(5, V, (2, 20), generator=torch.Generator().manual_seed(0))
    for bad in (V, -1):
        broken = ids.clone()
        broken[1, 3] = bad
        try:
            scheme.score_ids(broken, _all_valid(broken))
        except InputError:
            pass
        else:
            raise AssertionError(f"score_ids accepted token id {bad} outside [0, {V})")
    try:
        sut.make(no_such_param=1)
    except ConfigError:
        pass
    else:
        raise AssertionError("an unknown param did not raise ConfigError")


def check_params_json(sut: SchemeUnderTest) -> None:
    """``describe()`` names the scheme and its params round-trip through JSON."""
    scheme = sut.make()
    d = scheme.describe()
    assert d["name"] == sut.name
    assert type(scheme).parse_params(json.loads(json.dumps(d["params"]))) == scheme.params


#: name → check, in the order :func:`check_scheme` runs them.
SCHEME_CHECKS: dict[str, Callable[[SchemeUnderTest], None]] = {
    "round_trip": check_round_trip, "null": check_null, "other_key": check_other_key,
    "reproducible": check_reproducible, "errors": check_errors, "params_json": check_params_json,
}


def check_scheme(name: str, params: dict[str, Any] | None = None, *, backend: Any = None, registry: Any = None,
                 median_p: float = 1e-3, checks: list[str] | None = None) -> None:
    """Run the scheme checks (all, or those named in ``checks``) on scheme ``name``; see module doc.

    Raises:
        AssertionError: the first failing property. RegistryError: ``name`` not registered.
    """
    sut = SchemeUnderTest(name, dict(params or {}), backend, registry, median_p)
    for c in checks or list(SCHEME_CHECKS):
        SCHEME_CHECKS[c](sut)


def check_sketch(cls: Any, params: dict[str, Any] | None = None, vocab_size: int = 120) -> None:
    """Check a :class:`sketchwm.components.Sketch` subclass (see module doc).

    Raises:
        AssertionError: the first failing property.
    """
    from ..components import Sketch

    assert isinstance(cls, type) and issubclass(cls, Sketch), f"{cls!r} is not a Sketch subclass"
    assert cls.name, "a sketch needs a registered name"
    V = vocab_size
    sk = cls(params, KEY, V)
    again = cls(params, KEY, V)
    other = cls(params, OTHER_KEY, V)
    D = sk.dim
    assert isinstance(D, int) and D >= 1, D
    g = torch.Generator().manual_seed(0)
    x = torch.rand(3, V, generator=g)
    r = torch.randn(3, D, generator=g)
    px, tr = sk.project(x), sk.token_scores(r)
    assert px.shape == (3, D) and px.dtype == torch.float32, (px.shape, px.dtype)
    assert tr.shape == (3, V) and tr.dtype == torch.float32, (tr.shape, tr.dtype)
    y = torch.rand(3, V, generator=g)
    lin = sk.project(2.0 * x + y) - (2.0 * sk.project(x) + sk.project(y))
    assert float(lin.abs().max()) <= 1e-4 * (1.0 + float(px.abs().max())), "project is not linear"
    lhs = (px.double() * r.double()).sum(1)
    rhs = (x.double() * tr.double()).sum(1)
    assert torch.allclose(lhs, rhs, rtol=1e-4, atol=1e-4), f"<Phi^T x, r> = {lhs.tolist()} but <x, Phi r> = {rhs.tolist()}"
    ids = torch.randint(0, V, (2, 40), generator=g)
    h = sk.sketch(ids)
    assert h.shape == (2, D)
    perm = torch.randperm(40, generator=g)
    assert torch.allclose(h, sk.sketch(ids[:, perm]), atol=1e-5), "the sketch depends on token order"
    assert torch.equal(sk.project(x), again.project(x)), "the same key gave different tables"
    assert not torch.allclose(sk.project(x), other.project(x)), "another key gave the same tables"
    assert cls.parse_params(json.loads(json.dumps(sk.params.model_dump(mode="json")))) == sk.params
