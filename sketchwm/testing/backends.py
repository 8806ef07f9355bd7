"""Backend conformance suite: one test class every backend — built-in or third-party — subclasses.

Usage (in a test module)::

    from sketchwm.testing.backends import BackendConformance

    class TestMyBackend(BackendConformance):
        def make_backend(self, directory, *, position_probe=False, stop_after=None, instruct=True):
            ...  # write a stand-in checkpoint into ``directory`` and load it through the backend's
                 # normal loading path; return the backend

A stand-in is the backend's model in miniature with the real interface (see
:mod:`sketchwm.testing.standins`). ``position_probe=True`` must give logits whose argmax at the row
that predicts sequence index j (j = 0 at the first token, no padding) is
``self.probe_ids(backend)[j % n]``; ``stop_after=k`` must make EOS more likely by a fixed step per
position after sequence index k (``stop_slope`` per position; only for backends with an EOS).

The checks (class attributes tune sizes):

* (a) ``test_alignment_*``: marginals are those of the right position through every path —
  :meth:`DLMBackend.logits` (full and with ``positions``), :meth:`DLMBackend.logits_at` (the packed
  and row paths), :meth:`DLMBackend.logits_rows` (equal to ``logits_at``, row for row, in two
  rounds of rows on one forward pass), and end to end through the engine's full, row and packed paths;
* (b) ``test_left_padding_*``: a batch of prompts of different lengths gives the same text as each
  prompt alone (greedy, low-confidence remasking; with and without the watermark);
* (c) ``test_eos_length_and_detection``: the length distribution of a model that stops after about
  k tokens is kept under the watermark (mean length within 5% of the unwatermarked one over >= 200
  samples, for two keys) and the cut texts are detected (mean z >= ``eos_min_z``); it needs the
  expected sketch that weights positions by their probability of being inside the text;
* (d) ``test_determinism_by_seed``: same seed, same texts; another seed, other texts;
* (e) ``test_chat_template``: string prompts go through the tokenizer's chat template exactly when
  the checkpoint is an instruct one (``chat_template="auto"``) and never with ``"off"``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from sketchwm.components import DLMBackend
from sketchwm.engine import MaskedDiffusionSampler

__all__ = ["BackendConformance", "save_probe_bert"]

_PROMPTS = ["the water is", "he", "a new way to make people", "we can find"]


def save_probe_bert(directory: str | Path, tokenizer: Any, probe: list[int] | None, seed: int = 0,
                    hidden: int = 32, max_len: int = 512) -> Path:
    """Save a ``BertForMaskedLM`` checkpoint (and ``tokenizer``) into ``directory``.

    With ``probe``, the weights are set so that the logits at position j are led by
    ``probe[j % len(probe)]`` (+~40 over small random logits): word and token-type embeddings are
    zero, position j's embedding is a spike on channel j % len(probe), every attention and
    feed-forward output is zero (layers pass the spike through), and the decoder maps channel c to
    ``probe[c]``. Without ``probe``: a seeded random BERT. Requires ``len(probe) <= hidden``.
    """
    from transformers import BertConfig, BertForMaskedLM

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cpu_rng = torch.random.get_rng_state()
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=2 * hidden, max_position_embeddings=max_len, tie_word_embeddings=False)
    model = BertForMaskedLM(cfg).eval()
    torch.random.set_rng_state(cpu_rng)
    if probe:
        n = len(probe)
        with torch.no_grad():
            emb = model.bert.embeddings
            emb.word_embeddings.weight.zero_()
            emb.token_type_embeddings.weight.zero_()
            emb.position_embeddings.weight.zero_()
            j = torch.arange(max_len)
            emb.position_embeddings.weight[j, j % n] = 10.0
            for layer in model.bert.encoder.layer:
                layer.attention.output.dense.weight.zero_()
                layer.attention.output.dense.bias.zero_()
                layer.output.dense.weight.zero_()
                layer.output.dense.bias.zero_()
            tr = model.cls.predictions.transform
            tr.dense.weight.copy_(torch.eye(hidden))
            tr.dense.bias.zero_()
            dec = model.cls.predictions.decoder
            dec.weight.mul_(0.01)
            dec.weight[torch.tensor(probe), torch.arange(n)] = 40.0 / math.sqrt(hidden)
            model.cls.predictions.bias.zero_()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


class BackendConformance:
    """Base test class of the backend conformance suite (module doc). Not collected by itself."""

    #: generation length and steps of the alignment/padding/determinism checks
    gen_length: int = 16
    steps: int = 8
    #: (c): samples per arm, generation length, the stand-in's ``stop_after``, minimum mean z
    eos_samples: int = 200
    eos_gen_length: int = 64
    eos_stop_after: int = 16
    #: EOS logit slope per position: gentle, so that stopping is spread out and a tilt on EOS shows
    eos_stop_slope: float = 0.1
    eos_min_z: float = 2.0
    #: scheme used for the watermarked checks
    scheme_params: dict[str, Any] = {"prior": {"source": "uniform"}}
    #: True if the instruct stand-in's tokenizer carries a chat template (LLaDA, Dream)
    instruct_has_template: bool = False

    @pytest.fixture(autouse=True)
    def _one_thread(self):
        """One intra-op thread (tiny models: threads only spin on a shared CPU); restored afterwards."""
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        yield
        torch.set_num_threads(before)

    # ---------------------------------------------------------------- to implement
    def make_backend(self, directory: Path, *, position_probe: bool = False, stop_after: int | None = None,
                     stop_slope: float = 1.5, instruct: bool = True) -> DLMBackend:
        """Write a stand-in checkpoint into ``directory`` and load it through the backend (module doc)."""
        raise NotImplementedError

    def probe_ids(self, backend: DLMBackend) -> list[int]:
        """The ids the position probe cycles through. Default: :func:`sketchwm.testing.standins.probe_ids`."""
        from sketchwm.testing.standins import probe_ids

        return probe_ids(backend.tokenizer)

    # ---------------------------------------------------------------- helpers
    _cache: dict = {}

    def backend(self, tmp_path_factory: Any, **kw: Any) -> DLMBackend:
        """The backend of ``make_backend(**kw)``, built once per class and variant."""
        k = (type(self).__qualname__, tuple(sorted(kw.items())))
        if k not in BackendConformance._cache:
            d = tmp_path_factory.mktemp(type(self).__name__.lower())
            BackendConformance._cache[k] = self.make_backend(d, **kw)
        return BackendConformance._cache[k]

    def watermarker(self, backend: DLMBackend, key: bytes = b"c" * 32) -> Any:
        from sketchwm.api import Watermarker
        from sketchwm.keys import WatermarkKey

        cfg = {"scheme": {"name": "global-sketch", "params": self.scheme_params}}
        return Watermarker(WatermarkKey(key), cfg, backend=backend)

    def _probe_input(self, be: DLMBackend) -> tuple[torch.Tensor, torch.Tensor, int]:
        prompt = be.encode(["the water is a new way"])[0]
        P, G = len(prompt), self.gen_length
        x = torch.tensor([prompt + [be.mask_token_id] * G])
        return x, torch.ones_like(x, dtype=torch.bool), P

    def _expected(self, be: DLMBackend, L: int) -> torch.Tensor:
        probe = torch.tensor(self.probe_ids(be))
        return probe[torch.arange(L) % len(probe)]

    # ---------------------------------------------------------------- (a) alignment
    def test_alignment_backend_paths(self, tmp_path_factory):
        be = self.backend(tmp_path_factory, position_probe=True)
        x, attn, P = self._probe_input(be)
        L = x.shape[1]
        want = self._expected(be, L)
        rows = torch.arange(1, L)  # row 0 of a next-token model has no previous row: not checked
        full = be.logits(x, attn).cpu()
        assert full.shape == (1, L, be.vocab_size)
        assert torch.equal(full[0, rows].argmax(-1), want[rows]), "full logits misaligned"
        idx = torch.tensor([[L - 1, P, P + 3, 1, P - 1]])
        for mask in (None, attn):  # the engine passes a mask; user code may not
            at = be.logits_at(x, mask, idx).cpu()  # packed and row paths
            assert torch.equal(at[0].argmax(-1), want[idx[0]]), "logits_at (packed/row paths) misaligned"
            assert torch.allclose(at[0], full[0, idx[0]], atol=1e-4), "logits_at differs from logits"
            rows_of = be.logits_rows(x, mask)  # one forward pass, the rows in two rounds
            first, second = rows_of(idx[:, :2]).cpu(), rows_of(idx).cpu()
            assert torch.allclose(second, be.logits_at(x, mask, idx).cpu(), atol=1e-5), "logits_rows differs from logits_at"
            assert torch.allclose(first, second[:, :2], atol=1e-5), "logits_rows: a row differs between two rounds"
        pos = torch.zeros_like(attn)
        pos[0, P:] = True
        part = be.logits(x, attn, pos).cpu()
        assert torch.allclose(part[0, P:], full[0, P:], atol=1e-4), "logits(positions=) differs from logits"

    @pytest.mark.parametrize("path", ["full", "rows", "packed"])
    def test_alignment_engine_paths(self, tmp_path_factory, path):
        be = self.backend(tmp_path_factory, position_probe=True)
        x, _, P = self._probe_input(be)
        cfg = {"gen_length": self.gen_length, "block_length": self.gen_length, "steps": self.steps, "temperature": 0.0,
               "top_p": 1.0, "stop_at_eos": False, "remasking": "low_confidence" if path == "full" else "random"}
        scheme = self.watermarker(be).scheme if path == "packed" else None
        out = MaskedDiffusionSampler(be, cfg, scheme).generate([x[0, :P].tolist()])
        want = self._expected(be, P + self.gen_length)[P:]
        assert torch.equal(out.ids[0], want), f"{path} path: generated {out.ids[0].tolist()}, expected {want.tolist()}"

    # ---------------------------------------------------------------- (b) left padding
    @pytest.mark.parametrize("watermark", [False, True])
    def test_left_padding_batch_equals_alone(self, tmp_path_factory, watermark):
        be = self.backend(tmp_path_factory)
        cfg = {"gen_length": self.gen_length, "block_length": self.gen_length, "steps": self.steps,
               "temperature": 0.0, "top_p": 1.0, "remasking": "low_confidence"}
        scheme = self.watermarker(be).scheme if watermark else None
        s = MaskedDiffusionSampler(be, cfg, scheme)
        batch = s.generate(_PROMPTS)
        for i, p in enumerate(_PROMPTS):
            alone = s.generate([p])
            assert torch.equal(batch.ids[i], alone.ids[0]), f"prompt {i} ({p!r}) differs in a left-padded batch"

    # ---------------------------------------------------------------- (c) EOS
    @pytest.mark.parametrize("key", [bytes(range(32)), b"c" * 32], ids=["key0", "key1"])
    def test_eos_length_and_detection(self, tmp_path_factory, key):
        probe = self.backend(tmp_path_factory)
        if probe.eos_token_id is None:
            pytest.skip(f"backend '{probe.name}' has no EOS: fixed-length generation")
        P = len(probe.encode_prompts(["the water"])[0])
        be = self.backend(tmp_path_factory, stop_after=P + self.eos_stop_after, stop_slope=self.eos_stop_slope)
        wm = self.watermarker(be, key)
        cfg = dict(gen_length=self.eos_gen_length, block_length=self.eos_gen_length, steps=self.eos_gen_length // 2,
                   temperature=1.0, top_p=1.0, remasking="random")
        prompts = ["the water"] * self.eos_samples
        ck = ("eos-base", type(self).__qualname__)
        if ck not in BackendConformance._cache:  # the unwatermarked arm does not depend on the key
            BackendConformance._cache[ck] = wm.generate(prompts, seed=1, watermark=False, batch_size=100, **cfg)
        base = BackendConformance._cache[ck]
        marked = wm.generate(prompts, seed=1, batch_size=100, **cfg)
        m_base, m_wm = base.lengths.float().mean().item(), marked.lengths.float().mean().item()
        assert 0 < m_base < self.eos_gen_length, f"stand-in does not stop: mean length {m_base}"
        ids = [t for t in marked.token_lists() if len(t) >= wm.scheme.min_tokens]
        assert len(ids) >= self.eos_samples // 2, f"only {len(ids)} cut texts reach {wm.scheme.min_tokens} tokens"
        z = wm.detect_ids(ids).z.float()
        assert float(z.mean()) >= self.eos_min_z, f"mean z of the cut texts {float(z.mean()):.2f} < {self.eos_min_z}"
        assert abs(m_wm / m_base - 1) <= 0.05, f"mean length {m_wm:.2f} watermarked vs {m_base:.2f} unwatermarked"

    # ---------------------------------------------------------------- (d) determinism
    def test_determinism_by_seed(self, tmp_path_factory):
        be = self.backend(tmp_path_factory)
        wm = self.watermarker(be)
        cfg = dict(gen_length=self.gen_length, block_length=self.gen_length, steps=self.steps, temperature=1.0,
                   top_p=1.0, stop_at_eos=False)
        a = wm.generate(_PROMPTS, seed=3, **cfg)
        b = wm.generate(_PROMPTS, seed=3, **cfg)
        c = wm.generate(_PROMPTS, seed=4, **cfg)
        assert torch.equal(a.ids, b.ids) and a.texts == b.texts
        assert not torch.equal(a.ids, c.ids)

    # ---------------------------------------------------------------- (e) chat template
    def test_chat_template(self, tmp_path_factory):
        be = self.backend(tmp_path_factory)
        tok = be.tokenizer
        has = bool(getattr(tok, "chat_template", None))
        assert has == self.instruct_has_template, f"instruct stand-in chat template present: {has}"
        plain = be.encode(["the water"])[0]
        got = be.encode_prompts(["the water"])[0]
        if has:
            s = tok.apply_chat_template([{"role": "user", "content": "the water"}], add_generation_prompt=True, tokenize=False)
            assert got == list(tok.encode(s, add_special_tokens=False)) and got != plain
            out = MaskedDiffusionSampler(be, {"gen_length": 8, "block_length": 8, "steps": 4}).generate(["the water"])
            assert out.prompts == ["the water"]
        else:
            assert got == plain
        if hasattr(be.params, "chat_template"):
            off = type(be)(be.params.model_copy(update={"chat_template": "off"}), model=be.model, tokenizer=tok)
            assert off.encode_prompts(["the water"])[0] == plain
